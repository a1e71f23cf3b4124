"""Property test of the sub-agent registry over random dispatch/ask/answer/report/stop sequences.

Why this way: the registry's promises (a report delivered twice counts once, a final state never
changes, nothing of a stopped tree reaches its parent, a parked continuation is queued once and
exactly when its wait is over) must hold for every order in which children start, ask, are
answered, report, are re-reported by a retrying publisher or a reaper, and are stopped; the
end-to-end tests in `tests/bot/control/test_subagents.py` walk three of those orders. Hypothesis
draws a list of operations on one parent session and runs them one after another through the public
API (`SubagentRegistry`, and `SubagentCards`, the sub-agents' "card" platform, for starts and
reports) against a real Redis: the Lua scripts are the code under test. A parent's or a child's
turn that ends to wait parks its continuation as the turn chain does, holding a lease written
the way `bot.state.lease` writes it.

A small model, written from the contract in `bot.control.subagents`'s docstring and not from its
scripts, says what each step should do. After every step the test reads Redis back: the
children and their states and reports, the parent's inbox, the parked continuation, and every
job on the turns stream (by session and turn id, so a continuation queued twice shows).
Every example uses its own key prefix, so no flush is needed between examples.

Known gap: steps run one at a time, so a report landing between `stop_tree` marking the tree
stopped and cancelling that child (what the `_MOVE` script's own stopped check is for) is never
drawn; removing that check leaves this test passing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_core._keys import Keys
from bot.control.subagent_desk import SubagentCards
from bot.control.subagents import ChildRecord, ChildState, SubagentRegistry
from bot.events import ChatEvent, Platform
from bot.keys import BotKeys
from bot.ops.reaper import INTERRUPTED_ERROR
from bot.publishing.platform import CardRef, CardTarget
from bot.state.turn_jobs import TurnJob
from cards._model import CardStatus, ProgressCard

TOKEN = 7
"""The parent's (and each child's) lease token; a park with another one is fenced."""
STOPPER = "tester"
PENDING_OR_RUNNING = frozenset({ChildState.PENDING, ChildState.RUNNING})
REPORTS = (
    CardStatus.ANSWERED,
    CardStatus.FAILED,
    CardStatus.STOPPED,
    CardStatus.CANCELLED,
    CardStatus.WORKING,  # a live card: not a report, changes nothing
)
FINAL_OF = {
    CardStatus.ANSWERED: ChildState.DONE,
    CardStatus.FAILED: ChildState.FAILED,
    CardStatus.INTERRUPTED: ChildState.FAILED,
    CardStatus.STOPPED: ChildState.CANCELLED,
    CardStatus.CANCELLED: ChildState.CANCELLED,
}
KINDS = (
    "dispatch",  # the parent's turn dispatches a child (refused once the tree is stopped)
    "start",  # the child's card opens (a worker took its job); again for a continuation
    "ask",  # the running child asks its parent and its turn parks (or a late question)
    "answer",  # the parent answers the child (only a waiting child takes it)
    "report",  # the child's final card (or a live one, which is no report)
    "report_twice",  # the publisher retries: the same card is delivered twice
    "crash",  # the reaper finalizes a dead worker's child as interrupted (maybe again)
    "park_parent",  # the parent's turn ended to wait for its children
    "repark_parent",  # the same park retried: parked once per turn
    "park_fenced",  # a stale worker parks: fenced by the lease
    "park_child",  # the child's turn parks after asking, late: an answer or a stop came first
    "stop",  # the cascading stop
    "forget_stop",  # a new analysis starts in the parent's session
)


@dataclass(frozen=True)
class Op:
    """One step: its kind, the child it concerns (modulo how many exist), a variant."""

    kind: str
    child: int = 0
    variant: int = 0


# A child must be dispatched, started and asked before most steps mean anything, and a stop
# silences the rest: the steps that grow a tree are drawn more often than the ones that end it.
DRAWN = (*KINDS, *("dispatch", "start", "ask", "answer", "park_parent") * 2)
ops = st.lists(
    st.builds(
        Op,
        kind=st.sampled_from(DRAWN),
        child=st.integers(0, 2),
        variant=st.integers(0, len(REPORTS) - 1),
    ),
    min_size=20,
    max_size=60,
)


@dataclass
class Child:
    """What the model expects of one child, and what the test saw of it."""

    record: ChildRecord
    state: ChildState = ChildState.PENDING
    report: str = ""
    seen: list[tuple[ChildState, str]] = field(default_factory=list)
    """Every distinct (state, report) read back from Redis, in order."""
    turn: int = 0
    """How many continuations the child parked: its current turn is the last one's."""
    unparked_ask: bool = False
    """It asked, and its turn has not parked its continuation yet."""
    parked: bool = False
    """Its continuation is parked, waiting for the answer."""

    @property
    def turn_id(self) -> str:
        base = f"turn-{self.record.child_id}"
        return base if self.turn == 0 else f"{base}.{self.turn}"


ANY_CHILD = 3
"""The variant that picks among all children (not 0: Hypothesis draws 0 most often)."""
STEP_FITS: dict[str, Callable[[Child], bool]] = {
    "start": lambda c: c.state is ChildState.PENDING,
    "ask": lambda c: c.state is ChildState.RUNNING,
    "answer": lambda c: c.state is ChildState.AWAITING,
    "park_child": lambda c: c.unparked_ask,
}


@dataclass
class Model:
    """The parent's side: what Redis should hold after each step."""

    children: list[Child] = field(default_factory=list)
    stopped: bool = False
    parent_parked: bool = False
    parent_parks: int = 0
    inbox: int = 0
    queued: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    """Turn ids expected on the turns stream, per session, in order."""
    at_stop: tuple[int, int] | None = None
    """The inbox length and the parent's queued jobs when the tree was last stopped."""
    queued_by_parks_since_stop: int = 0
    final_before_stop: set[str] = field(default_factory=set)

    def waiting(self) -> bool:
        """A parent waits while any child is pending or running."""
        return any(c.state in PENDING_OR_RUNNING for c in self.children)

    def waits_when_parking(self) -> bool:
        """A parent parks to wait, unless a child's question is unread in its inbox."""
        asked = any(c.state is ChildState.AWAITING for c in self.children)
        return self.waiting() and not (asked and self.inbox > 0)


class Scenario:
    """Runs the operations against Redis and checks every invariant after each."""

    def __init__(self, redis: aioredis.Redis) -> None:
        prefix = f"t{uuid.uuid4().hex[:12]}"
        self.keys = BotKeys(prefix=prefix, session=Keys(prefix=prefix))
        self.redis = redis
        self.registry = SubagentRegistry(redis, self.keys)
        self.cards = SubagentCards(self.registry)
        self.parent = f"slack-{uuid.uuid4().hex[:20]}"
        self.event = ChatEvent(
            platform=Platform.SLACK,
            event_id=f"Ev{uuid.uuid4().hex[:8]}",
            workspace="T1",
            channel="C1",
            thread="1700000000.000100",
            message_id="1700000000.000100",
            author="U1",
            text="why is checkout returning 500s?",
        )
        self.model = Model()
        self.reports = 0

    # -- operations --------------------------------------------------------------------------

    async def apply(self, op: Op) -> None:
        m = self.model
        match op.kind:
            case "dispatch":
                await self.dispatch()
            case "park_parent" if not m.parent_parked:
                await self.park_parent()
            case "repark_parent" if m.parent_parks:
                await self.repark_parent()
            case "park_fenced":
                await self.park_fenced()
            case "stop":
                await self.stop()
            case "forget_stop" if not m.parent_parked:  # the last analysis has ended
                await self.registry.forget_stop(self.parent)
                m.stopped, m.at_stop = False, None
            case _:
                if child := self.pick(op):
                    await self.apply_to_child(op, child)

    def pick(self, op: Op) -> Child | None:
        """The child a step concerns.

        Mostly one the step fits (a pending child starts, a running one asks, a waiting one is
        answered), so that long lifecycles are drawn often; else, or with variant 3, any child:
        a repeated start, a late question, an answer nobody waits for.
        """
        fits = STEP_FITS.get(op.kind)
        children = self.model.children
        fitting = [c for c in children if fits(c)] if fits and op.variant != ANY_CHILD else []
        pool = fitting or children
        return pool[op.child % len(pool)] if pool else None

    async def apply_to_child(self, op: Op, child: Child) -> None:
        match op.kind:
            case "start":
                await self.start(child)
            case "ask" if child.state is ChildState.RUNNING or child.state.is_final:
                await self.ask(child)
                if child.unparked_ask and op.variant < ANY_CHILD:  # as usual: its turn ends
                    await self.park_child(child)
            case "answer":
                await self.answer(child)
            case "report":
                await self.report(child, self.card(child, REPORTS[op.variant]))
            case "report_twice":
                card = self.card(child, REPORTS[op.variant])
                await self.report(child, card)
                await self.report(child, card)
            case "crash":
                await self.report(child, self.card(child, CardStatus.INTERRUPTED))
            case "park_child" if child.unparked_ask:
                await self.park_child(child)

    async def dispatch(self) -> None:
        m = self.model
        record = await self.registry.dispatch(self.event, self.parent, "turn-p", "check a part")
        if m.stopped:
            assert record is None, "a stopped tree takes no new child"
            return
        assert record is not None
        m.children.append(Child(record=record))
        m.queued[record.session_id].append(f"turn-{record.child_id}")

    async def start(self, child: Child) -> None:
        target = CardTarget(Platform.SUBAGENT, self.parent, child.record.child_id)
        await self.cards.post_card(
            target, self.card(child, CardStatus.WORKING), key=uuid.uuid4().hex
        )
        if child.state is ChildState.PENDING:
            child.state = ChildState.RUNNING

    async def ask(self, child: Child) -> None:
        fresh = await self.registry.child(self.parent, child.record.child_id)
        assert fresh is not None
        state = await self.registry.move(
            fresh, ChildState.AWAITING, question="which region?", note="a question"
        )
        if child.state.is_final:
            assert state is child.state, "a late question changes nothing"
            return
        assert state is ChildState.AWAITING
        child.state, child.unparked_ask = ChildState.AWAITING, True
        self.model.inbox += 1
        self.wake_parent()  # a question wakes the parent, whatever else is running

    async def answer(self, child: Child) -> None:
        fresh = await self.registry.child(self.parent, child.record.child_id)
        assert fresh is not None
        answered = await self.registry.answer(fresh, "eu-west-1")
        assert answered is (child.state is ChildState.AWAITING)
        if not answered:
            return
        child.state = ChildState.RUNNING
        if child.parked:
            child.parked = False
            self.model.queued[child.record.session_id].append(child.turn_id)

    def card(self, child: Child, status: CardStatus) -> ProgressCard:
        self.reports += 1
        text = f"{status.value} #{self.reports}"
        card = ProgressCard(title=child.record.task, turn_id=child.turn_id)
        if status is CardStatus.INTERRUPTED:  # as the reaper ends a dead worker's card
            return card.ended(status, error=INTERRUPTED_ERROR)
        if not status.is_final:
            return card
        if status is CardStatus.ANSWERED:
            return card.ended(status, answer=text)
        return card.ended(status, error=text)

    async def report(self, child: Child, card: ProgressCard) -> None:
        ref = CardRef(Platform.SUBAGENT, self.parent, child.record.child_id)
        await self.cards.update_card(ref, card)
        state = FINAL_OF.get(card.status)
        if state is None or child.state.is_final:
            return
        child.state = state
        child.report = card.answer if state is ChildState.DONE else card.error
        self.model.inbox += 1
        if not self.model.waiting():
            self.wake_parent()

    def wake_parent(self) -> None:
        m = self.model
        if m.parent_parked:
            m.parent_parked = False
            m.queued[self.parent].append(self.parent_turn(m.parent_parks))

    def parent_turn(self, n: int) -> str:
        return f"turn-p.{n}"

    async def park_parent(self) -> None:
        m = self.model
        suspended = self.parent_turn(m.parent_parks)
        m.parent_parks += 1
        parked = await self.park_job(self.parent, suspended, self.parent_turn(m.parent_parks))
        if m.waits_when_parking():
            assert parked == 1, "children pending or running: the continuation waits"
            m.parent_parked = True
        else:
            assert parked == 2, "nothing to wait for: the continuation is queued at once"
            m.queued[self.parent].append(self.parent_turn(m.parent_parks))
            if m.stopped:
                m.queued_by_parks_since_stop += 1

    async def park_job(
        self,
        session: str,
        suspended: str,
        continuation: str,
        *,
        token: int = TOKEN,
        waiting_for: str = "children",
    ) -> int:
        """Park `continuation` of `suspended` in `session`, as the turn chain does."""
        await self.redis.set(self.keys.live_turn(session), f"{TOKEN}|worker-1|{suspended}")
        job = TurnJob(turn_id=continuation, session_id=session, event=self.event, resumed=True)
        return await self.registry.park(job, token, suspended, self.parent, waiting_for)

    async def repark_parent(self) -> None:
        m = self.model
        n = m.parent_parks
        parked = await self.park_job(self.parent, self.parent_turn(n - 1), self.parent_turn(n))
        assert parked == 3, "a turn parks its continuation once"

    async def park_fenced(self) -> None:
        m = self.model
        suspended, continuation = f"turn-stale.{m.parent_parks}", f"turn-stale.{m.parent_parks}x"
        parked = await self.park_job(self.parent, suspended, continuation, token=TOKEN - 1)
        assert parked == 0, "a stale lease parks nothing"

    async def park_child(self, child: Child) -> None:
        suspended = child.turn_id
        child.turn += 1
        child.unparked_ask = False
        parked = await self.park_job(
            child.record.session_id, suspended, child.turn_id, waiting_for=child.record.child_id
        )
        if child.state is ChildState.AWAITING:
            assert parked == 1, "a child waiting for its answer parks"
            child.parked = True
        else:  # answered before it parked, stopped, or ended meanwhile
            assert parked == 2, "a child with nothing to wait for goes on at once"
            self.model.queued[child.record.session_id].append(child.turn_id)

    async def stop(self) -> None:
        m = self.model
        if not m.stopped:
            # A stop empties the inbox (its reports are read by nobody), which then stays empty.
            m.at_stop = (0, len(await self.parent_jobs()))
            m.queued_by_parks_since_stop = 0
        stopped = await self.registry.stop_tree(self.parent, STOPPER)
        m.inbox = 0
        unfinished = [c for c in m.children if not c.state.is_final]
        assert sorted(stopped) == sorted(c.record.child_id for c in unfinished)
        m.final_before_stop |= {c.record.child_id for c in m.children if c.state.is_final}
        m.stopped = True
        for c in unfinished:
            c.state, c.report = ChildState.CANCELLED, f"stopped by {STOPPER}"
            if c.parked:  # a parked child's continuation runs, and ends without the model
                c.parked = False
                m.queued[c.record.session_id].append(c.turn_id)

    # -- reading back ------------------------------------------------------------------------

    async def inbox_len(self) -> int:
        return int(await self.redis.llen(self.keys.inbox(self.parent)))

    async def stream(self) -> dict[str, list[str]]:
        jobs: dict[str, list[str]] = defaultdict(list)
        entries: Any = await self.redis.xrange(self.keys.turns_stream)
        for _, fields in entries:
            job = TurnJob.model_validate_json(fields[b"job"])
            jobs[job.session_id].append(job.turn_id)
        return jobs

    async def parent_jobs(self) -> list[str]:
        return (await self.stream()).get(self.parent, [])

    async def check(self, step: int) -> None:
        m, at = self.model, f"after step {step}"
        records = {r.child_id: r for r in await self.registry.children(self.parent)}
        # 1. One child per successful dispatch.
        assert len(records) == len(m.children), at
        for child in m.children:
            record = records[child.record.child_id]
            now = (record.state, record.report)
            if not child.seen or child.seen[-1] != now:
                child.seen.append(now)
            # 2. A final state (and its report) is reached once and never left.
            finals = [i for i, (state, _) in enumerate(child.seen) if state.is_final]
            assert not finals or finals[0] == len(child.seen) - 1, f"{at}: {child.seen}"
            assert now == (child.state, child.report), f"{at}: {now}"
        # 3. A stopped tree: every child cancelled or final before; nothing reaches the parent.
        if m.stopped:
            assert m.at_stop is not None
            for child in m.children:
                cid = child.record.child_id
                assert records[cid].state is ChildState.CANCELLED or cid in m.final_before_stop
            inbox_then, jobs_then = m.at_stop
            assert await self.inbox_len() == inbox_then, f"{at}: a note after the stop"
            woken = len(await self.parent_jobs()) - jobs_then - m.queued_by_parks_since_stop
            assert woken == 0, f"{at}: a report or question woke the stopped parent"
        # 4. The parent's continuation: queued once per park, exactly when its wait is over.
        assert await self.inbox_len() == m.inbox, at
        parked = await self.redis.exists(self.keys.awaiting(self.parent))
        assert bool(parked) is m.parent_parked, at
        stream = await self.stream()
        parent_jobs = stream.get(self.parent, [])
        assert len(set(parent_jobs)) == len(parent_jobs), f"{at}: queued twice: {parent_jobs}"
        assert dict(stream) == {s: t for s, t in m.queued.items() if t}, at


async def _scenario(url: str, steps: list[Op]) -> None:
    redis = aioredis.Redis.from_url(url)
    try:
        scenario = Scenario(redis)
        for n, op in enumerate(steps):
            await scenario.apply(op)
            await scenario.check(n)
    finally:
        await redis.aclose()


# 200 examples (about 7 s): with 100, a stop reaching a parked child, or a report while a sibling
# still runs, was drawn too rarely to catch a script that mishandled it in every run.
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=ops)
def test_children_report_once_and_a_stopped_tree_stays_silent(redis_server, steps) -> None:
    asyncio.run(_scenario(redis_server, steps))
