"""The chain of turns of one analysis: each turn run, settled, then followed up or ended.

Contract:
- Every turn the chain runs is settled once (`bot.state.settle`) before the next one starts.
- A steered turn continues in a follow-up turn of the same analysis and card: the follow-up
  starts from the closed history plus every steer queued at the cut, in order (the runtime's
  `begin_turn` absorbs them; the model sees each as a correction from a named person). Steers or
  queued messages that arrive while the final answer streams also get a follow-up turn.
- A new analysis's first turn starts from the thread's earlier messages (when there are any
  and a `ThreadContext` is given), then the task; a thread that could not be read is a note on
  the card, never a reason not to start.
- A completed turn with an empty answer (not steered) climbs the remedy ladder: it is re-run
  with a nudge, at most `remedy_rungs` times.
- An analysis that ends answered (completed, not steered, a non-empty answer) is booked once in
  the memory of past analyses (`bot.state.memory`), after its last turn settled: its task from
  the event that started it, its answer, its alert. A sub-agent's is not; a booking that fails
  is logged and never fails the analysis.
- A drained turn is settled `drained` and its continuation queued for any worker; the card stays
  live. An analysis that would need more than `max_turns` turns fails ("too many turns").
- `run` returns how the analysis ended (`bot.analysis.outcomes`: a final card, handed over, or
  parked), never None; the actor acts on it. When it ends abnormally (it raises), what it may
  have left unsettled is `Chain.leftovers`, for the actor to settle (`bot.analysis.settlement`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import assert_never

from agent_core import (
    ANSWER_CHILD,
    ASK_PARENT,
    DISPATCH,
    Awaiting,
    Cancelled,
    Completed,
    Dispatched,
    Drained,
    Failed,
    Fence,
    Risk,
    RunDiagnostics,
    RunOutcome,
    Runtime,
    SettleReason,
    Signal,
    Steered,
    Stopped,
    TurnRequest,
    TurnSignals,
    UserKind,
    UserMessage,
    checkpoint,
)
from bot.analysis.outcomes import ChainEnd, FinalCard, HandedOver, Parked, WaitingFor
from bot.analysis.progress import CardTracker
from bot.analysis.settlement import Settlement
from bot.analysis.thread_context import ThreadContext
from bot.control.subagent_desk import SubagentDesk
from bot.control.subagents import ChildState
from bot.events import ChatEvent, Platform
from bot.keys import BotKeys
from bot.state.audit import TurnAudit
from bot.state.followups import Followups
from bot.state.lease import Lease, LeaseLost
from bot.state.memory import MemoryBook, PastAnalysis
from bot.state.settle import SettleWriter, verdict_of
from bot.state.turn_jobs import TurnJob
from bot.tracing import traced_turn
from cards import CardStatus, ProgressCard

__all__ = ["Chain", "TurnChain"]

log = logging.getLogger(__name__)

REMEDY_NUDGE = (
    "Your last reply was empty. Answer the task above now, or say in one sentence why you cannot."
)


Ending = Completed | Steered | Stopped | Cancelled | Failed
"""The results of a turn an analysis can end on (the others hand it on, park it, or go on)."""


@dataclass(frozen=True, slots=True)
class FollowUp:
    """Not the end: the analysis goes on in another turn, with these inputs."""

    inputs: list[UserMessage]


@dataclass(eq=False)
class Chain:
    """One analysis in progress: the job it started from and the turn it is on."""

    job: TurnJob
    lease: Lease
    tracker: CardTracker
    turn_id: str
    """The turn running now (the job's own turn, then each follow-up)."""
    rungs: int = 0
    """Remedy rungs climbed."""
    turns: int = 0
    """Turns run so far."""
    opened: list[str] = field(default_factory=list)
    """Follow-up turns this chain created (each must settle)."""
    unsettled: RunOutcome | None = None
    """The last run's outcome until it is settled (an error in between still settles it)."""

    def leftovers(self, error: str) -> list[RunOutcome]:
        """What settles every turn of the chain that may be unsettled, when it ends abnormally.

        The last run with its own outcome, the others (not run, or cut short) as failed with
        `error`; turns already settled stay as they are (settles are NX).
        """
        session = self.job.session_id
        failed = [
            RunOutcome(
                result=Failed(error),
                diagnostics=RunDiagnostics(session_id=session, turn_id=turn_id),
            )
            for turn_id in (self.job.turn_id, *self.opened, self.turn_id)
        ]
        return failed if self.unsettled is None else [self.unsettled, *failed]


class TurnChain:
    """Runs the turns of analyses. One instance serves every session of a worker."""

    def __init__(
        self,
        *,
        runtime: Runtime,
        keys: BotKeys,
        settle: SettleWriter,
        settlement: Settlement,
        followups: Followups,
        remedy_rungs: int,
        max_turns: int,
        subagents: SubagentDesk,
        thread_context: ThreadContext | None = None,
        memory: MemoryBook | None = None,
    ) -> None:
        self._runtime = runtime
        self._memory = memory
        self._thread_context = thread_context
        self._keys = keys
        self._settle = settle
        self._settlement = settlement
        self._audit = settle.audit
        self._followups = followups
        self._remedy_rungs = remedy_rungs
        self._max_turns = max_turns
        self._live: dict[str, TurnSignals] = {}
        self._approvals = runtime.approvals
        self._subagents = subagents
        self._registry = subagents.registry
        self._draining = False

    def drain(self) -> None:
        """Ask every live turn to suspend at its next cut; later turns suspend at their first."""
        self._draining = True
        for signals in self._live.values():
            signals.raise_local(Signal.DRAIN)

    async def run(self, chain: Chain) -> ChainEnd:
        """Run turns until the analysis ends, or waits, or is handed over; say which.

        Every turn run is settled when this returns.

        Raises:
            LeaseLost: A settle or a park was fenced (a newer holder owns the session).
        """
        inputs = await self._first_inputs(chain)
        while True:
            checkpoint()  # redis-py on 3.11 can swallow a cancel (see `checkpoint`)
            chain.turns += 1
            chain.tracker.begin_turn(chain.turn_id)
            outcome = chain.unsettled = await self._run_turn(chain, inputs)
            match await self._after(chain, outcome):
                case FollowUp(inputs=inputs):
                    await self._follow_up(chain, outcome)
                case FinalCard() | HandedOver() | Parked() as ending:
                    return ending
                case never:
                    assert_never(never)

    async def _first_inputs(self, chain: Chain) -> list[UserMessage]:
        """The first turn's inputs: context and task (unless resumed), then the messages queued."""
        session = chain.job.session_id
        task = [] if chain.job.resumed else await self._opening(chain)
        if not chain.job.resumed:
            await self._registry.forget_stop(session)  # a new analysis: its tree may grow
        inputs = [*task, *await self._followups.take_inbox(session)]
        if children := await self._registry.children(session):
            chain.tracker.children(children)
        return inputs

    async def _opening(self, chain: Chain) -> list[UserMessage]:
        """A new analysis's task, after the thread's earlier messages when there are any.

        A thread that could not be read does not hold the analysis up: the card says so.
        """
        event = chain.job.event
        if self._thread_context is None:
            return [_task(event)]
        context = await self._thread_context.read(event)
        if context.note:
            chain.tracker.note(context.note)
        return [context.message, _task(event)] if context.message else [_task(event)]

    async def _after(self, chain: Chain, outcome: RunOutcome) -> FollowUp | ChainEnd:
        """What follows a turn that ended with `outcome`: another turn, or the chain's end."""
        match outcome.result:
            case Drained():
                return await self._hand_over(chain, outcome)
            case Awaiting(approvals=approvals) if approvals:
                return await self._await_approvals(chain, outcome, approvals)
            case Dispatched() | Awaiting():
                return await self._wait_for_others(chain, outcome)
            case Steered() | Completed() as result:
                follow_up = await self._next_inputs(chain, outcome)
                if follow_up is not None and chain.turns >= self._max_turns:
                    await self._settlement.settle_or_lose(outcome, chain.lease)
                    return FinalCard(chain.tracker.final(CardStatus.FAILED, error="too many turns"))
                if follow_up is not None:
                    return FollowUp(follow_up)
                if await self._still_has_children(chain, outcome):
                    return await self._wait_for_others(chain, outcome)
                return await self._end(chain, outcome, result)
            case Stopped() | Cancelled() | Failed() as result:
                return await self._end(chain, outcome, result)
            case never:
                assert_never(never)

    async def _follow_up(self, chain: Chain, outcome: RunOutcome) -> None:
        """Open the next turn of the analysis, then settle the one that ended."""
        next_turn = f"{chain.job.turn_id}.{chain.turns}"
        chain.opened.append(next_turn)
        # Opened before this turn settles, so a stop from now on tombstones it; a stop that
        # came earlier tombstoned this turn, and is carried over to the next.
        await self._followups.open(chain.job.session_id, chain.turn_id, next_turn)
        await self._settlement.settle_or_lose(outcome, chain.lease)
        chain.turn_id = next_turn

    async def _end(self, chain: Chain, outcome: RunOutcome, result: Ending) -> FinalCard:
        """Settle the last turn of an analysis, stop its sub-agents, and end its card."""
        await self._settlement.settle_or_lose(outcome, chain.lease)
        await self._stop_children(chain, result)
        await self._remember(chain, outcome)
        return FinalCard(self._final(chain, result))

    async def _remember(self, chain: Chain, outcome: RunOutcome) -> None:
        """Book an answered analysis in the memory of past analyses; never fail it.

        Booked under the analysis's turn id (its card's, which its Stop button carries), so a
        taken-over analysis that answers again keeps its first booking.
        """
        event, result = chain.job.event, outcome.result
        if self._memory is None or event.platform is Platform.SUBAGENT:
            return
        if not isinstance(result, Completed) or not verdict_of(outcome).automation:
            return
        analysis = PastAnalysis.of(
            event, turn_id=chain.tracker.card.turn_id, answer=result.answer, when=time.time()
        )
        await self._memory.book_safely(analysis)

    async def _run_turn(self, chain: Chain, inputs: list[UserMessage]) -> RunOutcome:
        session = chain.job.session_id
        request = TurnRequest(
            session_id=session,
            turn_id=chain.turn_id,
            inputs=tuple(inputs),
            fence=Fence(self._keys.live_turn(session), chain.lease.token),
            requester=chain.job.event.author,
            tools=self._tools_of(chain.job.event),
            max_model_requests=chain.job.event.max_steps,
        )
        signals = self._runtime.signals_for(request)
        self._subagents.running(session, chain.job.event)
        signals.on_stop = chain.tracker.stopping
        signals.on_steer = chain.tracker.redirect_received
        if self._draining:
            signals.raise_local(Signal.DRAIN)
        self._live[chain.job.session_id] = signals
        audit = TurnAudit(self._audit, session, chain.turn_id)
        await audit.start(len(inputs))
        try:
            with audit.current():
                sink = audit.before(chain.tracker.sink)
                run = self._runtime.run(request, signals, sink=sink)
                outcome = await traced_turn(request, chain.job.event, run)
            await audit.finish(outcome.diagnostics)
            return outcome
        finally:
            self._live.pop(chain.job.session_id, None)
            self._subagents.done(session)

    def _tools_of(self, event: ChatEvent) -> frozenset[str]:
        """The tools a turn of `event`'s analysis offers.

        A sub-agent investigates: read-only tools and `ask_parent`, no children of its own. An
        analysis in a thread may dispatch and answer, never ask. A scheduled job narrows the
        set further.
        """
        tools = self._runtime.toolset
        if event.platform is Platform.SUBAGENT:
            names = {t.name for t in tools if t.risk is Risk.READ_ONLY} - {DISPATCH, ANSWER_CHILD}
            if event.tools is not None:  # its parent's narrowing holds for it too
                names &= set(event.tools) | {ASK_PARENT}
            return frozenset(names)
        names = {t.name for t in tools} - {ASK_PARENT}
        if event.tools is not None:  # exactly the job's tools (list dispatch_subagent to fan out)
            names &= set(event.tools)
        return frozenset(names)

    async def _next_inputs(self, chain: Chain, outcome: RunOutcome) -> list[UserMessage] | None:
        """The inputs of a follow-up turn of a steered or completed one; None: it ends here."""
        session, result = chain.job.session_id, outcome.result
        steers = await self._followups.peek_steers(session)
        inbox = await self._followups.take_inbox(session)
        if steers:
            chain.tracker.steered(steers)  # the follow-up's begin_turn absorbs them
        if isinstance(result, Steered) or steers or inbox:
            return inbox
        if verdict_of(outcome).remedy_eligible and chain.rungs < self._remedy_rungs:
            chain.rungs += 1
            await self._settle.book_remedy(session, chain.turn_id, chain.rungs)
            return [UserMessage(content=REMEDY_NUDGE, author="chatops", kind=UserKind.NOTICE)]
        return None

    def _final(self, chain: Chain, result: Ending) -> ProgressCard:
        tracker = chain.tracker
        match result:
            case Completed(answer=answer, cutoff=cutoff):
                return tracker.final(CardStatus.ANSWERED, answer=answer, cutoff=cutoff)
            case Stopped(by=by):
                return tracker.final(CardStatus.STOPPED, by=by)
            case Cancelled(by=by) if chain.turns > 1 or chain.job.resumed:
                return tracker.final(CardStatus.STOPPED, by=by)  # stopped between two turns
            case Cancelled(by=by):
                return tracker.final(CardStatus.CANCELLED, by=by)
            case Failed(error=error):
                return tracker.final(CardStatus.FAILED, error=error)
            case Steered():  # not reached: a steered turn always has a follow-up
                return tracker.final(CardStatus.ANSWERED, answer=SettleReason.STEERED.value)
            case never:
                assert_never(never)

    async def _wait_for_others(self, chain: Chain, outcome: RunOutcome) -> Parked:
        """Park the continuation of a turn that ended to wait.

        A parent waits for the children it dispatched, a child for its parent's answer; the
        last report, or the answer, queues the continuation.
        """
        event, session = chain.job.event, chain.job.session_id
        next_turn = f"{chain.job.turn_id}.{chain.turns}"
        job = TurnJob(turn_id=next_turn, session_id=session, event=event, resumed=True)
        if event.platform is Platform.SUBAGENT:
            registry_of, waiting_for = event.workspace, event.thread
        else:
            registry_of, waiting_for = session, "children"
        parked = await self._registry.park(
            job, chain.lease.token, chain.turn_id, registry_of, waiting_for
        )
        if not parked:
            raise LeaseLost("parking fenced", session_id=chain.lease.session_id, turn_id=next_turn)
        await self._settlement.settle_or_lose(outcome, chain.lease)
        if waiting_for == "children":
            chain.tracker.children(await self._registry.children(session), waiting=True)
        log.info("turn %s waits (%s); %s continues", chain.turn_id, waiting_for, next_turn)
        waited = WaitingFor.PARENT if event.platform is Platform.SUBAGENT else WaitingFor.CHILDREN
        return Parked(next_turn, waited)

    async def _still_has_children(self, chain: Chain, outcome: RunOutcome) -> bool:
        """An answer given while sub-agents still work is not the end: the analysis waits.

        A parent can be run while its children work (a redirect, a drain's resume, a worker's
        death); what it answers then is settled, and the analysis goes on waiting for the
        reports instead of cancelling the children. A stop or a failure still ends it.
        """
        if not isinstance(outcome.result, Completed) or chain.job.event.platform is (
            Platform.SUBAGENT
        ):
            return False
        children = await self._registry.children(chain.job.session_id)
        # Only children at work: one waiting for an answer the parent did not give is moot
        # (it is stopped with the analysis), and waiting for it would wake the parent again.
        return any(c.state in (ChildState.PENDING, ChildState.RUNNING) for c in children)

    async def _stop_children(self, chain: Chain, result: Ending) -> None:
        """An analysis that ended stops the sub-agents it still has: nobody would read them.

        A stop at the ingress already did; a kill switch, a failure, or an answer given while
        a child still ran (or waited for an answer) did not.
        """
        by = result.by if isinstance(result, Stopped | Cancelled) else ""
        await self._settlement.stop_children_of(
            chain.job.session_id, by or "the parent analysis ending"
        )

    async def _await_approvals(
        self, chain: Chain, outcome: RunOutcome, call_ids: tuple[str, ...]
    ) -> Parked:
        """Settle a turn suspended for approvals and park its continuation for the desk."""
        session = chain.job.session_id
        next_turn = f"{chain.job.turn_id}.{chain.turns}"
        job = TurnJob(turn_id=next_turn, session_id=session, event=chain.job.event, resumed=True)
        await self._followups.await_decisions(job, chain.lease, suspended_turn=chain.turn_id)
        await self._settlement.settle_or_lose(outcome, chain.lease)
        records = await self._approvals.records(session)
        chain.tracker.awaiting_approval([records[c] for c in call_ids if c in records])
        log.info(
            "turn %s waits for %d approval(s); %s continues",
            chain.turn_id,
            len(call_ids),
            next_turn,
        )
        return Parked(next_turn, WaitingFor.APPROVALS)

    async def _hand_over(self, chain: Chain, outcome: RunOutcome) -> HandedOver:
        """Settle a drained turn and queue its continuation (a new turn of the analysis).

        The card stays live: the analysis continues elsewhere, on this very card.
        """
        session = chain.job.session_id
        next_turn = f"{chain.job.turn_id}.{chain.turns}"
        job = TurnJob(turn_id=next_turn, session_id=session, event=chain.job.event, resumed=True)
        await self._followups.hand_over(job, chain.lease)
        await self._settlement.settle_or_lose(outcome, chain.lease)
        chain.tracker.handed_over()
        log.info("turn %s drained; %s continues on another worker", chain.turn_id, next_turn)
        return HandedOver(next_turn)


def _task(event: ChatEvent) -> UserMessage:
    return UserMessage(
        content=event.text, author=event.author_name or event.author, kind=UserKind.TASK
    )
