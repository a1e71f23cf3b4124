"""Fenced writes (RELIABILITY Q5): a writer whose lease moved on changes nothing.

Why this way: the fence is a property of Redis state (who holds the session's lease), so the
test sets that state on a real Redis exactly as two workers would leave it, then drives the
real store and the real runtime (against the strict fake provider) as the older holder.
"""

from __future__ import annotations

import pytest

from agent_core import (
    AssistantMessage,
    Failed,
    Fence,
    StoreError,
    TurnRequest,
    UserMessage,
)
from bot.events import ChatEvent, Platform
from bot.followups import Followups
from bot.keys import BotKeys
from bot.lease import Lease, LeaseLost
from bot.queue import Queue, TurnJob
from bot.turn_stream import TurnStream
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
