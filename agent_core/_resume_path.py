"""The resume path: closing the batch a dead worker left open, before the turn goes on.

`agent_core._resume` decides, call by call, how the journaled batch is answered; this module
carries the plan out: it books the batch and its kept results, runs again what may run again,
and ends the batch through the batch tail (`agent_core._batch_tail`), so calls that wait for
approval are parked and suspended again; a call it would run again goes through the intent
check first, as in a fresh batch. Contract: docs/design.md §Invariants I1 and I7.
"""

from __future__ import annotations

from agent_core._approval_gate import ApprovalGate
from agent_core._batch import needs_approval
from agent_core._batch_tail import Closed, close_batch
from agent_core._events import EventSource, FunctionCallPart, RunEvent
from agent_core._outcome import Awaiting
from agent_core._resume import plan_resume
from agent_core._turn import TurnRun, tool_event

__all__ = ["resume_open_batch"]


async def resume_open_batch(run: TurnRun, gate: ApprovalGate) -> Awaiting | Closed | None:
    """Close the batch a dead worker left open, if any (None: there was none).

    A steer found while parking is not returned: the turn's start probe finds it again.
    """
    batch, journaled = await run.store.journal(run.request.session_id, run.request.turn_id)
    if batch is None:
        return None
    # A call that waits for approval never ran: the worker died before the turn suspended.
    gated = {
        c.id for c in batch.tool_calls if c.id not in journaled and needs_approval(c, run.toolset)
    }
    plan = plan_resume(batch, journaled, run.toolset, waiting=gated)
    # What would run again is checked against the corrections as it was the first time (a
    # call held then was never journaled); a call that may have run is in doubt, not checked.
    if why := await gate.intent_held(run, plan.rerun):
        gated |= set(why)
        plan = plan_resume(batch, journaled, run.toolset, waiting=gated)
    run.diag.note("resume", f"{len(journaled)} kept, {plan.in_doubt} in doubt")
    calls = tuple(FunctionCallPart(call=c) for c in batch.tool_calls)
    await run.observe(RunEvent(source=EventSource.MODEL, parts=calls))
    for result in plan.answered.values():
        await run.observe(tool_event(result))
    rerun = await run.run_batch(batch, plan.rerun, skip=gated) if plan.rerun else []
    by_id = {**plan.answered, **{r.call_id: r for r in rerun}}
    end = await close_batch(run, gate, batch, list(by_id.values()), gated, why)
    if isinstance(end, Awaiting):
        return end
    run.call_ids |= {c.id for c in batch.tool_calls}
    return Closed()
