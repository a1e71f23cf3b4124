"""The actor: runs one analysis (a chain of turns) for a claimed turn job, and accounts for it.

Contract:
- A turn tombstoned before it starts never calls the model and never posts a card; it is
  settled `cancelled`.
- Otherwise the session's progress card is opened (or re-attached), the runtime runs, and every
  turn it ran is settled once (`bot.settle`) before the next one starts.
- A steered turn continues in a follow-up turn of the same analysis and card: the follow-up
  starts from the closed history plus every steer queued at the cut, in order (the runtime's
  `begin_turn` absorbs them; the model sees each as a correction from a named person). Steers or
  queued messages that arrive while the final answer streams also get a follow-up turn.
- A completed turn with an empty answer (not steered) climbs the remedy ladder: it is re-run
  with a nudge, at most `remedy_rungs` times.
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

import redis.asyncio as aioredis

from agent_core import (
    Awaiting,
    Cancelled,
    Completed,
    Dispatched,
    Drained,
    Failed,
    Fence,
    RunDiagnostics,
    RunOutcome,
    Runtime,
    Steered,
    Stopped,
    UserKind,
    UserMessage,
    load_message,
)
from agent_core.interrupts import TOMBSTONE_TTL_S, Signal, TurnSignals, checkpoint
from agent_core.loop import TurnRequest
from agent_core.store import map_redis_errors
from bot.card_publisher import CardPublisher, PublisherOptions
from bot.card_record import CardRecord
from bot.events import ChatEvent, Platform
from bot.failpoints import Failpoints
from bot.keys import BotKeys
from bot.lease import Lease, LeaseLost, Leases
from bot.platform import CardTarget, ChatPlatform
from bot.progress import CardTracker
from bot.queue import TurnJob
from bot.settle import Settled, SettleWriter, verdict_of
from bot.takeover import Takeover, continued_card
from cards.model import CardStatus, ProgressCard

__all__ = ["Actor", "ActorOptions"]

log = logging.getLogger(__name__)

INTERRUPTED = "interrupted: the worker stopped before this turn ended"

# KEYS: open turns, follow-ups, the current turn's tombstone, the next turn's tombstone.
# ARGV: next turn, tombstone ttl.
_OPEN_TURN = """
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
local stop = redis.call('GET', KEYS[3])
if stop then redis.call('SET', KEYS[4], stop, 'EX', ARGV[2]) end
return 1
"""
REMEDY_NUDGE = (
    "Your last reply was empty. Answer the task above now, or say in one sentence why you cannot."
)


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


@dataclass(eq=False)
class _Chain:
    job: TurnJob
    lease: Lease
    tracker: CardTracker
    turn_id: str
    rungs: int = 0
    turns: int = 0
    opened: list[str] = field(default_factory=list)
    """Follow-up turns this chain created (each must settle)."""
    unsettled: RunOutcome | None = None
    """The last run's outcome until it is settled (an error in between still settles it)."""


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
    ) -> None:
        self._runtime = runtime
        self._redis = redis
        self._keys = keys
        self._leases = leases
        self._settle = settle
        self._platforms = platforms
        self._options = options or ActorOptions()
        self._failpoints = failpoints or Failpoints()
        self._takeover = Takeover(redis, keys, settle, runtime.store)
        self._open = redis.register_script(_OPEN_TURN)
        self._live: dict[str, TurnSignals] = {}
        self._draining = False

    def drain(self) -> None:
        """Ask every live turn to suspend at its next cut; later turns suspend at their first.

        A drained turn is settled `drained` and handed over: a resume job for the next turn of
        its analysis goes on the stream, for any worker, and the card stays live meanwhile.
        """
        self._draining = True
        for signals in self._live.values():
            signals.raise_local(Signal.DRAIN)

    async def give_up(self, job: TurnJob, lease: Lease, reason: str) -> None:
        """End an analysis that cannot be run (a poison job): settled failed, card final."""
        event = job.event
        record = CardRecord(self._redis, self._keys, job.session_id)
        target = CardTarget(event.platform, event.channel, event.thread)
        publisher = CardPublisher(
            self._platforms[event.platform], record, target, lease.token, self._options.publisher
        )
        card = await continued_card(record, job) or ProgressCard(
            title=event.text, turn_id=job.turn_id, thread=event.thread
        )
        chain = _Chain(job, lease, CardTracker(card, publisher.show), job.turn_id)
        await self._shielded(self._settle_unfinished(chain, reason))
        await self._shielded(publisher.finish(chain.tracker.final(CardStatus.FAILED, error=reason)))

    async def run(self, job: TurnJob, lease: Lease) -> None:
        """Run the analysis `job` starts, holding `lease`; settle and finalize its card.

        A job taken over from a dead worker runs again from its turn, on the same card (its
        closed history holds every batch that finished); one already settled with its card
        final has nothing left to do.
        """
        if await self._finished(job, lease):
            return
        if await self._tombstoned(job):
            outcome = await self._runtime.run(
                TurnRequest(session_id=job.session_id, turn_id=job.turn_id)
            )
            await self._settle_or_lose(outcome, lease)  # Cancelled: the model was never called
            return
        event = job.event
        platform = self._platforms[event.platform]
        target = CardTarget(event.platform, event.channel, event.thread)
        record = CardRecord(self._redis, self._keys, job.session_id)
        publisher = CardPublisher(platform, record, target, lease.token, self._options.publisher)
        card = await continued_card(record, job) or ProgressCard(
            title=event.text, turn_id=job.turn_id, thread=event.thread
        )
        chain = _Chain(job, lease, CardTracker(card, publisher.show), job.turn_id)
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
            await self._shielded(self._settle_unfinished(chain, INTERRUPTED))
            await self._shielded(publisher.finish(final))
            raise
        except Exception as exc:
            log.exception("analysis %s failed", job.turn_id)
            final = chain.tracker.final(CardStatus.FAILED, error=_short(exc))
            await self._shielded(self._settle_unfinished(chain, _short(exc)))
        if final is not None:
            self._failpoints.hit("before_final_card")
            await self._shielded(publisher.finish(final))
        else:
            await self._shielded(publisher.flush())  # the hand-over, said on the live card

    async def _supervised(self, chain: _Chain, publisher: CardPublisher) -> ProgressCard | None:
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
                        return await self._chain(chain)
                    finally:
                        flusher.cancel()
                finally:
                    beat.cancel()
        except* LeaseLost as lost:
            raise lost.exceptions[0] from None
        except* Exception as failed:  # one cause, not "unhandled errors in a TaskGroup"
            raise failed.exceptions[0] from None

    async def _chain(self, chain: _Chain) -> ProgressCard | None:
        """Run turns until the analysis ends; the final card, or None to leave it live."""
        session = chain.job.session_id
        task = [] if chain.job.resumed else [_task(chain.job.event)]
        inputs = [*task, *await self._take_inbox(session)]
        while True:
            checkpoint()  # redis-py on 3.11 can swallow a cancel (see `checkpoint`)
            chain.turns += 1
            chain.tracker.begin_turn(chain.turn_id)
            outcome = chain.unsettled = await self._run_turn(chain, inputs)
            follow_up = await self._next_inputs(chain, outcome)
            if follow_up is not None and chain.turns >= self._options.max_turns:
                await self._settle_or_lose(outcome, chain.lease)
                return chain.tracker.final(CardStatus.FAILED, error="too many turns")
            if isinstance(outcome.result, Drained):
                await self._hand_over(chain, outcome)
                chain.tracker.handed_over()
                return None  # the card stays live: the analysis continues elsewhere
            if follow_up is None:
                await self._settle_or_lose(outcome, chain.lease)
                return self._final(chain, outcome)
            next_turn = f"{chain.job.turn_id}.{chain.turns}"
            chain.opened.append(next_turn)
            # Opened before this turn settles, so a stop from now on tombstones it; a stop
            # that came earlier tombstoned this turn, and is carried over to the next.
            await self._open_turn(session, chain.turn_id, next_turn)
            await self._settle_or_lose(outcome, chain.lease)
            chain.turn_id, inputs = next_turn, follow_up

    async def _run_turn(self, chain: _Chain, inputs: list[UserMessage]) -> RunOutcome:
        session = chain.job.session_id
        request = TurnRequest(
            session_id=session,
            turn_id=chain.turn_id,
            inputs=tuple(inputs),
            fence=Fence(self._keys.live_turn(session), chain.lease.token),
        )
        signals = self._runtime.signals_for(request)
        signals.on_stop = chain.tracker.stopping
        if self._draining:
            signals.raise_local(Signal.DRAIN)
        self._live[chain.job.session_id] = signals
        try:
            return await self._runtime.run(request, signals, sink=chain.tracker.sink)
        finally:
            self._live.pop(chain.job.session_id, None)

    async def _next_inputs(self, chain: _Chain, outcome: RunOutcome) -> list[UserMessage] | None:
        """The inputs of a follow-up turn, or None when the analysis ends here."""
        session, result = chain.job.session_id, outcome.result
        if not isinstance(result, Steered | Completed):
            return None
        steers = await self._peek_steers(session)
        inbox = await self._take_inbox(session)
        if steers:
            chain.tracker.steered(steers)  # the follow-up's begin_turn absorbs them
        if isinstance(result, Steered) or steers or inbox:
            return inbox
        if verdict_of(outcome).remedy_eligible and chain.rungs < self._options.remedy_rungs:
            chain.rungs += 1
            await self._settle.book_remedy(session, chain.turn_id, chain.rungs)
            return [UserMessage(content=REMEDY_NUDGE, author="chatops", kind=UserKind.NOTICE)]
        return None

    def _final(self, chain: _Chain, outcome: RunOutcome) -> ProgressCard | None:
        tracker = chain.tracker
        match outcome.result:
            case Completed(answer=answer):
                return tracker.final(CardStatus.ANSWERED, answer=answer)
            case Stopped(by=by):
                return tracker.final(CardStatus.STOPPED, by=by)
            case Cancelled(by=by) if chain.turns > 1:
                return tracker.final(CardStatus.STOPPED, by=by)  # stopped between two turns
            case Cancelled(by=by):
                return tracker.final(CardStatus.CANCELLED, by=by)
            case Failed(error=error):
                return tracker.final(CardStatus.FAILED, error=error)
            case Drained():
                return None  # resumed by another worker, on this very card
            case Dispatched() | Awaiting() | Steered():
                return tracker.final(CardStatus.ANSWERED, answer=outcome.reason.value)

    async def _settle_or_lose(self, outcome: RunOutcome, lease: Lease) -> None:
        if await self._settle.settle(outcome, lease) is Settled.FENCED:
            raise LeaseLost(f"settle of {outcome.diagnostics.turn_id} fenced")

    async def _settle_unfinished(self, chain: _Chain, error: str) -> None:
        """Settle every turn of the chain not settled yet (settles are NX).

        The last run is settled with its own outcome, the others (not run, or cut short) as
        failed.
        """
        if chain.unsettled is not None:
            await self._settle.settle(chain.unsettled, chain.lease)
        for turn_id in (chain.job.turn_id, *chain.opened, chain.turn_id):
            diagnostics = RunDiagnostics(session_id=chain.job.session_id, turn_id=turn_id)
            outcome = RunOutcome(result=Failed(error), diagnostics=diagnostics)
            await self._settle.settle(outcome, chain.lease)

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

    async def _hand_over(self, chain: _Chain, outcome: RunOutcome) -> None:
        """Settle a drained turn and queue its continuation (a new turn of the analysis)."""
        session = chain.job.session_id
        next_turn = f"{chain.job.turn_id}.{chain.turns}"
        job = TurnJob(turn_id=next_turn, session_id=session, event=chain.job.event, resumed=True)
        k = self._keys
        with map_redis_errors("hand over"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.sadd(k.open_turns(session), next_turn)
                pipe.xadd(k.turns_stream, {"job": job.model_dump_json()})
                await pipe.execute()
        await self._settle_or_lose(outcome, chain.lease)
        log.info("turn %s drained; %s continues on another worker", chain.turn_id, next_turn)

    async def _finished(self, job: TurnJob, lease: Lease) -> bool:
        """Whether a taken-over job's analysis already ended; its card is made final then."""
        record = CardRecord(self._redis, self._keys, job.session_id)
        ended, final = await self._takeover.ended(job, record)
        if ended and final is not None:
            event = job.event
            target = CardTarget(event.platform, event.channel, event.thread)
            publisher = CardPublisher(
                self._platforms[event.platform],
                record,
                target,
                lease.token,
                self._options.publisher,
            )
            await publisher.attach()
            await self._shielded(publisher.finish(final))
        return ended

    async def _tombstoned(self, job: TurnJob) -> bool:
        key = self._keys.session.tombstone(job.session_id, job.turn_id)
        with map_redis_errors("read tombstone"):
            return bool(await self._redis.exists(key))

    async def _open_turn(self, session_id: str, current: str, next_turn: str) -> None:
        """Open a follow-up turn (the reaper knows it as one), carrying a stop over to it."""
        k = self._keys
        with map_redis_errors("open turn"):
            await self._open(
                keys=[
                    k.open_turns(session_id),
                    k.followups(session_id),
                    k.session.tombstone(session_id, current),
                    k.session.tombstone(session_id, next_turn),
                ],
                args=[next_turn, TOMBSTONE_TTL_S],
            )

    async def _peek_steers(self, session_id: str) -> list[tuple[str, str]]:
        with map_redis_errors("read steers"):
            raw = await self._redis.lrange(self._keys.session.steers(session_id), 0, -1)
        steers = [load_message(item) for item in raw]
        return [(m.author or "someone", m.content) for m in steers if isinstance(m, UserMessage)]

    async def _take_inbox(self, session_id: str) -> list[UserMessage]:
        """Messages queued for the session's next turn (sub-agent reports, scheduled notes)."""
        key = self._keys.inbox(session_id)
        with map_redis_errors("take inbox"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.lrange(key, 0, -1)
                pipe.delete(key)
                raw, _ = await pipe.execute()
        events = [ChatEvent.model_validate_json(item) for item in raw]
        return [
            UserMessage(content=e.text, author=e.author_name or e.author, kind=UserKind.NOTICE)
            for e in events
        ]


def _task(event: ChatEvent) -> UserMessage:
    return UserMessage(
        content=event.text, author=event.author_name or event.author, kind=UserKind.TASK
    )


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else text[:199] + "…"
