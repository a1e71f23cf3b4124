"""The actor: runs one analysis for a claimed turn job, and accounts for it.

Contract:
- A turn tombstoned before it starts never calls the model and never posts a card; it is
  settled `cancelled`.
- Otherwise the session's progress card is opened (or re-attached), and the analysis runs as a
  chain of turns (`bot.analysis.turn_chain`: each turn settled before the next, redirects and
  the remedy ladder) with the lease's heartbeat and the card's flusher alongside.
- The card always ends in a final state: answered, stopped, failed or cancelled, sent shielded
  on every exit path but two: a lost lease (the new holder owns the card) and a turn left for
  another worker to resume.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import redis.asyncio as aioredis

from agent_core import Awaiting, Dispatched, RunDiagnostics, RunOutcome, Runtime
from agent_core.errors import StoreError
from agent_core.interrupts import ControlPlane
from agent_core.loop import TurnRequest
from bot.analysis.progress import CardTracker
from bot.analysis.takeover import Takeover, continued_card
from bot.analysis.turn_chain import Chain, TurnChain
from bot.control.killswitch import KillSwitch
from bot.control.subagent_desk import SubagentDesk
from bot.control.subagents import SubagentRegistry
from bot.events import Platform
from bot.keys import BotKeys
from bot.process.failpoints import Failpoints
from bot.process.task_errors import cause_of
from bot.publishing.card_publisher import CardPublisher, PublisherOptions
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import CardTarget, ChatPlatform
from bot.state.audit import DEFAULT_RETENTION_S
from bot.state.followups import Followups
from bot.state.lease import Lease, LeaseLost, Leases
from bot.state.runs import RunIndex
from bot.state.settle import SettleWriter
from bot.state.turn_jobs import TurnJob
from cards.model import CardStatus, ProgressCard

__all__ = ["Actor", "ActorOptions"]

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


class Actor:
    """Runs claimed turn jobs. One instance serves every session of a worker."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        redis: aioredis.Redis,
        keys: BotKeys,
        leases: Leases,
        settle: SettleWriter,
        platforms: Mapping[Platform, ChatPlatform],
        options: ActorOptions | None = None,
        failpoints: Failpoints | None = None,
        subagents: SubagentDesk | None = None,
    ) -> None:
        self._runtime = runtime
        self._redis = redis
        self._keys = keys
        self._leases = leases
        self._platforms = platforms
        self._options = options or ActorOptions()
        self._failpoints = failpoints or Failpoints()
        self._switch = KillSwitch(redis, keys)
        self._audit = settle.audit
        self._control = ControlPlane(redis, keys.session)
        self._takeover = Takeover(redis, keys, settle, runtime.store)
        self._followups = Followups(redis, keys)
        self._runs = RunIndex(redis, keys, ttl_s=self._options.run_ttl_s)
        self._turns = TurnChain(
            runtime=runtime,
            keys=keys,
            settle=settle,
            followups=self._followups,
            remedy_rungs=self._options.remedy_rungs,
            max_turns=self._options.max_turns,
            subagents=subagents or SubagentDesk(SubagentRegistry(redis, keys)),
        )

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
        await self._shielded(self._turns.settle_unfinished(chain, reason))
        await self._shielded(self._turns.stop_children_of(job.session_id, "a failure"))
        await self._shielded(publisher.finish(chain.tracker.final(CardStatus.FAILED, error=reason)))

    async def run(self, job: TurnJob, lease: Lease) -> None:
        """Run the analysis `job` starts, holding `lease`; settle and finalize its card.

        A job taken over from a dead worker runs again from its turn, on the same card (its
        closed history holds every batch that finished); one already settled with its card
        final has nothing left to do.
        """
        if await self._finished(job, lease):
            return
        switch = await self._switch.state()
        if switch.on:  # taken just as the kill switch went on: it stops before the model
            await self._control.stop(job.session_id, job.turn_id, by=switch.stopper)
        if not job.resumed and await self._followups.tombstoned(job):
            outcome = await self._runtime.run(
                TurnRequest(session_id=job.session_id, turn_id=job.turn_id)
            )
            # Settled `cancelled`: the model was never called.
            await self._turns.settle_or_lose(outcome, lease)
            return
        chain, publisher = await self._begin(job, lease)
        try:
            final = await self._supervised(chain, publisher)
        except LeaseLost as exc:
            log.warning("analysis %s abandoned: %s", job.turn_id, exc)
            await self._shielded(publisher.clear_status())  # the new holder owns the card
            return
        except asyncio.CancelledError:
            # The worker is going away without a drain: nobody resumes this analysis, so it
            # ends here, truthfully, before the cancellation goes on.
            final = chain.tracker.final(CardStatus.INTERRUPTED)
            await self._shielded(self._turns.settle_unfinished(chain, INTERRUPTED))
            await self._shielded(self._turns.stop_children_of(job.session_id, "an interruption"))
            await self._shielded(publisher.finish(final))
            raise
        except Exception as exc:
            log.exception("analysis %s failed", job.turn_id)
            final = chain.tracker.final(CardStatus.FAILED, error=_short(exc))
            await self._shielded(self._turns.settle_unfinished(chain, _short(exc)))
            await self._shielded(self._turns.stop_children_of(job.session_id, "a failure"))
        if final is not None:
            self._failpoints.hit("before_final_card")
            await self._shielded(publisher.finish(final))
        else:
            await self._shielded(publisher.flush())  # the hand-over, said on the live card

    async def _begin(self, job: TurnJob, lease: Lease) -> tuple[Chain, CardPublisher]:
        """The chain of `job`'s analysis, on the live card it continues or a new one."""
        event = job.event
        record = CardRecord(self._redis, self._keys, job.session_id)
        publisher = self._publisher(job, lease, record)
        card = await continued_card(record, job) or ProgressCard(
            title=event.text, turn_id=job.turn_id, thread=event.thread, link=await self._link(job)
        )
        return Chain(job, lease, CardTracker(card, publisher.show), job.turn_id), publisher

    async def _link(self, job: TurnJob) -> str:
        """The replay page of the analysis `job` starts (the ingress's `GET /runs/{turn_id}`).

        Its index entry is written first; when Redis refuses it, the card goes without a link
        (the analysis matters more than its replay page).
        """
        try:  # also what `chatops replay TURN` looks the session up by
            await self._runs.remember(job.turn_id, job.session_id)
        except StoreError as exc:
            log.warning("analysis %s has no replay link: %s", job.turn_id, exc)
            return ""
        base = self._options.public_url.rstrip("/")
        return f"{base}/runs/{quote(job.turn_id, safe='')}" if base else ""

    def _publisher(self, job: TurnJob, lease: Lease, record: CardRecord) -> CardPublisher:
        event = job.event
        target = CardTarget(event.platform, event.channel, event.thread)
        return CardPublisher(
            self._platforms[event.platform],
            record,
            target,
            lease.token,
            self._options.publisher,
            self._audit,
        )

    async def _supervised(self, chain: Chain, publisher: CardPublisher) -> ProgressCard | None:
        """Run the chain with its heartbeat and card flusher alongside; both end with it.

        The heartbeat starts first: even posting the card may wait out a platform outage.
        """
        try:
            async with asyncio.TaskGroup() as group:
                beat = group.create_task(self._leases.heartbeat(chain.lease, lambda: chain.turn_id))
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
        record = CardRecord(self._redis, self._keys, job.session_id)
        ended, final = await self._takeover.ended(job, record)
        if ended:  # settled already, or parked before its settle: then it is settled here
            waited = Awaiting() if job.event.platform is Platform.SUBAGENT else Dispatched()
            diagnostics = RunDiagnostics(session_id=job.session_id, turn_id=job.turn_id)
            await self._turns.settle_or_lose(
                RunOutcome(result=waited, diagnostics=diagnostics), lease
            )
        if ended and final is not None:
            publisher = self._publisher(job, lease, record)
            await publisher.attach()
            await self._shielded(publisher.finish(final))
        return ended


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else text[:199] + "…"
