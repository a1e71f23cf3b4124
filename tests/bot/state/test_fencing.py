"""Fenced writes (docs/reliability.md Q5): a writer whose lease moved on changes nothing.

Why this way: the fence is a property of Redis state (who holds the session's lease), so the
test sets that state on a real Redis exactly as two workers would leave it, then drives the
real store and the real runtime (against the strict fake provider) as the older holder.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from agent_core import (
    AssistantMessage,
    Failed,
    Fence,
    HistoryStore,
    StoreError,
    TurnRequest,
    UserMessage,
)
from bot.events import ChatEvent, Platform
from bot.intake.queue import Queue
from bot.keys import BotKeys
from bot.state.followups import Followups
from bot.state.lease import Lease, LeaseLost
from bot.state.turn_jobs import TurnJob
from bot.worker.turn_stream import TurnStream
from tests.fakes import openai_provider as fp

KEYS = BotKeys()
SESSION = "s-fence"
EVENT = ChatEvent(
    platform=Platform.SLACK,
    event_id="Ev1",
    workspace="T1",
    channel="C1",
    thread="1.1",
    message_id="1.1",
    author="U1",
    text="why is checkout slow?",
)


async def test_a_zombie_writer_is_refused_and_changes_nothing(make_runtime, redis_client) -> None:
    lease = KEYS.live_turn(SESSION)
    store = make_runtime().store
    await redis_client.set(lease, "5|worker-a|t1")
    old = Fence(lease, 5)
    await store.begin_turn(SESSION, "t1", [UserMessage(content="why?")], old)
    await redis_client.set(lease, "6|worker-b|t1")  # worker a paused; b took the lease over

    with pytest.raises(StoreError, match="fenced"):
        await store.append_closed(SESSION, "t1", [AssistantMessage(content="late")], old)
    with pytest.raises(StoreError, match="fenced"):
        await store.journal_batch(SESSION, "t1", AssistantMessage(content="late"), old)
    with pytest.raises(StoreError, match="fenced"):
        await store.begin_turn(SESSION, "t2", [UserMessage(content="again")], old)
    assert [m.role for m in await store.load(SESSION)] == ["user"]
    await store.append_closed(SESSION, "t1", [AssistantMessage(content="ok")], Fence(lease, 6))
    assert [m.role for m in await store.load(SESSION)] == ["user", "assistant"]


async def test_a_run_whose_lease_moved_on_fails_without_writing(
    make_runtime, fake_llm, redis_client
) -> None:
    lease = KEYS.live_turn(SESSION)
    await redis_client.set(lease, "6|worker-b|t1")
    fake_llm.script(fp.TextReply("a zombie's answer"))
    runtime = make_runtime()
    request = TurnRequest(
        session_id=SESSION,
        turn_id="t1",
        inputs=(UserMessage(content="why?"),),
        fence=Fence(lease, 5),
    )
    outcome = await runtime.run(request)
    assert isinstance(outcome.result, Failed) and "fenced" in outcome.result.error
    assert fake_llm.requests == []  # refused at the start: no model request either
    assert await runtime.store.load(SESSION) == []


async def test_a_zombie_neither_acknowledges_nor_hands_over(redis_client) -> None:
    """Q5 for the stream: the old holder's XACK and hand-over job are refused."""
    stream, followups = TurnStream(redis_client, KEYS), Followups(redis_client, KEYS)
    await Queue(redis_client, KEYS).ensure_group()
    await redis_client.xadd(KEYS.turns_stream, {"job": "{}"})
    (entry,) = await stream.read("worker-a", block_ms=100)
    await redis_client.set(KEYS.live_turn(SESSION), "6|worker-b|t1")  # taken over
    zombie, holder = Lease(SESSION, 5, "worker-a"), Lease(SESSION, 6, "worker-b")

    assert not await stream.ack(entry.id, zombie)
    assert await redis_client.xlen(KEYS.turns_stream) == 1  # still pending, for the holder
    job = TurnJob(turn_id="t1.1", session_id=SESSION, event=EVENT)
    with pytest.raises(LeaseLost):
        await followups.hand_over(job, zombie)
    assert await redis_client.xlen(KEYS.turns_stream) == 1  # no second runner queued

    assert await stream.ack(entry.id, holder)
    assert await redis_client.xlen(KEYS.turns_stream) == 0


class ExecReplyDropper:
    """A TCP proxy to Redis that, once armed, drops the connection instead of EXEC's reply.

    The transaction was applied, and the client cannot know it.
    """

    def __init__(self, redis_port: int) -> None:
        self.redis_port, self.armed, self.port = redis_port, False, 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> ExecReplyDropper:
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _pipe(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.redis_port)
        dropping = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            group.create_task(self._upstream(client_r, up_w, dropping))
            group.create_task(self._downstream(up_r, client_w, dropping))

    async def _upstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dropping: asyncio.Event
    ) -> None:
        while data := await reader.read(65536):
            if self.armed and b"EXEC" in data:
                self.armed = False
                dropping.set()  # before Redis can answer
            writer.write(data)
            await writer.drain()
        writer.close()

    async def _downstream(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dropping: asyncio.Event
    ) -> None:
        while (data := await reader.read(65536)) and not dropping.is_set():
            writer.write(data)
            await writer.drain()
        writer.close()


async def test_a_write_whose_reply_was_lost_is_not_made_twice(redis_server, redis_client) -> None:
    """Invariant 1: the history holds each closed group once, even when EXEC's reply is lost."""
    lease = KEYS.live_turn(SESSION)
    await redis_client.set(lease, "5|worker-a|t1")
    fence = Fence(lease, 5)
    port = int(redis_server.rsplit(":", 1)[1].split("/")[0])
    async with ExecReplyDropper(port) as proxy:
        through = aioredis.Redis(port=proxy.port)
        store = HistoryStore(through)
        try:
            await store.begin_turn(SESSION, "t1", [UserMessage(content="why?")], fence)
            proxy.armed = True
            with pytest.raises(StoreError, match="connection lost"):
                await store.append_closed(SESSION, "t1", [AssistantMessage(content="once")], fence)
        finally:
            await through.aclose()
    history = [m.role for m in await HistoryStore(redis_client).load(SESSION)]
    assert history == ["user", "assistant"]  # applied, and only once
