"""Run diagnostics and the settle record.

The runtime stamps a turn as steered at the moment of the cut (`RunDiagnostics.stamp_cut`), in
the same object the caller reads back after the run returns: downstream books (the remedy ladder,
the "no final reply" diagnostic, the automation-turn ledger) must never have to guess from an
empty answer whether a turn was redirected or genuinely had nothing to say.

`SettleRecord` is what the worker writes once per claimed turn; writing and routing it is the
worker's job, its shape lives here so both sides agree on it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict

from agent_core._interrupts import Signal
from agent_core._llm.client import Usage
from agent_core._messages import ToolStatus
from agent_core._outcome import Completed, Failed, RunResult, SettleReason, settle_reason

__all__ = [
    "ProbePoint",
    "RunDiagnostics",
    "RunOutcome",
    "SettleRecord",
    "ToolRun",
    "TraceEntry",
]


@dataclass(frozen=True, slots=True)
class ProbePoint:
    """One signal probe: where it happened and what it found."""

    event_index: int
    """How many events had been observed when the probe ran."""
    balance: int
    """The ledger's balance at the probe (always 0)."""
    site: str
    """`start` (before the first model request) or `batch_closed` (a zero-crossing)."""
    found: Signal | None


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One step of the turn, in order: a model request, a tool start, a stop, a cut, ..."""

    seq: int
    kind: str
    detail: str = ""
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One call the batch runner answered: which tool, how it ended, and when."""

    call_id: str
    tool: str
    """The tool's name; empty when the model named a tool the turn does not offer."""
    status: ToolStatus
    started_at: float | None
    """When its handler started (`time.monotonic`); None when it was answered without running
    (unknown tool, bad arguments, not run after a stop)."""
    ended_at: float


@dataclass(eq=False)
class RunDiagnostics:
    """What one run did, shared between the runtime and its caller."""

    session_id: str
    turn_id: str
    steered: bool = False
    """Stamped at the cut when the turn was suspended by a steer."""
    cut: Signal | None = None
    events: int = 0
    probes: list[ProbePoint] = field(default_factory=list)
    model_requests: int = 0
    tool_calls_started: int = 0
    usage: Usage = field(default_factory=Usage)
    repairs: list[str] = field(default_factory=list)
    journal_failures: int = 0
    sink_failures: int = 0
    trace: list[TraceEntry] = field(default_factory=list)
    tools: list[ToolRun] = field(default_factory=list)
    """Every call the batch runner answered, in the order the answers came."""
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended_at: datetime | None = None
    _started: dict[str, float] = field(default_factory=dict, init=False, repr=False)

    def note(self, kind: str, detail: str = "") -> None:
        """Append a step to the ordered trace."""
        self.trace.append(TraceEntry(seq=len(self.trace), kind=kind, detail=detail))

    def tool_started(self, call_id: str) -> None:
        """A call's handler starts (traced as `tool_start`)."""
        self.tool_calls_started += 1
        self.note("tool_start", call_id)
        self._started[call_id] = self.trace[-1].at

    def tool_answered(self, call_id: str, tool: str, status: ToolStatus) -> None:
        """A call of a batch was answered (traced as `tool_end`); `tool` "" if not offered."""
        self.note("tool_end", call_id)
        started = self._started.pop(call_id, None)
        self.tools.append(ToolRun(call_id, tool, status, started, self.trace[-1].at))

    def stamp_cut(self, signal: Signal) -> None:
        """Record the signal that cut the turn; a steer stamps the turn as steered."""
        self.cut = signal
        if signal is Signal.STEER:
            self.steered = True
        self.note("cut", signal.value)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What `Runtime.run` returns: the result and the diagnostics of the run."""

    result: RunResult
    diagnostics: RunDiagnostics

    @property
    def reason(self) -> SettleReason:
        """The settle reason of the result."""
        return settle_reason(self.result)


class SettleRecord(BaseModel):
    """The durable record of how one claimed turn ended (docs/design.md §Invariants I5)."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    turn_id: str
    reason: SettleReason
    final_event_id: str
    """The final answer's event id; always empty unless the turn completed."""
    error: str = ""
    started_at: datetime
    ended_at: datetime
    prompt_tokens: int = 0
    completion_tokens: int = 0
    usage_estimated: bool = False
    """The tokens are (partly) the runtime's estimate: the provider reported no usage."""
    model_requests: int = 0
    probes: int = 0
    events: int = 0

    @classmethod
    def from_outcome(cls, outcome: RunOutcome) -> SettleRecord:
        """Build the record for a finished run."""
        diag, result = outcome.diagnostics, outcome.result
        return cls(
            session_id=diag.session_id,
            turn_id=diag.turn_id,
            reason=outcome.reason,
            final_event_id=result.final_event_id if isinstance(result, Completed) else "",
            error=result.error if isinstance(result, Failed) else "",
            started_at=diag.started_at,
            ended_at=diag.ended_at or datetime.now(UTC),
            prompt_tokens=diag.usage.prompt_tokens,
            completion_tokens=diag.usage.completion_tokens,
            usage_estimated=diag.usage.estimated,
            model_requests=diag.model_requests,
            probes=len(diag.probes),
            events=diag.events,
        )
