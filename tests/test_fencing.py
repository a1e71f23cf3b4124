"""Fenced history writes (RELIABILITY Q5): a writer whose lease moved on changes nothing.

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
from bot.keys import BotKeys
from tests.fakes import openai_provider as fp

KEYS = BotKeys()
SESSION = "s-fence"


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
