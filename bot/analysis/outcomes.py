"""How a chain of turns ends: a tagged union, one class per way, handled by the actor.

Contract:
- `TurnChain.run` returns exactly one `ChainEnd` when it returns at all; every turn it ran is
  settled by then (an abnormal end raises instead, and the actor settles what is left).
- `FinalCard`: the analysis is over; the card must be made final with `card`.
- `HandedOver`: a drain suspended it; its continuation is on the stream for any worker, and the
  card stays live.
- `Parked`: it waits (for people's approvals, its sub-agents, or its parent's answer); the
  continuation is parked where the answer queues it, and the card stays live.

Only `FinalCard` ends the card, so a dispatcher closed with `assert_never` cannot leave a card
live by forgetting a variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cards import ProgressCard

__all__ = ["ChainEnd", "FinalCard", "HandedOver", "Parked", "WaitingFor"]


@dataclass(frozen=True, slots=True)
class FinalCard:
    """The analysis ended; its card ends as `card` (answered, stopped, cancelled or failed)."""

    card: ProgressCard


@dataclass(frozen=True, slots=True)
class HandedOver:
    """A drained turn was settled and its continuation queued for another worker."""

    next_turn: str
    """The turn that continues the analysis elsewhere."""


class WaitingFor(StrEnum):
    """What a parked analysis waits for."""

    APPROVALS = "approvals"
    """People's decisions on calls suspended for approval (the approval desk queues it)."""
    CHILDREN = "children"
    """The reports of the sub-agents it dispatched (the last report queues it)."""
    PARENT = "parent"
    """A sub-agent's question to its parent (the parent's answer queues it)."""


@dataclass(frozen=True, slots=True)
class Parked:
    """A turn that ended to wait was settled and its continuation parked."""

    next_turn: str
    """The turn that continues the analysis once the wait is over."""
    waiting_for: WaitingFor


ChainEnd = FinalCard | HandedOver | Parked
