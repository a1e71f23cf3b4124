"""The batch tail: how every batch ends once its calls have run (park, suspend, close).

Written once for both batches a turn runs: a fresh one (`agent_core._loop`) and the one a dead
worker left open (`agent_core._resume_path`).

Contract (docs/design.md §Invariants I1–I2):
- Calls the budget refused are answered at once and journaled like any result (`refuse`).
- Calls waiting for approval are parked and the turn cuts (`ApprovalGate.park`); unless that
  cut is a stop or a steer, the batch is suspended and the turn ends `Awaiting` (nothing is
  closed); otherwise the waiting calls are answered and the batch closes.
- A batch closes only with every call answered, in call order. The stop check after it is the
  caller's next stage boundary (`TurnRun.boundary`), which also returns the park's cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agent_core._approval_gate import ApprovalGate
from agent_core._messages import AssistantMessage, ToolMessage, ToolStatus
from agent_core._outcome import Awaiting, RunResult, Steered, Stopped
from agent_core._turn import TurnRun

__all__ = ["Closed", "close_batch", "refuse"]


@dataclass(frozen=True, slots=True)
class Closed:
    """A batch closed; the turn goes on to its next stage boundary."""

    cut: RunResult | None = None
    """What the approval cut found (a stop or a steer), returned at that boundary."""


async def refuse(
    run: TurnRun,
    message: AssistantMessage,
    results: list[ToolMessage],
    refused: Mapping[str, str],
) -> list[ToolMessage]:
    """Answer the calls the budget did not admit (journaled like any result)."""
    by_id = {r.call_id: r for r in results}
    for call in message.tool_calls:
        if call.id in refused:
            answer = ToolMessage(
                call_id=call.id, name=call.name, content=refused[call.id], status=ToolStatus.ERROR
            )
            by_id[call.id] = answer
            await run.journal(answer)
    return [by_id[c.id] for c in message.tool_calls if c.id in by_id]


async def close_batch(
    run: TurnRun,
    gate: ApprovalGate,
    message: AssistantMessage,
    results: list[ToolMessage],
    gated: set[str],
    why: Mapping[str, str] | None = None,
) -> Awaiting | Closed:
    """Park the calls in `gated`, then suspend the batch or close it with every call answered.

    Args:
        run: The turn.
        gate: The approval gate that parks, suspends and answers the waiting calls.
        message: The batch (the assistant message with its calls).
        results: The results of every call not in `gated`, in any order.
        gated: The calls waiting for approval (none ran).
        why: The intent check's reason for each call it held (their records carry it).
    """
    cut: RunResult | None = None
    if gated:
        cut = await gate.park(run, gated)
        if not isinstance(cut, Stopped | Steered):
            return await gate.suspend(run, message, gated, results, why)
        results = await gate.answer_waiting(run, message, results, gated, cut)
    by_id = {r.call_id: r for r in results}
    await run.close([message, *(by_id[c.id] for c in message.tool_calls)])
    return Closed(cut)
