"""The approval gate: which calls of a batch wait for a person, and how a waiting batch ends.

Contract (the records are in `agent_core._approvals`; docs/design.md §Invariants I1 holds):
- A call that may change something waits for approval instead of running (`needs_approval`),
  and so does a call the intent check holds (`agent_core._intent_check`: it goes against a
  person's correction, or the check could not clear it), its record saying why. At most
  `per_batch` calls of one batch wait, in call order; the rest are answered "not run" at once.
  The same people decide either kind (the record's risk, not why it waits, picks the rule).
- Waiting calls are parked (moved out of the balance), then the turn cuts. It suspends the
  batch (one approval request per waiting call, `ApprovalBook`) unless that cut is a stop or a
  steer: then the waiting calls are answered "stopped" or "superseded" and the batch closes.
- A later turn of the session claims a suspended batch before it begins (`close_suspended`):
  no decision lands after the claim. Approved calls run only in the batch's continuation, at
  most once (a call marked started whose result is not journaled is answered "in doubt").
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

from agent_core._approvals import (
    Approval,
    ApprovalBook,
    SuspendedBatch,
    Verdict,
    arguments_digest,
    closing_answer,
)
from agent_core._batch import needs_approval, would_run
from agent_core._events import EventSource, FunctionCallPart, RunEvent
from agent_core._intent_check import IntentChecker
from agent_core._messages import AssistantMessage, ToolCall, ToolMessage, ToolStatus
from agent_core._outcome import Awaiting, RunResult, Steered, Stopped
from agent_core._resume import IN_DOUBT
from agent_core._store import HistoryStore
from agent_core._turn import TurnRun, tool_event
from agent_core.tools._base import Risk

__all__ = ["ApprovalGate"]


class ApprovalGate:
    """Gates the calls of a turn's batches on a person's approval (shared across turns)."""

    def __init__(
        self,
        book: ApprovalBook,
        store: HistoryStore,
        *,
        per_batch: int,
        timeout_s: float,
        intent: IntentChecker | None = None,
    ) -> None:
        self._book = book
        self._store = store
        self._per_batch = per_batch
        self._timeout_s = timeout_s
        self._intent = intent

    async def select(
        self, run: TurnRun, calls: Sequence[ToolCall], refused: dict[str, str]
    ) -> tuple[set[str], dict[str, str]]:
        """The calls that wait for approval, and why the intent check holds some of them.

        Calls that change something wait; of the others, those that would run go through the
        intent check (when its mode calls for one), and the ones it holds wait too. Calls over
        the cap are added to `refused`.
        """
        gated = {c.id for c in calls if c.id not in refused and needs_approval(c, run.toolset)}
        why = await self.intent_held(run, [c for c in calls if c.id not in {*refused, *gated}])
        gated |= set(why)
        most = self._per_batch
        for call in [c for c in calls if c.id in gated][most:]:
            gated.discard(call.id)  # a card shows this many requests; more could never be decided
            why.pop(call.id, None)
            refused[call.id] = (
                f"not run: at most {most} calls may wait for approval at once; ask again for "
                "this one after those are decided"
            )
        return gated, why

    async def intent_held(self, run: TurnRun, calls: Sequence[ToolCall]) -> dict[str, str]:
        """Of `calls` (none waiting yet), those the intent check holds, each with its reason.

        Only calls that would run are checked (the others are answered with their error);
        none when the check is off or not due.
        """
        if self._intent is None:
            return {}
        return await self._intent.held(run, [c for c in calls if would_run(c, run.toolset)])

    @staticmethod
    async def park(run: TurnRun, gated: set[str]) -> RunResult | None:
        """Move the calls waiting for approval out of the balance, then cut (probe)."""
        run.ledger.park(gated)
        return await run.boundary("approval")

    @staticmethod
    async def answer_waiting(
        run: TurnRun,
        message: AssistantMessage,
        results: list[ToolMessage],
        gated: set[str],
        cut: Stopped | Steered,
    ) -> list[ToolMessage]:
        """Close the calls that were about to wait, because the turn ends here anyway."""
        verdict, by = (
            (Verdict.STOPPED, cut.by) if isinstance(cut, Stopped) else (Verdict.SUPERSEDED, "")
        )
        by_id = {r.call_id: r for r in results}
        for call in message.tool_calls:
            if call.id in gated:
                answer = closing_answer(call, verdict, by)
                by_id[call.id] = answer
                await run.observe(tool_event(answer))
        return [by_id[c.id] for c in message.tool_calls]

    async def suspend(
        self,
        run: TurnRun,
        message: AssistantMessage,
        gated: set[str],
        results: Sequence[ToolMessage],
        why: Mapping[str, str] | None = None,
    ) -> Awaiting:
        """Suspend the batch in its journal with one approval request per gated call.

        `why` holds the intent check's reason for each call it held (`select`).
        """
        why = why or {}
        now = time.time()
        expires_at = now + self._timeout_s
        records = {
            call.id: Approval(
                session_id=run.request.session_id,
                turn_id=run.request.turn_id,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                digest=arguments_digest(call.arguments),
                risk=_risk_of(run, call),
                requester=run.request.requester,
                requested_at=now,
                expires_at=expires_at,
                why=why.get(call.id, ""),
            ).to_json()
            for call in message.tool_calls
            if call.id in gated
        }
        await self._store.suspend(
            run.request.session_id,
            run.request.turn_id,
            records,
            expires_at,
            results,
            run.request.fence,
        )
        run.diag.note("suspended", f"{len(records)} call(s) wait for approval")
        return Awaiting(approvals=tuple(c.id for c in message.tool_calls if c.id in gated))

    async def close_suspended(self, run: TurnRun) -> RunResult | None:
        """Close the batch a turn of this session left waiting for approvals, if any.

        Runs before the turn begins, so the batch lands in the history before this turn's
        inputs. The turn first claims the batch (`ApprovalBook.claim`): no decision lands
        after that, and a request still pending is stopped with this turn (when it was
        stopped before it began) or superseded by it (a redirect, a new analysis). Approved
        calls run only in the batch's continuation, at most once (a call marked started whose
        result is not journaled is answered "in doubt"); every other call is answered with
        why it did not run. The suspended turn itself, re-run after its worker died, closes
        nothing: it returns `Awaiting` again.
        """
        session, turn = run.request.session_id, run.request.turn_id
        suspended = await self._book.suspended(session)
        if suspended is None:
            return None
        if suspended.turn_id == turn:
            return Awaiting(approvals=tuple(suspended.approvals))
        stopped_by = await self._book.stopped_by(session, turn)
        verdict = Verdict.SUPERSEDED if stopped_by is None else Verdict.STOPPED
        suspended, current = await self._book.claim(
            suspended, turn, verdict, stopped_by or "", run.request.fence
        )
        run.diag.note("close_suspended", f"{suspended.turn_id} (continuation: {current})")
        async with run.signals.watching():
            results, approvals = await self._run_suspended(run, suspended, stopped_by, current)
        records = {a.call_id: a.to_json() for a in approvals.values()}
        await self._store.close_suspended(
            session, suspended.turn_id, [suspended.batch, *results], records, run.request.fence
        )
        return None

    async def _run_suspended(
        self, run: TurnRun, suspended: SuspendedBatch, stopped_by: str | None, current: bool
    ) -> tuple[list[ToolMessage], dict[str, Approval]]:
        """Answer every call of a suspended batch; run the approved ones.

        Returns the results in call order and the approval records as they end.
        """
        batch = suspended.batch
        approvals = dict(suspended.approvals)
        answered, to_run = _sort_suspended(suspended, stopped_by or "", current)
        calls = tuple(FunctionCallPart(call=c) for c in batch.tool_calls)
        await run.observe(RunEvent(source=EventSource.MODEL, parts=calls))
        for result in answered.values():
            await run.observe(tool_event(result))
        if to_run:
            now = time.time()
            approvals |= {c.id: replace(approvals[c.id], started_at=now) for c in to_run}
            started = {c.id: approvals[c.id].to_json() for c in to_run}
            await self._store.update_approvals(run.request.session_id, started, run.request.fence)
            ran = await run.run_batch(
                batch,
                to_run,
                journal_turn=suspended.turn_id,
                approved=frozenset(c.id for c in to_run),
            )
            answered |= {r.call_id: r for r in ran}
        return [answered[c.id] for c in batch.tool_calls], approvals


def _sort_suspended(
    suspended: SuspendedBatch, stopped_by: str, current: bool
) -> tuple[dict[str, ToolMessage], list[ToolCall]]:
    """Split a suspended batch's calls into those answered without running and those to run."""
    answered: dict[str, ToolMessage] = dict(suspended.journaled)
    to_run: list[ToolCall] = []
    for call in suspended.batch.tool_calls:
        if call.id in answered:
            continue
        approval = suspended.approvals.get(call.id)
        if approval is None:  # not gated, yet not journaled: never ran to its end
            answered[call.id] = _in_doubt(call)
        elif approval.started_at:
            answered[call.id] = _in_doubt(call)  # a worker died while it ran
        elif (answer := approval.answer(call, stopped_by=stopped_by, current=current)) is not None:
            answered[call.id] = answer
        else:
            to_run.append(call)
    return answered, to_run


def _risk_of(run: TurnRun, call: ToolCall) -> Risk:
    tool = run.toolset.get(call.name)
    assert tool is not None, "only calls to offered tools are gated"
    return tool.risk


def _in_doubt(call: ToolCall) -> ToolMessage:
    return ToolMessage(call_id=call.id, name=call.name, content=IN_DOUBT, status=ToolStatus.ERROR)
