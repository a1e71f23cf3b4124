"""Taking in one accepted event, whichever transport delivered it.

The webhook routes, Slack's Socket Mode and Feishu's long connection all hand a normalized event
here: it is classified and written (`route_event`), then an Approve or Deny press is decided by
the approval desk and an admin's kill switch command is carried out, in that order, so every
transport brakes and approves alike. A press whose delivery is a duplicate is decided too (the
desk is idempotent, and the first delivery may have failed after its dedupe marker was set); a
kill switch command that could not be carried out is forgotten, so the platform's retry is not
taken for a duplicate.
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
from bot.intake.queue import Queue
from bot.intake.routing import RoutingOutcome, route_event
from bot.state.audit import AuditEvent, AuditLog, clip
from bot.tracing import taking

__all__ = ["FORGET_TIMEOUT_S", "Intake", "Taken"]

log = logging.getLogger(__name__)

FORGET_TIMEOUT_S = 5.0
"""Bound of dropping a failed command's dedupe markers (no request waits on it)."""


@dataclass(frozen=True, slots=True)
class Taken:
    """What became of one event."""

    outcome: RoutingOutcome
    """The routing outcome (`start`, `steer`, `duplicate`, …), for metrics and logs."""
    press: Press | None = None
    """For an Approve or Deny press: the desk's decision."""
    switched: SwitchAnswer | None = None
    """For a kill switch command: what it did."""


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
    ) -> None:
        self.queue = queue
        self._redis = redis
        self._audit = audit or AuditLog(redis, queue.keys)
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
        outcome = await route_event(self.queue, event)
        match outcome:
            case RoutingOutcome.STEER:
                await self._audit_person(event, arrived, steer=True)
            case RoutingOutcome.STOP:
                await self._audit_person(event, arrived, steer=False)
                await self._stop_tree(event)
            case RoutingOutcome.APPROVE:
                return Taken(outcome, press=await self._desk.press(event))
            case RoutingOutcome.DUPLICATE if _is_press(event):
                return Taken(outcome, press=await self._desk.press(event))
            case RoutingOutcome.KILL_SWITCH:
                return Taken(outcome, switched=await self._command(event))
            case (
                RoutingOutcome.START
                | RoutingOutcome.QUEUE
                | RoutingOutcome.CANCELLED
                | RoutingOutcome.DUPLICATE
                | RoutingOutcome.IGNORED
            ):
                pass
            case never:
                assert_never(never)
        return Taken(outcome)

    async def _command(self, event: ChatEvent) -> SwitchAnswer:
        """Carry out a kill switch command; one that fails is forgotten, so its retry runs."""
        try:
            return await self._switch_desk.command(event)
        except (QueueUnavailable, StoreError, asyncio.CancelledError):
            await asyncio.shield(self._forget(event))
            raise

    async def _audit_person(self, event: ChatEvent, arrived: float, *, steer: bool) -> None:
        """Record who steered or stopped (a Stop button names its turn; typed text does not)."""
        stop_turn = event.action_value if event.kind is EventKind.ACTION else ""
        audited = AuditEvent(
            ts=arrived,
            session=event.session_id,
            turn="" if steer else stop_turn,
            kind="steer" if steer else "stop",
            who=event.person,
            data={"text": clip(event.text)} if steer else {},
        )
        await self._audit.record(audited)

    async def _stop_tree(self, event: ChatEvent) -> None:
        """A stop reaches the analysis's sub-agents at once.

        Their parent's own end stops them too, but only once a worker runs it.
        """
        keys, session = self.queue.keys, event.session_id
        with map_redis_errors("read sub-agent parents"):
            is_parent = await self._redis.sismember(keys.parents, session)
        if is_parent:
            await SubagentRegistry(self._redis, keys).stop_tree(
                session, event.author_name or event.author
            )

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
