"""The run loop: model stream → tool batch → balance ledger → cut, until a final answer.

Stages, each in its own module: the suspended batch a turn of the session left waiting for
approvals is closed (`agent_core._approval_gate`), the turn begins (`HistoryStore.begin_turn`),
the batch a dead worker left open is closed (`agent_core._resume_path`), then the loop runs
model request after model request and batch after batch (`agent_core._batch_tail` ends each).
Between stages the turn passes its stage boundary (`TurnRun.boundary`).

Contract (docs/design.md §Invariants I1–I4):
- Every event passes through `TurnRun.observe` exactly once; the ledger decides where a cut
  may happen.
- Signals are probed only at a stage boundary, which runs before the first model request, at
  each zero-crossing of the balance and when calls are parked, i.e. once per batch, never per
  streamed delta. The boundary is also the one place the stop flag is read between stages.
- A stop aborts the model stream (the partial response is dropped, never persisted) and cancels
  interruptible tools, which answer "interrupted"; the batch still closes, so the persisted
  history stays closed. After a stop no model request and no tool call starts.
- A turn whose tombstone exists when it begins ends `Cancelled` without calling the model.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

import redis.asyncio as aioredis

from agent_core._approval_gate import ApprovalGate
from agent_core._approvals import ApprovalBook
from agent_core._batch_tail import Closed, close_batch, refuse
from agent_core._budget import Budget, BudgetMeter, wrap_up_note
from agent_core._context_window import ContextWindow, Prepared
from agent_core._diagnostics import RunDiagnostics, RunOutcome
from agent_core._errors import AgentError, ConfigError, ContextTooLong, HistoryRejected
from agent_core._events import EventSource, FunctionCallPart, Part, RunEvent, TextPart
from agent_core._intent_check import IntentCheck, IntentChecker
from agent_core._interrupts import TurnSignals, checkpoint, until_set
from agent_core._keys import Keys
from agent_core._llm.client import ChatModel, DeltaSink, ModelResponse
from agent_core._llm.convert import unique_call_ids
from agent_core._messages import AssistantMessage, Message, SystemMessage, UserKind, UserMessage
from agent_core._outcome import Awaiting, Cancelled, Completed, Failed, RunResult, Stopped
from agent_core._resume_path import resume_open_batch
from agent_core._step_labels import label_steps
from agent_core._store import HistoryStore
from agent_core._turn import EventSink, TurnRequest, TurnRun
from agent_core.tools._base import Toolset

__all__ = ["EventSink", "LoopLimits", "Runtime", "TurnRequest"]

log = logging.getLogger(__name__)


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
    context_window_tokens: int = 128_000
    """The model's context window: what one request sends is compacted to fit it, less the
    reserve (`agent_core._context_window`)."""
    answer_reserve_tokens: int = 4_096
    """Tokens of the window kept free for the model's answer."""
    intent_check: IntentCheck = IntentCheck.OFF
    """When a batch's calls are first checked against people's corrections; a call found
    inconsistent waits for approval (`agent_core._intent_check`). Off unless asked for: the
    check is a model request of its own. The bot asks for it (`CHATOPS_INTENT_CHECK`, default
    `after_redirect`)."""
    intent_check_timeout_s: float = 60.0
    """How long one intent check may take; past it, the calls it concerns wait for approval."""

    def __post_init__(self) -> None:
        if not 0 <= self.answer_reserve_tokens < self.context_window_tokens // 2:
            raise ConfigError(
                f"the answer reserve ({self.answer_reserve_tokens} tokens) must be less than half "
                f"the context window ({self.context_window_tokens} tokens)"
            )


def _budget_of(budget: Budget, request: TurnRequest) -> Budget:
    """The runtime's budget, with the request's own cap on model requests when it is lower."""
    cap = request.max_model_requests
    if cap is None or cap >= budget.max_model_requests:
        return budget
    return replace(budget, max_model_requests=max(cap, 1))


Step = RunResult | Closed | None
"""What one stage returns: how the turn ended, a batch that closed, or nothing done that needs
a probe (a history repaired after the provider rejected it)."""


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
        self._window = ContextWindow(
            window_tokens=self._limits.context_window_tokens,
            reserve_tokens=self._limits.answer_reserve_tokens,
        )
        self._gate = ApprovalGate(
            self._approvals,
            self._store,
            per_batch=self._limits.approvals_per_batch,
            timeout_s=self._limits.approval_timeout_s,
            intent=IntentChecker(
                model=model,
                mode=self._limits.intent_check,
                timeout_s=self._limits.intent_check_timeout_s,
            ),
        )

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
        run = TurnRun(
            request=request,
            signals=signals or self.signals_for(request),
            diag=RunDiagnostics(session_id=request.session_id, turn_id=request.turn_id),
            store=self._store,
            sinks=tuple(s for s in (self._sink, sink) if s is not None),
            meter=BudgetMeter(_budget_of(self._limits.budget, request)),
            toolset=self._toolset if request.tools is None else self._toolset.only(request.tools),
        )
        _trace_signals(run)
        try:
            result = await self._gate.close_suspended(run)
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

    async def _begin(self, run: TurnRun) -> RunResult | None:
        """Start the turn; return `Cancelled` when it was tombstoned, else None."""
        start = await self._store.begin_turn(
            run.request.session_id, run.request.turn_id, run.request.inputs, run.request.fence
        )
        if start.tombstoned:
            run.diag.note("tombstoned")
            by = await self._approvals.stopped_by(run.request.session_id, run.request.turn_id)
            return Cancelled(by=by or "a stop recorded before the turn started")
        run.history = await run.checked(start.history, start.checked)
        run.call_ids = run.history_call_ids()
        return None

    async def _loop(self, run: TurnRun) -> RunResult:
        """Run stage after stage, each followed by its stage boundary, until the turn ends."""
        step: Step = await resume_open_batch(run, self._gate)
        # The first probe reads the stop itself; after any stage the stop is checked first.
        site: str | None = "start"
        ran = step is not None
        rejected = False  # the provider rejected the history once (it was repaired)
        while not isinstance(step, RunResult):
            cut = step.cut if isinstance(step, Closed) else None
            if (end := await run.boundary(site, found=cut, ran=ran)) is not None:
                return end
            step, rejected = await self._step(run, rejected)
            site, ran = ("batch_closed" if isinstance(step, Closed) else None), True
        return step

    async def _step(self, run: TurnRun, rejected: bool) -> tuple[Step, bool]:
        """One model request and its batch (or the wrap-up); True once a history was rejected."""
        checkpoint()  # a cancel a library swallowed while the boundary probed wins here
        if why := run.meter.exhausted(run.diag):
            return await self._wrap_up(run, why), rejected
        try:
            response = await self._request(run)
        except HistoryRejected as exc:
            if rejected:
                return Failed(f"the model provider rejected the conversation history: {exc}"), True
            run.history = await run.repaired(run.history, forced=True)
            return None, True
        if isinstance(response, Stopped):
            return response, rejected
        return await self._handle(run, response), rejected

    async def _handle(self, run: TurnRun, response: ModelResponse) -> Completed | Awaiting | Closed:
        """Book one model response; run its batch; return the answer or how the batch ended."""
        calls = unique_call_ids(response.message.tool_calls, run.call_ids)
        message = AssistantMessage(content=response.message.content, tool_calls=calls)
        parts: list[Part] = [TextPart(text=message.content)] if message.content else []
        parts += [FunctionCallPart(call=c) for c in calls]
        final = RunEvent(source=EventSource.MODEL, parts=tuple(parts))
        await run.observe(final)
        if not calls:
            await run.close([message])
            return Completed(answer=message.content, final_event_id=final.id)
        refused = run.meter.admit(calls)
        gated, why = await self._gate.select(run, calls, refused)  # and the intent check
        results = await run.run_batch(message, skip=gated | set(refused))
        if refused:
            results = await refuse(run, message, results, refused)
        return await close_batch(run, self._gate, message, results, gated, why)

    async def _wrap_up(self, run: TurnRun, why: str) -> Completed | Stopped:
        """A spent budget: one last request with no tools, asking for the answer so far."""
        run.diag.note("budget_spent", why)
        note = UserMessage(content=wrap_up_note(why), author="chatops", kind=UserKind.NOTICE)
        await run.close([note])
        response = await self._request(run, Toolset())
        if isinstance(response, Stopped):
            return response
        # No tool was offered: calls the model made anyway are dropped, never run or kept.
        message = AssistantMessage(content=response.message.content)
        final = RunEvent(source=EventSource.MODEL, parts=(TextPart(text=message.content),))
        await run.observe(final)
        await run.close([message])
        return Completed(answer=message.content, final_event_id=final.id, cutoff=why)

    async def _request(self, run: TurnRun, tools: Toolset | None = None) -> ModelResponse | Stopped:
        """Make one model request, or return `Stopped` when a stop aborted it.

        `tools` replaces the runtime's toolset for this request (the wrap-up offers none). The
        stream races the stop flag: this stage cannot wait for its boundary to notice a stop.
        """
        messages = await run.checked(run.history)
        run.diag.model_requests += 1
        run.diag.note("model_request", str(run.diag.model_requests))

        async def on_delta(text: str) -> None:
            delta = RunEvent(source=EventSource.MODEL, parts=(TextPart(text=text),), partial=True)
            await run.observe(delta)

        toolset = run.toolset if tools is None else tools
        outcome = await until_set(run.signals.stop, self._send(run, messages, toolset, on_delta))
        if isinstance(outcome, ModelResponse):
            run.diag.usage += outcome.usage  # tokens were spent even if the response is dropped
        if run.signals.stop.is_set():  # `until_set` was interrupted, or the stream just ended:
            # a stop accepted while the response streamed wins.
            run.diag.note("model_aborted", run.signals.stopped_by)
            return Stopped(by=run.signals.stopped_by)
        assert isinstance(outcome, ModelResponse)
        run.diag.note("model_response", outcome.response_id)
        return outcome

    async def _send(
        self, run: TurnRun, history: list[Message], toolset: Toolset, on_delta: DeltaSink
    ) -> ModelResponse:
        """Request with the history fitted to the context window; one harder retry on a 400."""
        first = await self._fit(run, history, toolset, 1.0)
        try:
            return await self._respond(first, history, toolset, on_delta)
        except ContextTooLong as exc:
            run.diag.note("context_too_long", str(exc))
            harder = self._window.learn(exc, first.estimate)
        second = await self._fit(run, history, toolset, harder)
        try:
            return await self._respond(second, history, toolset, on_delta)
        except ContextTooLong as exc:
            raise ContextTooLong(
                f"the conversation does not fit the model's context window even compacted: {exc}",
                status=exc.status,
                window=exc.window,
                requested=exc.requested,
            ) from exc

    async def _fit(
        self, run: TurnRun, history: list[Message], toolset: Toolset, harder: float
    ) -> Prepared:
        """What one request sends: the system prompt and the history, compacted to the window."""

        async def summarize(messages: list[Message]) -> str:
            response = await self._model.respond(messages, Toolset())  # audited like any request
            run.diag.usage += response.usage
            run.diag.note("context_summary", response.response_id)
            return response.message.content

        system = SystemMessage(content=self._instructions) if self._instructions else None
        session = run.request.session_id
        prepared = await self._window.prepare(
            session, system, history, toolset, summarize, harder=harder
        )
        if prepared.compacted:
            run.diag.note("context_compacted", prepared.compacted)
        return prepared

    async def _respond(
        self, prepared: Prepared, history: list[Message], toolset: Toolset, on_delta: DeltaSink
    ) -> ModelResponse:
        # `[step 3]` ends each result: the card's number, counted in the whole history
        sent = label_steps(prepared.messages, history)
        response = await self._model.respond(sent, toolset, on_delta)
        # an estimate teaches the calibration nothing (it is what it would be compared with)
        reported = 0 if response.usage.estimated else response.usage.prompt_tokens
        self._window.observe(prepared.estimate, reported)
        return response


def _trace_signals(run: TurnRun) -> None:
    """Note in the run's trace when a stop is accepted and a steer received (listeners kept)."""
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
