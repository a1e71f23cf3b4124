"""One running turn: its request, its mutable state, and the moves every stage makes on it.

Contract (docs/design.md §Invariants I1–I3):
- Every event passes through `TurnRun.observe` exactly once; the ledger decides where a cut may
  happen.
- `TurnRun.boundary` is the stage boundary: the one place the stop flag is read between stages
  (the model stream races it inside its stage, `agent_core._loop`). Signals are probed only by
  it, with no call open: before the first model request, at each zero-crossing of the balance
  and when calls are parked for approval, i.e. once per batch, never per streamed delta.
- A stop found at a boundary ends the turn there: nothing after it starts.
- `TurnRun.run_batch` raises when a batch it ran to its end left the balance open.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from agent_core._batch import run_batch
from agent_core._budget import Budget, BudgetMeter
from agent_core._diagnostics import ProbePoint, RunDiagnostics
from agent_core._errors import AgentError, HistoryError
from agent_core._events import EventSource, FunctionResponsePart, RunEvent
from agent_core._history import CheckedPrefix, validate_from
from agent_core._interrupts import Signal, TurnSignals, checkpoint
from agent_core._ledger import BalanceLedger
from agent_core._messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from agent_core._outcome import Awaiting, Dispatched, Drained, RunResult, Steered, Stopped
from agent_core._repair import repair_history
from agent_core._store import Fence, HistoryStore
from agent_core.tools._base import Toolset

__all__ = ["EventSink", "TurnContext", "TurnRequest", "TurnRun", "tool_event"]

log = logging.getLogger(__name__)

EventSink = Callable[[RunEvent], Awaitable[None]]
"""Receives every event of a run, in order (for progress cards and audit)."""


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
    max_model_requests: int | None = None
    """When set, the turn's model requests with tools are capped at this (an alert's triage: a
    short analysis); never more than the runtime's budget allows."""


@dataclass(eq=False)
class TurnContext:
    """What tools see of their turn (`agent_core.tools._base.ToolContext`)."""

    session_id: str
    turn_id: str
    signals: TurnSignals
    call_id: str = ""

    def raise_dispatch(self) -> None:
        """Ask the turn to end at the next cut (work was handed to sub-agents)."""
        self.signals.raise_local(Signal.DISPATCH)

    def raise_await(self) -> None:
        """Ask the turn to end at the next cut (it waits for its parent's answer)."""
        self.signals.raise_local(Signal.AWAIT)


_CUT_RESULTS: dict[Signal, RunResult] = {
    Signal.STEER: Steered(),
    Signal.DRAIN: Drained(),
    Signal.DISPATCH: Dispatched(),
    Signal.AWAIT: Awaiting(),
}


@dataclass(eq=False)
class TurnRun:
    """The mutable state of one run, and the moves its stages make on it."""

    request: TurnRequest
    signals: TurnSignals
    diag: RunDiagnostics
    store: HistoryStore
    history: list[Message] = field(default_factory=list)
    ledger: BalanceLedger = field(default_factory=BalanceLedger)
    call_ids: set[str] = field(default_factory=set)
    sinks: tuple[EventSink, ...] = ()
    meter: BudgetMeter = field(default_factory=lambda: BudgetMeter(Budget()))
    toolset: Toolset = field(default_factory=Toolset)
    """The tools this run offers (the runtime's, narrowed by `TurnRequest.tools`)."""
    validated: CheckedPrefix = field(default_factory=CheckedPrefix)
    """The validator's state after the part of `validated_of` the last check validated."""
    validated_of: list[Message] | None = None
    """The history list `validated` is about (the run's history only grows by `close`)."""

    async def observe(self, event: RunEvent) -> bool:
        """Book one event: count it, move the balance, forward it. True at a zero-crossing."""
        checkpoint()
        self.diag.events += 1
        closed = self.ledger.observe(event)
        for sink in self.sinks:
            try:
                await sink(event)
            except Exception:  # a progress card that fails to update must not end the run
                self.diag.sink_failures += 1
                log.exception("event sink failed on %s", event.id)
        return closed

    async def boundary(
        self, site: str | None, *, found: RunResult | None = None, ran: bool = True
    ) -> RunResult | None:
        """The stage boundary: return how the turn ends here, or None to go on.

        In order: a stop (checked when work `ran` since the last probe; a probe at the very
        start reads the stop itself), then `found` (a cut already found at this boundary), then
        the signals probed at `site` (None: no probe, e.g. after a history repair). Only called
        with no call open.
        """
        checkpoint()
        if self.ledger.is_open:
            raise AgentError(f"internal: probe with {self.ledger.balance} call(s) open")
        if ran and self.signals.stop.is_set():
            return Stopped(by=self.signals.stopped_by)
        if found is not None or site is None:
            return found
        probed = await self.signals.probe()
        self.diag.probes.append(ProbePoint(self.diag.events, self.ledger.balance, site, probed))
        if probed is None:
            return None
        self.diag.stamp_cut(probed)
        if probed is Signal.STOP:  # the probe read the stop's tombstone
            return Stopped(by=self.signals.stopped_by)
        return _CUT_RESULTS[probed]

    async def close(self, messages: Sequence[Message]) -> None:
        """Append closed messages (an answer, a batch with all its results) to the history."""
        await self.store.append_closed(
            self.request.session_id, self.request.turn_id, list(messages), self.request.fence
        )
        self.history += messages

    async def journal(self, result: ToolMessage) -> None:
        """Journal one result of the open batch, then book it."""
        await self.store.journal_result(
            self.request.session_id, self.request.turn_id, result, self.request.fence
        )
        await self.observe(tool_event(result))

    async def run_batch(
        self,
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
        journal = journal_turn or self.request.turn_id
        closed = False

        async def on_result(result: ToolMessage) -> None:
            nonlocal closed
            try:  # journaled before anyone is told, so what the card shows is durable
                await self.store.journal_result(
                    self.request.session_id, journal, result, self.request.fence
                )
            except AgentError as exc:  # the journal only saves re-runs; the commit decides
                self.diag.journal_failures += 1
                log.warning("journal write failed for %s: %s", result.call_id, exc)
            closed = await self.observe(tool_event(result))

        if calls is None:
            await self.store.journal_batch(
                self.request.session_id, self.request.turn_id, message, self.request.fence
            )
            calls = [c for c in message.tool_calls if c.id not in (skip or set())]
        ctx = TurnContext(self.request.session_id, self.request.turn_id, self.signals)
        results = await run_batch(
            calls, self.toolset, ctx, self.signals, self.diag, on_result, approved
        )
        if not skip and (not closed or self.ledger.is_open):
            raise AgentError("internal: a batch ended without closing the balance")
        return results

    async def checked(
        self, history: list[Message], known: CheckedPrefix | None = None
    ) -> list[Message]:
        """Validate a history before it is used; repair (and persist the repair) if needed.

        Only what follows the part already validated is checked: `known` (the state the store
        found for a prefix of `history`) or, for the list the last check was about (the run's
        history, which only grows), what that check validated.
        """
        prefix = known or (self.validated if history is self.validated_of else None)
        if prefix is not None and prefix.length > len(history):
            prefix = None
        try:
            self.validated = validate_from(history, prefix)
        except HistoryError:
            return await self.repaired(history, forced=False)
        self.validated_of = history
        return history

    def history_call_ids(self) -> set[str]:
        """Every call id of the run's history, as a new set (the run adds the ids it assigns)."""
        if self.validated_of is self.history and self.validated.length == len(self.history):
            return set(self.validated.call_ids)
        return {c.id for m in self.history if isinstance(m, AssistantMessage) for c in m.tool_calls}

    async def repaired(self, history: Sequence[Message], *, forced: bool) -> list[Message]:
        """Repair a history and persist the repair; `forced` notes a retry with no change."""
        report = repair_history(list(history))
        changes = list(report.changes) or (["no change found; retrying once"] if forced else [])
        self.diag.repairs += changes
        self.diag.note("repair", "; ".join(changes))
        if report.changes:
            await self.store.replace(self.request.session_id, report.messages, self.request.fence)
        messages = list(report.messages)
        self.validated, self.validated_of = validate_from(messages), messages  # repair's output
        return messages


def tool_event(result: ToolMessage) -> RunEvent:
    """The event that books one tool result."""
    return RunEvent(source=EventSource.TOOL, parts=(FunctionResponsePart(response=result),))
