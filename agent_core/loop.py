"""The run loop: model stream → tool batch → balance ledger → cut, until a final answer.

Contract (DESIGN.md invariants 1–4):
- Every event passes through `_observe` exactly once; the ledger decides where a cut may happen.
- Signals are probed in `_cut` only, which runs before the first model request and at each
  zero-crossing of the balance, i.e. once per batch, never per streamed delta.
- A stop aborts the model stream (the partial response is dropped, never persisted) and cancels
  interruptible tools, which answer "interrupted"; the batch still closes, so the persisted
  history stays closed. After a stop no model request and no tool call starts.
- A turn whose tombstone exists when it begins ends `Cancelled` without calling the model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import redis.asyncio as aioredis

from agent_core.approvals import (
    Approval,
    ApprovalBook,
    SuspendedBatch,
    Verdict,
    arguments_digest,
    closing_answer,
)
from agent_core.batch import needs_approval, run_batch
from agent_core.budget import Budget, BudgetMeter, wrap_up_note
from agent_core.diagnostics import ProbePoint, RunDiagnostics, RunOutcome
from agent_core.errors import AgentError, HistoryError, HistoryRejected
from agent_core.events import (
    EventSource,
    FunctionCallPart,
    FunctionResponsePart,
    Part,
    RunEvent,
    TextPart,
)
from agent_core.history import validate_history
from agent_core.interrupts import INTERRUPTED, Signal, TurnSignals, checkpoint, until_set
from agent_core.keys import Keys
from agent_core.ledger import BalanceLedger
from agent_core.llm.client import ChatModel, ModelResponse
from agent_core.llm.convert import unique_call_ids
from agent_core.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserKind,
    UserMessage,
)
from agent_core.outcome import (
    Awaiting,
    Cancelled,
    Completed,
    Dispatched,
    Drained,
    Failed,
    RunResult,
    Steered,
    Stopped,
)
from agent_core.repair import repair_history
from agent_core.resume import IN_DOUBT, plan_resume
from agent_core.store import Fence, HistoryStore
from agent_core.tools.base import Risk, Toolset

__all__ = ["EventSink", "LoopLimits", "Runtime", "TurnRequest"]

log = logging.getLogger(__name__)

EventSink = Callable[[RunEvent], Awaitable[None]]
"""Receives every event of a run, in order (for progress cards and audit)."""


@dataclass(frozen=True, kw_only=True)
class LoopLimits:
    """Bounds on one turn."""

    budget: Budget = field(default_factory=Budget)
    """What one turn may spend (requests, tool calls, repeats, tokens) before it wraps up."""
    approvals_per_batch: int = 5
    """Calls of one batch that may wait for approval (the card shows as many); the rest are
    answered "not run" at once."""
    approval_timeout_s: float = 900.0
    """How long a call waits for a person's approval before it expires (answered "approval
    expired" when the turn resumes)."""
    steer_cancels_tools: bool = True
    """A steer cancels interruptible tools of the open batch (must-complete ones finish), so the
    worst-case steer latency is the longest must-complete call rather than the whole batch."""


@dataclass(frozen=True, kw_only=True)
class TurnRequest:
    """One turn to run for a session."""

    session_id: str
    turn_id: str
    inputs: tuple[UserMessage, ...] = ()
    """New messages that start this turn (the task); empty for a continuation."""
    fence: Fence | None = None
    """When set, every history write of the turn happens only while it holds (a lease)."""
    requester: str = ""
    """Who asked for the analysis (a platform user id): may not approve its destructive calls."""
    tools: frozenset[str] | None = None
    """When set, the turn offers only the runtime's tools with these names (a scheduled job's
    toolset); names the runtime does not have are ignored."""


@dataclass(eq=False)
class _TurnContext:
    """What tools see of their turn (`agent_core.tools.base.ToolContext`)."""

    session_id: str
    turn_id: str
    signals: TurnSignals
    call_id: str = ""

    def raise_dispatch(self) -> None:
        self.signals.raise_local(Signal.DISPATCH)

    def raise_await(self) -> None:
        self.signals.raise_local(Signal.AWAIT)


@dataclass(eq=False)
class _Run:
    """The mutable state of one run."""

    request: TurnRequest
    signals: TurnSignals
    diag: RunDiagnostics
    history: list[Message] = field(default_factory=list)
    ledger: BalanceLedger = field(default_factory=BalanceLedger)
    call_ids: set[str] = field(default_factory=set)
    sinks: tuple[EventSink, ...] = ()
    meter: BudgetMeter = field(default_factory=lambda: BudgetMeter(Budget()))
    toolset: Toolset = field(default_factory=Toolset)
    """The tools this run offers (the runtime's, narrowed by `TurnRequest.tools`)."""


_CUT_RESULTS: dict[Signal, RunResult] = {
    Signal.STEER: Steered(),
    Signal.DRAIN: Drained(),
    Signal.DISPATCH: Dispatched(),
    Signal.AWAIT: Awaiting(),
}


class Runtime:
    """Runs turns for sessions. Safe to share across concurrent turns of different sessions."""

    def __init__(
        self,
        *,
        model: ChatModel,
        redis: aioredis.Redis,
        toolset: Toolset,
        instructions: str = "",
        limits: LoopLimits | None = None,
        keys: Keys | None = None,
        sink: EventSink | None = None,
    ) -> None:
        self._model = model
        self._redis = redis
        self._keys = keys or Keys()
        self._store = HistoryStore(redis, self._keys)
        self._approvals = ApprovalBook(redis, self._keys)
        self._toolset = toolset
        self._instructions = instructions
        self._limits = limits or LoopLimits()
        self._sink = sink

    @property
    def store(self) -> HistoryStore:
        """The history store this runtime writes to."""
        return self._store

    @property
    def toolset(self) -> Toolset:
        """Every tool the runtime may offer (a turn may offer fewer: `TurnRequest.tools`)."""
        return self._toolset

    @property
    def approvals(self) -> ApprovalBook:
        """The approval records of the sessions this runtime runs."""
        return self._approvals

    def signals_for(self, request: TurnRequest) -> TurnSignals:
        """Create the interrupt state for a turn (the caller may raise drain on it)."""
        return TurnSignals(
            redis=self._redis,
            session_id=request.session_id,
            turn_id=request.turn_id,
            keys=self._keys,
            steer_cancels_tools=self._limits.steer_cancels_tools,
        )

    async def run(
        self,
        request: TurnRequest,
        signals: TurnSignals | None = None,
        *,
        sink: EventSink | None = None,
    ) -> RunOutcome:
        """Run one turn to its end and return how it ended, with its diagnostics.

        Args:
            request: The turn.
            signals: Its interrupt state (from `signals_for`), when the caller needs a handle.
                A stop listener already set on it (`on_stop`) is still called.
            sink: Receives this run's events, after the runtime-wide sink (a progress card).
        """
        run = _Run(
            request=request,
            signals=signals or self.signals_for(request),
            diag=RunDiagnostics(session_id=request.session_id, turn_id=request.turn_id),
            sinks=tuple(s for s in (self._sink, sink) if s is not None),
            meter=BudgetMeter(self._limits.budget),
            toolset=self._toolset if request.tools is None else self._toolset.only(request.tools),
        )
        listener = run.signals.on_stop

        def on_stop(by: str) -> None:
            run.diag.note("stop_accepted", by)
            if listener is not None:
                listener(by)

        run.signals.on_stop = on_stop
        steer_listener = run.signals.on_steer

        def on_steer() -> None:
            run.diag.note("steer_received")  # the start of the steer-to-cut latency
            if steer_listener is not None:
                steer_listener()

        run.signals.on_steer = on_steer
        try:
            result = await self._close_suspended(run)
            if result is None:
                result = await self._begin(run)
            if result is None:
                # Watch only once the turn has begun: begin_turn itself answers every earlier
                # ring (tombstone, steers), and the start probe covers the moment in between.
                async with run.signals.watching():
                    result = await self._loop(run)
        except AgentError as exc:
            log.warning("turn %s failed: %s", request.turn_id, exc)
            result = Failed(str(exc))
        checkpoint()  # an outside cancel that a library swallowed on the last step still wins
        run.diag.ended_at = datetime.now(UTC)
        run.diag.note("end", type(result).__name__)
        return RunOutcome(result=result, diagnostics=run.diag)

    async def _begin(self, run: _Run) -> RunResult | None:
        """Start the turn; return `Cancelled` when it was tombstoned, else None."""
        start = await self._store.begin_turn(
            run.request.session_id, run.request.turn_id, run.request.inputs, run.request.fence
        )
        if start.tombstoned:
            run.diag.note("tombstoned")
            by = await self._approvals.stopped_by(run.request.session_id, run.request.turn_id)
            return Cancelled(by=by or "a stop recorded before the turn started")
        run.history = await self._checked(run, start.history)
        run.call_ids = {
            c.id for m in run.history if isinstance(m, AssistantMessage) for c in m.tool_calls
        }
        return None

    async def _loop(self, run: _Run) -> RunResult:
        if (resumed := await self._resume(run)) is not None:
            return resumed
        if (cut := await self._cut(run, "start")) is not None:
            return cut
        repaired_after_rejection = False
        while True:
            checkpoint()
            if run.signals.stop.is_set():
                return Stopped(by=run.signals.stopped_by)
            if why := run.meter.exhausted(run.diag):
                return await self._wrap_up(run, why)
            try:
                response = await self._request(run)
            except HistoryRejected as exc:
                if repaired_after_rejection:
                    return Failed(f"the model provider rejected the conversation history: {exc}")
                repaired_after_rejection = True
                run.history = await self._repaired(run, run.history, forced=True)
                continue
            if response is None:
                return Stopped(by=run.signals.stopped_by)
            if (result := await self._handle(run, response)) is not None:
                return result

    async def _handle(self, run: _Run, response: ModelResponse) -> RunResult | None:
        """Book one model response; run its batch; return a result when the turn ends."""
        calls = unique_call_ids(response.message.tool_calls, run.call_ids)
        message = AssistantMessage(content=response.message.content, tool_calls=calls)
        parts: list[Part] = [TextPart(text=message.content)] if message.content else []
        parts += [FunctionCallPart(call=c) for c in calls]
        final = RunEvent(source=EventSource.MODEL, parts=tuple(parts))
        await self._observe(run, final)
        if not calls:
            await self._store.append_closed(
                run.request.session_id, run.request.turn_id, [message], run.request.fence
            )
            run.history.append(message)
            return Completed(answer=message.content, final_event_id=final.id)
        refused = run.meter.admit(calls)
        gated = {c.id for c in calls if c.id not in refused and needs_approval(c, run.toolset)}
        most = self._limits.approvals_per_batch
        for call in [c for c in calls if c.id in gated][most:]:
            gated.discard(call.id)  # a card shows this many requests; more could never be decided
            refused[call.id] = (
                f"not run: at most {most} calls may wait for approval at once; ask again for "
                "this one after those are decided"
            )
        results = await self._run_batch(run, message, skip=gated | set(refused))
        if refused:
            results = await self._refuse(run, message, results, refused)
        cut: RunResult | None = None
        if gated:
            cut = await self._park(run, gated)
            if not isinstance(cut, Stopped | Steered):
                return await self._suspend(run, message, gated, results)
            results = await self._answer_waiting(run, message, results, gated, cut)
        await self._store.append_closed(
            run.request.session_id, run.request.turn_id, [message, *results], run.request.fence
        )
        run.history += [message, *results]
        if run.signals.stop.is_set():
            return Stopped(by=run.signals.stopped_by)
        return cut or await self._cut(run, "batch_closed")

    async def _refuse(
        self,
        run: _Run,
        message: AssistantMessage,
        results: list[ToolMessage],
        refused: Mapping[str, str],
    ) -> list[ToolMessage]:
        """Answer the calls the budget did not admit (journaled like any result)."""
        by_id = {r.call_id: r for r in results}
        for call in message.tool_calls:
            if call.id in refused:
                answer = ToolMessage(
                    call_id=call.id,
                    name=call.name,
                    content=refused[call.id],
                    status=ToolStatus.ERROR,
                )
                await self._store.journal_result(
                    run.request.session_id, run.request.turn_id, answer, run.request.fence
                )
                by_id[call.id] = answer
                await self._observe(run, _response(answer))
        return [by_id[c.id] for c in message.tool_calls if c.id in by_id]

    async def _wrap_up(self, run: _Run, why: str) -> RunResult:
        """A spent budget: one last request with no tools, asking for the answer so far."""
        run.diag.note("budget_spent", why)
        note = UserMessage(content=wrap_up_note(why), author="chatops", kind=UserKind.NOTICE)
        await self._store.append_closed(
            run.request.session_id, run.request.turn_id, [note], run.request.fence
        )
        run.history.append(note)
        response = await self._request(run, Toolset())
        if response is None:
            return Stopped(by=run.signals.stopped_by)
        # No tool was offered: calls the model made anyway are dropped, never run or kept.
        message = AssistantMessage(content=response.message.content)
        final = RunEvent(source=EventSource.MODEL, parts=(TextPart(text=message.content),))
        await self._observe(run, final)
        await self._store.append_closed(
            run.request.session_id, run.request.turn_id, [message], run.request.fence
        )
        run.history.append(message)
        return Completed(answer=message.content, final_event_id=final.id, cutoff=why)

    async def _park(self, run: _Run, gated: set[str]) -> RunResult | None:
        """Move the calls waiting for approval out of the balance, then cut (probe)."""
        if run.signals.stop.is_set():
            return Stopped(by=run.signals.stopped_by)
        run.ledger.park(gated)
        return await self._cut(run, "approval")

    async def _answer_waiting(
        self,
        run: _Run,
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
                await self._observe(run, _response(answer))
        return [by_id[c.id] for c in message.tool_calls]

    async def _suspend(
        self,
        run: _Run,
        message: AssistantMessage,
        gated: set[str],
        results: Sequence[ToolMessage],
    ) -> RunResult:
        """Suspend the batch in its journal with one approval request per gated call."""
        now = time.time()
        expires_at = now + self._limits.approval_timeout_s
        records = {
            call.id: Approval(
                session_id=run.request.session_id,
                turn_id=run.request.turn_id,
                call_id=call.id,
                tool=call.name,
                arguments=call.arguments,
                digest=arguments_digest(call.arguments),
                risk=self._risk_of(run, call),
                requester=run.request.requester,
                requested_at=now,
                expires_at=expires_at,
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

    @staticmethod
    def _risk_of(run: _Run, call: ToolCall) -> Risk:
        tool = run.toolset.get(call.name)
        assert tool is not None, "only calls to offered tools are gated"
        return tool.risk

    async def _close_suspended(self, run: _Run) -> RunResult | None:
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
        suspended = await self._approvals.suspended(session)
        if suspended is None:
            return None
        if suspended.turn_id == turn:
            return Awaiting(approvals=tuple(suspended.approvals))
        stopped_by = await self._approvals.stopped_by(session, turn)
        verdict = Verdict.SUPERSEDED if stopped_by is None else Verdict.STOPPED
        suspended, current = await self._approvals.claim(
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
        self, run: _Run, suspended: SuspendedBatch, stopped_by: str | None, current: bool
    ) -> tuple[list[ToolMessage], dict[str, Approval]]:
        """Answer every call of a suspended batch; run the approved ones.

        Returns the results in call order and the approval records as they end.
        """
        batch = suspended.batch
        approvals = dict(suspended.approvals)
        answered: dict[str, ToolMessage] = dict(suspended.journaled)
        to_run: list[ToolCall] = []
        for call in batch.tool_calls:
            if call.id in answered:
                continue
            approval = suspended.approvals.get(call.id)
            if approval is None:  # not gated, yet not journaled: never ran to its end
                answered[call.id] = _in_doubt(call)
            elif approval.started_at:
                answered[call.id] = _in_doubt(call)  # a worker died while it ran
            elif (
                answer := approval.answer(call, stopped_by=stopped_by or "", current=current)
            ) is not None:
                answered[call.id] = answer
            else:
                to_run.append(call)
        calls = tuple(FunctionCallPart(call=c) for c in batch.tool_calls)
        await self._observe(run, RunEvent(source=EventSource.MODEL, parts=calls))
        for result in answered.values():
            await self._observe(run, _response(result))
        if to_run:
            now = time.time()
            approvals |= {c.id: replace(approvals[c.id], started_at=now) for c in to_run}
            started = {c.id: approvals[c.id].to_json() for c in to_run}
            await self._store.update_approvals(run.request.session_id, started, run.request.fence)
            ran = await self._run_batch(
                run,
                batch,
                to_run,
                journal_turn=suspended.turn_id,
                approved=frozenset(c.id for c in to_run),
            )
            answered |= {r.call_id: r for r in ran}
        return [answered[c.id] for c in batch.tool_calls], approvals

    async def _resume(self, run: _Run) -> RunResult | None:
        """Close the batch a dead worker left open (see `agent_core.resume`), if any."""
        batch, journaled = await self._store.journal(run.request.session_id, run.request.turn_id)
        if batch is None:
            return None
        # A call that waits for approval never ran: the worker died before the turn suspended.
        gated = {
            c.id
            for c in batch.tool_calls
            if c.id not in journaled and needs_approval(c, run.toolset)
        }
        plan = plan_resume(batch, journaled, run.toolset, waiting=gated)
        run.diag.note("resume", f"{len(journaled)} kept, {plan.in_doubt} in doubt")
        calls = tuple(FunctionCallPart(call=c) for c in batch.tool_calls)
        await self._observe(run, RunEvent(source=EventSource.MODEL, parts=calls))
        for result in plan.answered.values():
            await self._observe(run, _response(result))
        rerun = await self._run_batch(run, batch, plan.rerun, skip=gated) if plan.rerun else []
        by_id = {**plan.answered, **{r.call_id: r for r in rerun}}
        if gated:
            cut = await self._park(run, gated)
            if not isinstance(cut, Stopped | Steered):
                return await self._suspend(run, batch, gated, list(by_id.values()))
            answered = await self._answer_waiting(run, batch, list(by_id.values()), gated, cut)
            by_id |= {r.call_id: r for r in answered}
        results = [by_id[c.id] for c in batch.tool_calls]
        await self._store.append_closed(
            run.request.session_id, run.request.turn_id, [batch, *results], run.request.fence
        )
        run.history += [batch, *results]
        run.call_ids |= {c.id for c in batch.tool_calls}
        if run.signals.stop.is_set():
            return Stopped(by=run.signals.stopped_by)
        return None

    async def _run_batch(
        self,
        run: _Run,
        message: AssistantMessage,
        calls: Sequence[ToolCall] | None = None,
        *,
        skip: set[str] | None = None,
        journal_turn: str | None = None,
        approved: frozenset[str] = frozenset(),
    ) -> list[ToolMessage]:
        """Run `calls` (default: all of `message`'s but `skip`) and return their results.

        Given `calls` means a resumed batch, whose journal (that of `journal_turn`, default
        this turn) already holds the message and the results kept. Skipped calls (waiting for
        approval) stay open: the batch closes without them only once they are parked.
        """
        journal = journal_turn or run.request.turn_id
        closed = False

        async def on_result(result: ToolMessage) -> None:
            nonlocal closed
            try:  # journaled before anyone is told, so what the card shows is durable
                await self._store.journal_result(
                    run.request.session_id, journal, result, run.request.fence
                )
            except AgentError as exc:  # the journal only saves re-runs; the commit decides
                run.diag.journal_failures += 1
                log.warning("journal write failed for %s: %s", result.call_id, exc)
            event = RunEvent(
                source=EventSource.TOOL, parts=(FunctionResponsePart(response=result),)
            )
            closed = await self._observe(run, event)

        if calls is None:
            await self._store.journal_batch(
                run.request.session_id, run.request.turn_id, message, run.request.fence
            )
        ctx = _TurnContext(run.request.session_id, run.request.turn_id, run.signals)
        if calls is None:
            calls = [c for c in message.tool_calls if c.id not in (skip or set())]
        results = await run_batch(
            calls, run.toolset, ctx, run.signals, run.diag, on_result, approved
        )
        if not skip and (not closed or run.ledger.is_open):
            raise AgentError("internal: a batch ended without closing the balance")
        return results

    async def _request(self, run: _Run, tools: Toolset | None = None) -> ModelResponse | None:
        """Make one model request, or return None when a stop aborted it.

        `tools` replaces the runtime's toolset for this request (the wrap-up offers none).
        """
        messages = await self._checked(run, run.history)
        if self._instructions:
            messages = [SystemMessage(content=self._instructions), *messages]
        run.diag.model_requests += 1
        run.diag.note("model_request", str(run.diag.model_requests))

        async def on_delta(text: str) -> None:
            delta = RunEvent(source=EventSource.MODEL, parts=(TextPart(text=text),), partial=True)
            await self._observe(run, delta)

        outcome = await until_set(
            run.signals.stop,
            self._model.respond(messages, run.toolset if tools is None else tools, on_delta),
        )
        if isinstance(outcome, ModelResponse):
            run.diag.usage += outcome.usage  # tokens were spent even if the response is dropped
        if outcome is INTERRUPTED or run.signals.stop.is_set():
            # A stop accepted while the response streamed wins, even if the stream just ended.
            run.diag.note("model_aborted", run.signals.stopped_by)
            return None
        assert isinstance(outcome, ModelResponse)
        run.diag.note("model_response", outcome.response_id)
        return outcome

    async def _observe(self, run: _Run, event: RunEvent) -> bool:
        """Book one event: count it, move the balance, forward it. True at a zero-crossing."""
        checkpoint()
        run.diag.events += 1
        closed = run.ledger.observe(event)
        for sink in run.sinks:
            try:
                await sink(event)
            except Exception:  # a progress card that fails to update must not end the run
                run.diag.sink_failures += 1
                log.exception("event sink failed on %s", event.id)
        return closed

    async def _cut(self, run: _Run, site: str) -> RunResult | None:
        """The one place signals are probed. Only called with no call open."""
        checkpoint()
        if run.ledger.is_open:
            raise AgentError(f"internal: probe with {run.ledger.balance} call(s) open")
        found = await run.signals.probe()
        run.diag.probes.append(ProbePoint(run.diag.events, run.ledger.balance, site, found))
        if found is None:
            return None
        run.diag.stamp_cut(found)
        if found is Signal.STOP:
            return Stopped(by=run.signals.stopped_by)
        return _CUT_RESULTS[found]

    async def _checked(self, run: _Run, history: list[Message]) -> list[Message]:
        """Validate a history before it is used; repair (and persist the repair) if needed."""
        try:
            validate_history(history)
        except HistoryError:
            return await self._repaired(run, history, forced=False)
        return history

    async def _repaired(
        self, run: _Run, history: Sequence[Message], *, forced: bool
    ) -> list[Message]:
        report = repair_history(list(history))
        changes = list(report.changes) or (["no change found; retrying once"] if forced else [])
        run.diag.repairs += changes
        run.diag.note("repair", "; ".join(changes))
        if report.changes:
            await self._store.replace(run.request.session_id, report.messages, run.request.fence)
        return list(report.messages)


def _response(result: ToolMessage) -> RunEvent:
    return RunEvent(source=EventSource.TOOL, parts=(FunctionResponsePart(response=result),))


def _in_doubt(call: ToolCall) -> ToolMessage:
    return ToolMessage(call_id=call.id, name=call.name, content=IN_DOUBT, status=ToolStatus.ERROR)
