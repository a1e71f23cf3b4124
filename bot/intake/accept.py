"""Taking in one accepted event, whichever transport delivered it.

The webhook routes, Slack's Socket Mode and Feishu's long connection all hand a normalized event
here: it is classified and written (`route_event`), then an Approve or Deny press is decided by
the approval desk and an admin's kill switch command is carried out, in that order, so every
transport brakes and approves alike. A press whose delivery is a duplicate is decided too (the
desk is idempotent, and the first delivery may have failed after its dedupe marker was set); a
kill switch command that could not be carried out is forgotten, so the platform's retry is not
taken for a duplicate.

A "Mark answer wrong" press is taken before any routing (no policy row routes it anywhere): the
memory marks the analysis its card names (`MemoryBook.mark_wrong`, the first mark kept), its
final card is recorded again as marked (`CardRecord.show_marked_wrong`: still final, never
reopened, only while the thread's record is still that card; the reaper's sweep shows it), then
its dedupe marker is set and a first delivery audited (`marked_wrong`), so a delivery that
failed before its mark is marked on the platform's retry, and each press is audited once. Both
the mark and the card's new state are idempotent (a marked card is not marked again), so a
second press, by anyone, keeps the first mark.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import assert_never

import redis.asyncio as aioredis

from agent_core import StoreError, map_redis_errors
from bot.control.approval_desk import ApprovalDesk, Press
from bot.control.killswitch import KillSwitchDesk, SwitchAnswer
from bot.control.subagents import SubagentRegistry
from bot.errors import QueueUnavailable
from bot.events import ChatEvent, EventKind
from bot.intake.queue import DEDUPE_TTL_S, Queue, Route, StateRoutes, Trail
from bot.intake.routing import RoutingOutcome, route_submitted
from bot.publishing.card_record import CardRecord
from bot.state.audit import AuditEvent, AuditLog, clip
from bot.state.memory import MemoryBook
from bot.tracing import taking

__all__ = ["FORGET_TIMEOUT_S", "MARKED_WRONG", "NOT_ON_RECORD", "Intake", "Taken", "WrongMark"]

log = logging.getLogger(__name__)

FORGET_TIMEOUT_S = 5.0
"""Bound of dropping a failed command's dedupe markers (no request waits on it)."""
WRONG_ACTION = "wrong"
"""The action of a "Mark answer wrong" press (every platform's button and `/wrong`)."""
MARKED_WRONG = "Marked wrong: later analyses of this alert will be told."
NOT_ON_RECORD = "No answer of that analysis is on record."
_MEMORY_DAYS = 1
"""The window of the memory built when none is given: marking reads only the booked record's
own expiry, never the window (the ingress passes the configured book anyway)."""


@dataclass(frozen=True, slots=True)
class WrongMark:
    """What became of a "Mark answer wrong" press."""

    marked: bool
    """The analysis is on record and its answer is marked wrong (now or by an earlier press)."""
    message: str
    """What the person is told (`MARKED_WRONG` or `NOT_ON_RECORD`)."""


@dataclass(frozen=True, slots=True)
class Taken:
    """What became of one event."""

    outcome: RoutingOutcome
    """The routing outcome (`start`, `steer`, `duplicate`, …), for metrics and logs."""
    press: Press | None = None
    """For an Approve or Deny press: the desk's decision."""
    switched: SwitchAnswer | None = None
    """For a kill switch command: what it did."""
    marked: WrongMark | None = None
    """For a "Mark answer wrong" press: whether the analysis was on record."""


def _is_wrong(event: ChatEvent) -> bool:
    return event.kind is EventKind.ACTION and event.action == WRONG_ACTION


def _is_press(event: ChatEvent) -> bool:
    return event.kind is EventKind.ACTION and event.action in ("approve", "deny")


class Intake:
    """Routes events and carries out the presses and commands among them."""

    def __init__(
        self,
        queue: Queue,
        desk: ApprovalDesk,
        switch_desk: KillSwitchDesk,
        redis: aioredis.Redis,
        audit: AuditLog | None = None,
        memory: MemoryBook | None = None,
    ) -> None:
        self.queue = queue
        self._redis = redis
        self._audit = audit or AuditLog(redis, queue.keys)
        self._memory = memory or MemoryBook(redis, queue.keys, days=_MEMORY_DAYS)
        self._desk = desk
        self._switch_desk = switch_desk

    async def take(self, event: ChatEvent) -> Taken:
        """Write `event`, then decide it if it is a press or a command.

        Raises:
            QueueUnavailable, StoreError: Redis could not take it (the platform should retry).
        """
        with taking(event) as observed:
            taken = await self._take(event)
            observed.taken(taken.outcome)
            return taken

    async def _take(self, event: ChatEvent) -> Taken:
        arrived = time.time()  # before the write: a worker may cut on it before we return
        if _is_wrong(event):
            return await self._mark_wrong(event, arrived)
        outcome, submitted = await route_submitted(
            self.queue, event, lambda routes: self._trail(event, arrived, routes)
        )
        match outcome:
            case RoutingOutcome.STOP:
                # A stop reaches the analysis's sub-agents at once: their parent's own end
                # stops them too, but only once a worker runs it.
                if submitted is not None and submitted.parent:
                    await SubagentRegistry(self._redis, self.queue.keys).stop_tree(
                        event.session_id, event.author_name or event.author
                    )
            case RoutingOutcome.APPROVE:
                return Taken(outcome, press=await self._desk.press(event))
            case RoutingOutcome.DUPLICATE if _is_press(event):
                return Taken(outcome, press=await self._desk.press(event))
            case RoutingOutcome.KILL_SWITCH:
                return Taken(outcome, switched=await self._command(event))
            case (
                RoutingOutcome.START
                | RoutingOutcome.STEER
                | RoutingOutcome.QUEUE
                | RoutingOutcome.CANCELLED
                | RoutingOutcome.DUPLICATE
                | RoutingOutcome.IGNORED
            ):
                pass
            case never:
                assert_never(never)
        return Taken(outcome)

    def _trail(self, event: ChatEvent, arrived: float, may: StateRoutes) -> Trail | None:
        """Who steers or stops, if the event may: written by the submit with the event itself.

        A Stop button names its turn; typed text does not.
        """
        routes = set(may)
        if not routes & {Route.STEER, Route.STOP}:
            return None

        def audited(steer: bool) -> str:
            stop_turn = event.action_value if event.kind is EventKind.ACTION else ""
            return AuditEvent(
                ts=arrived,
                session=event.session_id,
                turn="" if steer else stop_turn,
                kind="steer" if steer else "stop",
                who=event.person,
                data={"text": clip(event.text)} if steer else {},
            ).model_dump_json()

        return Trail(
            steer=audited(True) if Route.STEER in routes else "",
            stop=audited(False) if Route.STOP in routes else "",
            maxlen=self._audit.maxlen,
            retention_s=self._audit.retention_s,
        )

    async def _mark_wrong(self, event: ChatEvent, arrived: float) -> Taken:
        """Mark the answer of the analysis the press names; audit its first delivery.

        The mark comes first and is idempotent (the first mark is kept), the dedupe marker after
        it: a delivery that failed in between is marked again on its retry, and audited once.

        Raises:
            StoreError, QueueUnavailable: Redis failed (the platform should retry).
        """
        turn, who = event.action_value, event.author_name or event.person
        if not turn or not await self._memory.mark_wrong(turn, who=who, when=arrived):
            return Taken(RoutingOutcome.IGNORED, marked=WrongMark(False, NOT_ON_RECORD))
        record = CardRecord(self._redis, self.queue.keys, event.session_id)
        await record.show_marked_wrong(turn, who)
        marker = self.queue.keys.seen_event(event.platform, event.event_id)
        with map_redis_errors("mark a press seen"):
            first = await self._redis.set(marker, "1", nx=True, ex=DEDUPE_TTL_S)
        if not first:
            return Taken(RoutingOutcome.DUPLICATE, marked=WrongMark(True, MARKED_WRONG))
        audited = AuditEvent(
            ts=arrived,
            session=event.session_id,
            turn=turn,
            kind="marked_wrong",
            who=event.person,
            data={"name": clip(who)},
        )
        await self._audit.record(audited)
        return Taken(RoutingOutcome.IGNORED, marked=WrongMark(True, MARKED_WRONG))

    async def _command(self, event: ChatEvent) -> SwitchAnswer:
        """Carry out a kill switch command; one that fails is forgotten, so its retry runs."""
        try:
            return await self._switch_desk.command(event)
        except (QueueUnavailable, StoreError, asyncio.CancelledError):
            await asyncio.shield(self._forget(event))
            raise

    async def submit(self, event: ChatEvent) -> RoutingOutcome:
        """`take`, for a transport that only needs the routing outcome."""
        return (await self.take(event)).outcome

    async def _forget(self, event: ChatEvent) -> None:
        """Drop the event's dedupe markers (best effort), so the platform's retry runs it."""
        try:
            async with asyncio.timeout(FORGET_TIMEOUT_S):
                await self.queue.forget(event)
        except (QueueUnavailable, TimeoutError) as exc:
            log.warning("event %s not forgotten, its retry is dropped: %s", event.event_id, exc)
