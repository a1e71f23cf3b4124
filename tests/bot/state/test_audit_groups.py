"""Audit writes committed in groups (bot/state/audit.py), against a real Redis.

Why this way: the promise is about round trips and about what ends up in the streams, so the
test counts the pipelines the log opens (a wrapper around the real client) and reads the real
streams back; a cancellation is delivered while the group's write is in flight, held there by
a pipeline that waits for the test's word.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.keys import BotKeys
from bot.state.audit import AuditEvent, AuditLog

KEYS = BotKeys()


class CountingRedis:
    """The real client, with the pipelines it opens counted (and optionally held)."""

    def __init__(self, redis: aioredis.Redis) -> None:
        self._redis = redis
        self.pipelines = 0
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)  # reads go to the real client, uncounted

    def pipeline(self, **kwargs: Any) -> Any:
        self.pipelines += 1
        real = self._redis.pipeline(**kwargs)
        outer = self

        class Held:
            async def __aenter__(self) -> Any:
                pipe = await real.__aenter__()
                execute = pipe.execute

                async def held_execute() -> Any:
                    outer.entered.set()
                    if outer.hold is not None:
                        await outer.hold.wait()
                    return await execute()

                pipe.execute = held_execute  # type: ignore[method-assign,assignment]
                return pipe

            async def __aexit__(self, *exc: Any) -> Any:
                return await real.__aexit__(*exc)

        return Held()


def event(session: str, n: int) -> AuditEvent:
    return AuditEvent(ts=float(n), session=session, turn="t", kind="tool_call", data={"n": n})


async def test_concurrent_callers_share_one_round_trip_and_keep_their_order(
    redis_client: aioredis.Redis,
) -> None:
    counting = CountingRedis(redis_client)
    audit = AuditLog(counting, KEYS)  # type: ignore[arg-type]

    async def analysis(session: str) -> None:
        for n in range(3):
            await audit.record(event(session, n))

    sessions = [f"s{i}" for i in range(50)]
    async with asyncio.TaskGroup() as group:
        for session in sessions:
            group.create_task(analysis(session))
    assert counting.pipelines == 3  # 150 events: each round of the 50 analyses in one write
    for session in sessions:
        read = await audit.read(session)
        assert [e.data["n"] for e in read] == [0, 1, 2]
    assert audit.failures == 0


async def test_a_caller_cancelled_during_the_write_returns_after_it_and_its_event_is_kept(
    redis_client: aioredis.Redis,
) -> None:
    counting = CountingRedis(redis_client)
    counting.hold = asyncio.Event()
    audit = AuditLog(counting, KEYS)  # type: ignore[arg-type]
    first = asyncio.create_task(audit.record(event("s1", 1)))
    second = asyncio.create_task(audit.record(event("s2", 2)))
    await counting.entered.wait()  # the group's write is in flight, held
    first.cancel()
    await asyncio.sleep(0)
    assert not first.done()  # it waits for the write it joined
    counting.hold.set()
    await asyncio.gather(first, second, return_exceptions=True)
    assert first.cancelled() and second.done() and second.exception() is None
    assert [e.data["n"] for e in await audit.read("s1")] == [1]  # written all the same
    assert [e.data["n"] for e in await audit.read("s2")] == [2]
    assert counting.pipelines == 1


async def test_a_write_cancelled_before_it_ran_cancels_no_caller_and_loses_nothing(
    redis_client: aioredis.Redis,
) -> None:
    """A group write cancelled before it ran (a loop shutting down) cancels none of its callers.

    The next record starts a write that takes their events too.
    """
    audit = AuditLog(redis_client, KEYS)
    caller = asyncio.create_task(audit.record(event("s1", 1)))
    await asyncio.sleep(0)  # the caller has joined the group's write, which has not run yet
    writing = audit._writing
    assert writing is not None and not writing.done()
    writing.cancel()
    await caller  # returns: nothing cancelled it
    await audit.record(event("s1", 2))
    assert [e.data["n"] for e in await audit.read("s1")] == [1, 2]
    assert audit.failures == 0


async def test_a_write_to_a_stalled_redis_gives_up_and_so_does_a_cancelled_caller(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write is bounded (`WRITE_TIMEOUT_S`): its callers return, the loss is counted."""
    from bot.state import audit as audit_module

    monkeypatch.setattr(audit_module, "WRITE_TIMEOUT_S", 0.2)
    counting = CountingRedis(redis_client)
    counting.hold = asyncio.Event()  # never set: Redis stalls for good
    audit = AuditLog(counting, KEYS)  # type: ignore[arg-type]
    waiting = asyncio.create_task(audit.record(event("s1", 1)))
    cancelled = asyncio.create_task(audit.record(event("s2", 2)))
    await counting.entered.wait()
    cancelled.cancel()
    await asyncio.gather(waiting, cancelled, return_exceptions=True)
    assert waiting.exception() is None and cancelled.cancelled()
    assert audit.failures == 2
