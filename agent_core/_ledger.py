"""The tool-call balance ledger: where a turn may be cut.

Each final event adds +1 per function call and -1 per function response it carries; partial
(streaming) events and text-only events add 0. The balance is the number of calls of the current
batch still waiting for their result. The only safe place to suspend or end a turn is the moment
the balance falls from above zero back to zero: the whole batch has answered, so the history is
closed. Cutting anywhere else leaves calls without responses, and every later provider request for
the session fails with HTTP 400.

The ledger never goes negative in a well-formed run; a stray response (more responses than open
calls) is clamped to zero and counted in `overdrawn`, so diagnostics can surface it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_core._events import FunctionCallPart, FunctionResponsePart, RunEvent

__all__ = ["BalanceLedger", "delta"]


def delta(event: RunEvent) -> int:
    """Return what one event contributes to the balance."""
    if event.partial:
        return 0
    change = 0
    for part in event.parts:
        if isinstance(part, FunctionCallPart):
            change += 1
        elif isinstance(part, FunctionResponsePart):
            change -= 1
    return change


@dataclass(slots=True)
class BalanceLedger:
    """Counts open function calls across the events of one turn."""

    balance: int = 0
    """Calls of the current batch still waiting for a response."""
    overdrawn: int = 0
    """Responses that arrived with no open call (a bug upstream if ever non-zero)."""
    parked: set[str] = field(default_factory=set)
    """Calls moved to the suspension ledger (`park`): waiting for a person, not for a tool."""

    def observe(self, event: RunEvent) -> bool:
        """Book one event; return True exactly when a batch has just closed (>0 back to 0).

        The response of a parked call settles it in the suspension ledger, not the balance.
        """
        change = delta(event)
        for part in event.parts if not event.partial else ():
            if isinstance(part, FunctionResponsePart) and part.response.call_id in self.parked:
                self.parked.discard(part.response.call_id)
                change += 1
        if change == 0:
            return False
        was_open = self.balance > 0
        self.balance += change
        if self.balance < 0:
            self.overdrawn -= self.balance
            self.balance = 0
        return was_open and self.balance == 0

    def park(self, call_ids: set[str]) -> bool:
        """Move open calls that wait for an approval out of the balance.

        They go to the suspension ledger (the seed's separate ledger for long waits). Returns
        True when that closed the batch, which may then be cut.
        """
        if not call_ids:
            return False
        was_open = self.balance > 0
        self.parked |= call_ids
        self.balance = max(0, self.balance - len(call_ids))
        return was_open and self.balance == 0

    @property
    def is_open(self) -> bool:
        """True while a batch has calls without responses."""
        return self.balance > 0
