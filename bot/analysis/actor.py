"""The actor: runs one analysis for a claimed turn job, and accounts for it.

Contract:
- A turn tombstoned before it starts never calls the model and never posts a card; it is
  settled `cancelled`.
- Otherwise the session's progress card is opened (or re-attached), and the analysis runs as a
  chain of turns (`bot.analysis.turn_chain`: each turn settled before the next, redirects and
  the remedy ladder) with the lease's heartbeat and the card's flusher alongside.
- The chain says how it ended (`bot.analysis.outcomes`), and the actor acts on it: a final card
  is sent, a hand-over or a park is said on the live card. A chain that raises is ended here:
  what it left unsettled is settled, its sub-agents stopped, and its card made final.
- The card always ends in a final state: answered, stopped, failed or cancelled, sent shielded
  on every exit path but two: a lost lease (the new holder owns the card) and a turn left for
  another worker to resume (handed over or parked).
- The actor builds nothing: its collaborators (`ActorParts`) are built once per worker, in
  `bot.worker.assembly`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, assert_never

from agent_core import (
    Awaiting,
    ControlPlane,
    Dispatched,
    RunDiagnostics,
    RunOutcome,
    Runtime,
    TurnRequest,
)
from bot.analysis.card_factory import CardFactory
from bot.analysis.outcomes import ChainEnd, FinalCard, HandedOver, Parked
from bot.analysis.progress import CardTracker
from bot.analysis.settlement import Settlement
from bot.analysis.takeover import Takeover
from bot.analysis.turn_chain import Chain, TurnChain
from bot.control.killswitch import KillSwitch
from bot.events import Platform
from bot.process.failpoints import Failpoints
from bot.process.task_errors import cause_of
from bot.publishing.card_publisher import CardPublisher, PublisherOptions
from bot.state.audit import DEFAULT_RETENTION_S
from bot.state.followups import Followups
from bot.state.lease import Lease, LeaseLost, Leases
from bot.state.turn_jobs import TurnJob
from cards import CardStatus

__all__ = ["Actor", "ActorOptions", "ActorParts"]

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted: the worker stopped before this turn ended"


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorOptions:
    """Bounds of one analysis."""

    remedy_rungs: int = 1
    """Re-runs of a completed turn whose answer was empty."""
    max_turns: int = 20
    """Turns in one analysis (each redirect or remedy is one); then it fails clearly."""
    publisher: PublisherOptions = field(default_factory=PublisherOptions)
    cleanup_timeout_s: float = 30.0
    """Bound of the shielded settle-and-release work on an abnormal exit."""
    public_url: str = ""
    """`CHATOPS_PUBLIC_URL`: a new card links to `{public_url}/runs/{turn_id}`; empty: no link."""
    run_ttl_s: int = DEFAULT_RETENTION_S
    """How long the linked page's index is kept (the audit's retention, `bot.ops.runs`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorParts:
    """What the actor works with; built once per worker (`bot.worker.assembly.build_actor`)."""

    runtime: Runtime
    """Runs a tombstoned turn (settled `cancelled` without calling the model)."""
    leases: Leases
    """Keeps each analysis's lease alive while it runs."""
    turns: TurnChain
    """Runs an analysis's chain of turns."""
    settlement: Settlement
    """Settles turns and stops sub-agents (for a takeover and an abnormal end)."""
    takeover: Takeover
    """Reads where a taken-over analysis stands."""
    followups: Followups
    """Tells whether a job's turn was tombstoned."""
    cards: CardFactory
    """Makes each job's card record and publisher, and new cards."""
    switch: KillSwitch
    """The kill switch a job taken as it goes on is stopped by."""
    control: ControlPlane
    """Records that stop."""
    failpoints: Failpoints
    """Where a test kills the worker (`before_final_card`)."""


class Actor:
    """Runs claimed turn jobs. One instance serves every session of a worker."""

    def __init__(self, parts: ActorParts, options: ActorOptions | None = None) -> None:
        self._parts = parts
        self._turns = parts.turns
        self._settlement = parts.settlement
        self._cards = parts.cards
        self._options = options or ActorOptions()

    def drain(self) -> None:
        """Ask every live turn to suspend at its next cut; later turns suspend at their first.

        A drained turn is settled `drained` and handed over: a resume job for the next turn of
        its analysis goes on the stream, for any worker, and the card stays live meanwhile.
        """
        self._turns.drain()

    async def give_up(self, job: TurnJob, lease: Lease, reason: str) -> None:
        """End an analysis that cannot be run (a poison job): settled failed, card final."""
        chain, publisher = await self._begin(job, lease)
        await publisher.attach()  # its workers posted a card: end that one, post no other
        await self._wind_down(chain, reason, by="a failure")
        await self._shielded(publisher.finish(chain.tracker.final(CardStatus.FAILED, error=reason)))

    async def run(self, job: TurnJob, lease: Lease) -> None:
        """Run the analysis `job` starts, holding `lease`; settle and finalize its card.

        A job taken over from a dead worker runs again from its turn, on the same card (its
        closed history holds every batch that finished); one already settled with its card
        final has nothing left to do.
        """
        if await self._finished(job, lease):
            return
        switch = await self._parts.switch.state()
        if switch.on:  # taken just as the kill switch went on: it stops before the model
            await self._parts.control.stop(job.session_id, job.turn_id, by=switch.stopper)
        if not job.resumed and await self._parts.followups.tombstoned(job):
            outcome = await self._parts.runtime.run(
                TurnRequest(session_id=job.session_id, turn_id=job.turn_id)
            )
            # Settled `cancelled`: the model was never called.
            await self._settlement.settle_or_lose(outcome, lease)
            return
        chain, publisher = await self._begin(job, lease)
        try:
            ending = await self._supervised(chain, publisher)
        except LeaseLost as exc:
            log.warning("analysis %s abandoned: %s", job.turn_id, exc)
            await self._shielded(publisher.clear_status())  # the new holder owns the card
            return
        except asyncio.CancelledError:
            # The worker is going away without a drain: nobody resumes this analysis, so it
            # ends here, truthfully, before the cancellation goes on.
            final = chain.tracker.final(CardStatus.INTERRUPTED)
            await self._wind_down(chain, INTERRUPTED, by="an interruption")
            await self._shielded(publisher.finish(final))
            raise
        except Exception as exc:
            log.exception("analysis %s failed", job.turn_id)
            ending = FinalCard(chain.tracker.final(CardStatus.FAILED, error=_short(exc)))
            await self._wind_down(chain, _short(exc), by="a failure")
        await self._show(ending, publisher)

    async def _show(self, ending: ChainEnd, publisher: CardPublisher) -> None:
        """Say on the card how the chain ended: final, or still live for its continuation."""
        match ending:
            case FinalCard(card=card):
                self._parts.failpoints.hit("before_final_card")
                await self._shielded(publisher.finish(card))
            case HandedOver() | Parked():
                await self._shielded(publisher.flush())  # the hand-over, said on the live card
            case never:
                assert_never(never)

    async def _wind_down(self, chain: Chain, error: str, *, by: str) -> None:
        """Settle what a chain that ended abnormally left unsettled; stop its sub-agents."""
        await self._shielded(self._settlement.settle_each(chain.leftovers(error), chain.lease))
        await self._shielded(self._settlement.stop_children_of(chain.job.session_id, by))

    async def _begin(self, job: TurnJob, lease: Lease) -> tuple[Chain, CardPublisher]:
        """The chain of `job`'s analysis, on the live card it continues or a new one."""
        record = self._cards.record(job.session_id)
        publisher = self._cards.publisher(job, lease, record)
        continued = await self._parts.takeover.continued(record, job)
        card = continued or await self._cards.new_card(job)
        return Chain(job, lease, CardTracker(card, publisher.show), job.turn_id), publisher

    async def _supervised(self, chain: Chain, publisher: CardPublisher) -> ChainEnd:
        """Run the chain with its heartbeat and card flusher alongside; both end with it.

        The heartbeat starts first: even posting the card may wait out a platform outage.
        """
        leases = self._parts.leases
        try:
            async with asyncio.TaskGroup() as group:
                beat = group.create_task(leases.heartbeat(chain.lease, lambda: chain.turn_id))
                try:
                    await publisher.open(chain.tracker.card)
                    flusher = group.create_task(publisher.run())
                    try:
                        return await self._turns.run(chain)
                    finally:
                        flusher.cancel()
                finally:
                    beat.cancel()
        except* Exception as failed:  # one cause, a lost lease first
            raise cause_of(failed, first=LeaseLost)  # noqa: B904 (`from` would drop its cause)

    async def _shielded(self, work: Coroutine[Any, Any, object]) -> None:
        """Run cleanup that must happen, shielded from cancellation and time-bounded."""
        bounded = asyncio.wait_for(work, self._options.cleanup_timeout_s)
        task = asyncio.get_running_loop().create_task(bounded)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task})
            raise
        except Exception:
            log.exception("cleanup failed")

    async def _finished(self, job: TurnJob, lease: Lease) -> bool:
        """Whether a taken-over job's analysis already ended; its card is made final then."""
        record = self._cards.record(job.session_id)
        ended, final = await self._parts.takeover.ended(job, record)
        if ended:  # settled already, or parked before its settle: then it is settled here
            waited = Awaiting() if job.event.platform is Platform.SUBAGENT else Dispatched()
            diagnostics = RunDiagnostics(session_id=job.session_id, turn_id=job.turn_id)
            await self._settlement.settle_or_lose(
                RunOutcome(result=waited, diagnostics=diagnostics), lease
            )
        if ended and final is not None:
            publisher = self._cards.publisher(job, lease, record)
            await publisher.attach()
            await self._shielded(publisher.finish(final))
        return ended


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else text[:199] + "…"
