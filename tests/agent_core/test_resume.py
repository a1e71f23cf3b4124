"""Resuming a turn whose worker died mid-batch, from the journal it left (invariant I7).

Why this way: what a dead worker leaves is Redis state, so the test writes exactly that through
the store (the turn begun, the batch journaled, one result journaled), then runs the same turn
again with the real runtime against the fake provider, which rejects any broken history with
the provider's own 400. What must hold is read from the outside: which calls reached the slow
service or the side-effecting tool, what the model was sent, and the closed history in Redis.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_core import (
    AssistantMessage,
    Completed,
    Interruptibility,
    Tool,
    ToolCall,
    ToolContext,
    ToolMessage,
    TurnRequest,
    UserMessage,
    validate_history,
)
from agent_core._resume import IN_DOUBT
from tests.fakes import openai_provider as fp

SESSION, TURN = "s-resume", "t-resume"


def restart_tool(calls: list[Mapping[str, Any]]) -> Tool:
    async def restart(args: Mapping[str, Any], ctx: ToolContext) -> str:
        calls.append(args)
        return "restarted"

    return Tool(
        name="restart_service",
        description="Restart a service (side effects).",
        parameters={"type": "object", "properties": {"name": {"type": "string"}}},
        handler=restart,
        interruptibility=Interruptibility.MUST_COMPLETE,
    )


async def test_a_resumed_batch_keeps_finished_results_reruns_reads_and_doubts_writes(
    make_runtime, fake_llm, slow_service
) -> None:
    restarts: list[Mapping[str, Any]] = []
    runtime = make_runtime(restart_tool(restarts))
    store = runtime.store
    batch = AssistantMessage(
        tool_calls=(
            ToolCall(
                id="call_a", name="http_get", arguments=f'{{"url": "{slow_service.url("/ok")}?a"}}'
            ),
            ToolCall(
                id="call_b", name="http_get", arguments=f'{{"url": "{slow_service.url("/ok")}?b"}}'
            ),
            ToolCall(id="call_c", name="restart_service", arguments='{"name": "gateway"}'),
        )
    )
    # What the dead worker left: the turn begun, its batch journaled, one result journaled.
    await store.begin_turn(SESSION, TURN, [UserMessage(content="why is checkout down?")])
    await store.journal_batch(SESSION, TURN, batch)
    kept = ToolMessage(call_id="call_a", name="http_get", content="200 OK (before the crash)")
    await store.journal_result(SESSION, TURN, kept)

    fake_llm.script(fp.TextReply("The gateway was restarted; verify it before retrying."))
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id=TURN))

    assert isinstance(outcome.result, Completed)
    assert [h.path for h in slow_service.hits] == ["/ok?b"]  # only the unanswered read
    assert restarts == []  # the side-effecting call is never run twice
    sent = [m for m in fake_llm.requests[0].messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in sent] == ["call_a", "call_b", "call_c"]
    # Each result is sent labelled with its step (the card's number for it), never persisted.
    assert sent[0]["content"] == "200 OK (before the crash)\n[step 1]"
    assert sent[2]["content"] == f"{IN_DOUBT}\n[step 3]"
    history = await store.load(SESSION)
    validate_history(history)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "tool", "assistant"]
    assert await store.journal(SESSION, TURN) == (None, {})
