"""How a turn ended: a tagged union, one class per way, mapped to a settle reason.

`settle_reason` is total over `RunResult` (closed with `assert_never`), so adding a result class
without a reason fails type checking.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

__all__ = [
    "Awaiting",
    "Cancelled",
    "Completed",
    "Dispatched",
    "Drained",
    "Failed",
    "RunResult",
    "SettleReason",
    "Steered",
    "Stopped",
    "settle_reason",
]


class SettleReason(StrEnum):
    """Why a claimed turn was settled (docs/design.md §Invariants I5)."""

    COMPLETED = "completed"
    STEERED = "steered"
    STOPPED = "stopped"
    DRAINED = "drained"
    DISPATCHED = "dispatched"
    AWAITING = "awaiting"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Completed:
    """The model gave a final answer (possibly empty)."""

    answer: str
    final_event_id: str
    cutoff: str = ""
    """Set when a spent budget ended the analysis early: which one (for the card)."""


@dataclass(frozen=True, slots=True)
class Steered:
    """Suspended at a cut because a person redirected the analysis."""


@dataclass(frozen=True, slots=True)
class Drained:
    """Suspended at a cut because the worker is shutting down; another worker resumes."""


@dataclass(frozen=True, slots=True)
class Dispatched:
    """Ended at a cut after handing work to sub-agents."""


@dataclass(frozen=True, slots=True)
class Awaiting:
    """Ended at a cut to wait for an answer: the parent's, or people's approvals.

    `approvals` names the calls suspended for a decision (`agent_core._approvals`); the next
    turn of the session closes their batch.
    """

    approvals: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Stopped:
    """Ended by a stop; in-flight interruptible calls answered "interrupted"."""

    by: str


@dataclass(frozen=True, slots=True)
class Cancelled:
    """Never started: a stop was recorded before the turn began (a tombstone)."""

    by: str


@dataclass(frozen=True, slots=True)
class Failed:
    """Ended by an error; `error` is a short message fit for the progress card."""

    error: str


RunResult = Completed | Steered | Drained | Dispatched | Awaiting | Stopped | Cancelled | Failed


def settle_reason(result: RunResult) -> SettleReason:
    """Return the settle reason for a result."""
    match result:
        case Completed():
            return SettleReason.COMPLETED
        case Steered():
            return SettleReason.STEERED
        case Drained():
            return SettleReason.DRAINED
        case Dispatched():
            return SettleReason.DISPATCHED
        case Awaiting():
            return SettleReason.AWAITING
        case Stopped():
            return SettleReason.STOPPED
        case Cancelled():
            return SettleReason.CANCELLED
        case Failed():
            return SettleReason.FAILED
        case _:
            assert_never(result)
