"""`BellHub`: every ring a process waits for, heard on one Redis connection.

A ring only wakes a waiter (a live turn's signal watcher, a worker waiting for a session's
lease); the durable records it points at (tombstone, steer queue, drain key, the lease itself)
are what the waiter then reads. Rings are Redis Pub/Sub messages on a session's channels
(`Keys.bell`, `BotKeys.lease_free`), so what a process holds to hear them is one pattern
subscription, whatever the number of its live turns: a blocking read per turn had held one
pooled connection each, and a worker with a hundred live analyses had exhausted its pool.

Pub/Sub keeps nothing for a subscriber that is not connected, so each time the subscription is
(re)confirmed every waiter is told to check (`CHECK`): a ring sent while the hub was starting or
reconnecting is read from the records instead. Classic (unsharded) Pub/Sub reaches a subscriber
on any node of a Redis Cluster.

The hub's listener task runs while anybody waits and is stopped by the last waiter to leave;
one hub serves each Redis client and key prefix (`BellHub.of`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

__all__ = ["CHECK", "BellHub"]

log = logging.getLogger(__name__)

CHECK: Final = "check"
"""What a waiter is told when rings may have been missed: read the records."""
RETRY_S = 0.5
"""Back-off before the listener subscribes again after Redis failed it."""
CLOSE_S = 2.0
"""How long a stopping listener may take to let its connection go."""
QUIET_S = 15.0
"""Silence after which the listener pings its connection; a second silence as long (no pong)
means the connection is dead without having said so, and the listener subscribes again."""

_hubs: weakref.WeakKeyDictionary[aioredis.Redis, dict[str, BellHub]] = weakref.WeakKeyDictionary()


def _glob_escaped(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


class BellHub:
    """One process's listener for the rings of its sessions (`docs/design.md` §Signals)."""

    def __init__(self, redis: aioredis.Redis, prefix: str) -> None:
        self._redis = redis
        self._pattern = f"{{{_glob_escaped(prefix)}}}:*"
        self._waiters: dict[str, set[Callable[[str], None]]] = {}
        self._task: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self.subscriptions = 0
        """How many times the pattern subscription was confirmed (a count for tests)."""

    @classmethod
    def of(cls, redis: aioredis.Redis, prefix: str) -> BellHub:
        """The hub of this Redis client and key prefix, created on first use."""
        hubs = _hubs.setdefault(redis, {})
        hub = hubs.get(prefix)
        if hub is None:
            hub = hubs[prefix] = cls(redis, prefix)
        return hub

    @property
    def waiting(self) -> int:
        """How many waiters are registered."""
        return sum(len(w) for w in self._waiters.values())

    @asynccontextmanager
    async def listening(self, channel: str, heard: Callable[[str], None]) -> AsyncIterator[None]:
        """Call `heard(note)` for every ring on `channel` (and `CHECK`) while the block runs.

        `heard` runs on the listener's task and must not block; it is told `CHECK` once the
        subscription is confirmed, so the block never depends on being registered in time. The
        block starts once the subscription is confirmed, or after `CLOSE_S` without it (Redis
        down: the waiter's own reads of the records then decide).
        """
        self._waiters.setdefault(channel, set()).add(heard)
        if self._task is None:
            self._subscribed.clear()
            self._task = asyncio.get_running_loop().create_task(self._listen())
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_S):
                    await self._subscribed.wait()
            yield
        finally:
            waiters = self._waiters.get(channel, set())
            waiters.discard(heard)
            if not waiters:
                self._waiters.pop(channel, None)
            if not self._waiters and self._task is not None:
                task, self._task = self._task, None
                stopping = asyncio.get_running_loop().create_task(self._stop(task))
                try:
                    await asyncio.shield(stopping)
                except asyncio.CancelledError:
                    await asyncio.wait({stopping})  # bounded: finish the cleanup, then propagate
                    raise

    async def _stop(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        await asyncio.wait({task}, timeout=2 * CLOSE_S)  # its read ends at once, its close later
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error("bell listener failed", exc_info=task.exception())

    def _tell(self, channel: str, note: str) -> None:
        for heard in tuple(self._waiters.get(channel, ())):
            heard(note)

    def _tell_all(self, note: str) -> None:
        for channel in tuple(self._waiters):
            self._tell(channel, note)

    async def _listen(self) -> None:
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.psubscribe(self._pattern)
                pinged = False
                while True:
                    message = await pubsub.get_message(timeout=QUIET_S)
                    if message is None:
                        if pinged:
                            raise RedisConnectionError(f"no answer to a ping in {QUIET_S:g} s")
                        await pubsub.ping()
                        pinged = True
                        continue
                    pinged = False
                    if message["type"] == "psubscribe":
                        self.subscriptions += 1
                        self._subscribed.set()
                        self._tell_all(CHECK)
                    elif message["type"] == "pmessage":
                        self._tell(_text(message["channel"]), _text(message["data"]))
            except RedisError as exc:
                self._subscribed.clear()
                log.warning("bell listener: %s; subscribing again", exc)
            finally:
                closing = asyncio.get_running_loop().create_task(_close(pubsub))
                try:
                    await asyncio.shield(closing)
                except asyncio.CancelledError:
                    await asyncio.wait({closing})  # bounded by CLOSE_S; then propagate
                    raise
            await asyncio.sleep(RETRY_S)


async def _close(pubsub: aioredis.client.PubSub) -> None:
    try:
        async with asyncio.timeout(CLOSE_S):
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
    except (RedisError, OSError, TimeoutError) as exc:
        log.warning("bell listener: closing its connection: %s", exc)


def _text(value: bytes | str) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value
