"""Settling an analysis's turns and stopping its sub-agents: the books of how it ended.

Contract:
- `settle_or_lose` settles one run fenced by its lease; a fenced settle (a newer holder took the
  session) raises `LeaseLost`, so the caller stops touching the session.
- `settle_each` settles outcomes without that check: it serves the abnormal ends (a failure, an
  interruption, a poison job), whose turns may already be settled; settles are NX, so running it
  twice, or after a normal settle, changes nothing.
- `stop_children_of` stops the session's sub-agents only when one still works; a tree already
  final is left alone, so it is idempotent too.

The turn chain calls these as its turns end; the actor calls them for what the chain left when
it ended abnormally (`Chain.leftovers`), each under its own shielded, bounded cleanup.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent_core import RunOutcome
from bot.control.subagents import SubagentRegistry
from bot.state.lease import Lease, LeaseLost
from bot.state.settle import Settled, SettleWriter

__all__ = ["Settlement"]


class Settlement:
    """Settles turns for their lease holder and stops sub-agents nobody will read."""

    def __init__(self, settle: SettleWriter, registry: SubagentRegistry) -> None:
        self._settle = settle
        self._registry = registry

    async def settle_or_lose(self, outcome: RunOutcome, lease: Lease) -> None:
        """Settle one run's turn.

        Raises:
            LeaseLost: The settle was fenced (a newer holder).
        """
        if await self._settle.settle(outcome, lease) is Settled.FENCED:
            raise LeaseLost(
                "settle fenced",
                session_id=lease.session_id,
                turn_id=outcome.diagnostics.turn_id,
            )

    async def settle_each(self, outcomes: Iterable[RunOutcome], lease: Lease) -> None:
        """Settle every outcome in order; one already settled (or fenced) is left as it is."""
        for outcome in outcomes:
            await self._settle.settle(outcome, lease)

    async def stop_children_of(self, session_id: str, by: str) -> None:
        """Stop the session's sub-agents, if it has any still working (an analysis ended)."""
        children = await self._registry.children(session_id)
        if any(not c.state.is_final for c in children):
            await self._registry.stop_tree(session_id, by)
