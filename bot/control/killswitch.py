"""The kill switch: stop every live analysis at once, and start nothing new, on every worker.

Turning it on records who did it (one Redis key), then stops the live turn of every session
that holds a lease, exactly as a Stop button does (a tombstone and a ring, `ControlPlane.stop`):
the running tools are interrupted, nothing new starts, and each card ends "Stopped by the kill
switch". While it is on, workers read no new turn and take none over; jobs stay queued, nothing
accepted is lost, and they run once it is turned off. A turn a worker had already taken when the
switch went on stops before it calls the model.

Operators pull it with `chatops killswitch`, or in chat: an admin (`CHATOPS_ADMINS`) @mentions
the bot with `killswitch on|off|status` (`bot.policy.control_phrases`), and the ingress hands the
command to `KillSwitchDesk` right after routing it. Admins are platform-qualified
(`slack:U0123`, `console:alice`; `bot.people`): a console user is never a Slack or Feishu admin,
whatever id it claims (docs/reliability.md X10). A person who is not an admin changes nothing; the
refusal is logged. The ingress posts nothing to the platform (it acks within 3 s),
so what people see in the thread is the stopped cards; the desk's answer is the body of the
webhook's response, which the platforms do not show.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import redis.asyncio as aioredis

from agent_core import ControlPlane, map_redis_errors
from bot.control.subagents import SubagentRegistry
from bot.events import ChatEvent
from bot.keys import BotKeys
from bot.people import People
from bot.policy.authority import Action, Role, may
from bot.policy.control_phrases import KILL_SWITCH_INTENTS, ControlIntent, parse_control
from bot.state.audit import AuditEvent, AuditLog
from bot.state.followups import Followups

__all__ = ["KillSwitch", "KillSwitchDesk", "SwitchAnswer", "SwitchOutcome", "SwitchState"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SwitchState:
    """Whether the kill switch is on, and who turned it on when."""

    on: bool
    by: str = ""
    since: float = 0.0
    """Unix time it was turned on."""

    @property
    def stopper(self) -> str:
        """How a stopped card names the stopper."""
        return f"the kill switch ({self.by})" if self.by else "the kill switch"


class KillSwitch:
    """Turns the kill switch on and off, and tells whether it is on."""

    def __init__(
        self, redis: aioredis.Redis, keys: BotKeys | None = None, audit: AuditLog | None = None
    ) -> None:
        self._redis = redis
        self._keys = keys or BotKeys()
        self.audit = audit or AuditLog(redis, self._keys)
        """Each session it stops records who pulled it there."""
        self._control = ControlPlane(redis, self._keys.session)
        self._followups = Followups(redis, self._keys)

    async def state(self) -> SwitchState:
        """The switch's state (one GET)."""
        with map_redis_errors("read kill switch"):
            raw = await self._redis.get(self._keys.killswitch)
        if raw is None:
            return SwitchState(on=False)
        try:  # set by `engage`; anything else there still means on, by nobody known
            record = json.loads(raw)
            return SwitchState(on=True, by=str(record["by"]), since=float(record["since"]))
        except (ValueError, TypeError, KeyError):
            return SwitchState(on=True, by="an unreadable record")

    async def engage(self, by: str) -> list[str]:
        """Turn it on and stop every live turn; the turns stopped (`session/turn`)."""
        record = json.dumps({"by": by, "since": time.time()})
        with map_redis_errors("engage kill switch"):
            await self._redis.set(self._keys.killswitch, record)
        stopper = SwitchState(on=True, by=by).stopper
        stopped = []
        for session, turn in await self._live_turns():
            await self._control.stop(session, turn, by=stopper)
            stopped.append(f"{session}/{turn}")
        with map_redis_errors("read sub-agent parents"):
            parents: Any = await self._redis.smembers(self._keys.parents)
        registry = SubagentRegistry(self._redis, self._keys)
        for raw in parents:  # children parked or queued hold no lease: stop their trees too
            parent = raw.decode() if isinstance(raw, bytes) else str(raw)
            stopped += [f"{parent}/{c}" for c in await registry.stop_tree(parent, stopper)]
        stopped += await self._stop_awaiting(stopper, [_text(p) for p in parents])
        await self.audit.record_many(_switched(s, by, on=True) for s in stopped)
        return stopped

    async def _stop_awaiting(self, stopper: str, parents: list[str]) -> list[str]:
        """Stop every analysis that waits, holding no lease, so no live turn to stop.

        Those waiting for approvals, and `parents` (waiting for their sub-agents): the
        continuation is tombstoned and queued, as a Stop press does; it runs once the switch
        is off, answers any waiting call "interrupted" and ends the card "Stopped".
        """
        k = self._keys
        with map_redis_errors("read waiting analyses"):
            due: Any = await self._redis.zrange(k.session.approvals_due, 0, -1)
        stopped = []
        for session in dict.fromkeys([*map(_text, due), *parents]):
            turns = await self._followups.stop_waiting(session, stopper)
            stopped += [f"{session}/{turn}" for turn in turns]
        return stopped

    async def release(self) -> bool:
        """Turn it off; False when it was off."""
        with map_redis_errors("release kill switch"):
            return bool(await self._redis.delete(self._keys.killswitch))

    async def _live_turns(self) -> list[tuple[str, str]]:
        """Every (session, turn) whose lease is held: the lease names the live turn."""
        k = self._keys
        with map_redis_errors("read leases"):
            sessions: Any = await self._redis.zrange(k.leases, 0, -1)
            names = [s.decode() if isinstance(s, bytes) else str(s) for s in sessions]
            held: Any = await self._redis.mget([k.live_turn(s) for s in names]) if names else []
        live = []
        for session, value in zip(names, held, strict=True):
            if value is not None:  # token|worker|turn
                live.append((session, value.decode().split("|", 2)[2]))
        return live


class SwitchOutcome(StrEnum):
    """What became of a kill switch command from chat."""

    ON = "on"
    """The switch is on now (it was turned on, or on again)."""
    OFF = "off"
    """The switch is off now."""
    STATUS = "status"
    """The state was read; nothing changed."""
    REFUSED = "refused"
    """Not an admin, or not a kill switch command: nothing changed."""


@dataclass(frozen=True, slots=True)
class SwitchAnswer:
    """What the desk did with a command, and what to tell the person."""

    outcome: SwitchOutcome
    message: str


class KillSwitchDesk:
    """Carries out the kill switch commands admins send in chat."""

    def __init__(self, switch: KillSwitch, admins: People | Iterable[str]) -> None:
        """Build the desk; each bare admin id is warned about here, at start-up.

        Args:
            switch: The kill switch.
            admins: `CHATOPS_ADMINS`, qualified ids (bare ones as `bot.people` reads them: never
                a console user).

        Raises:
            ValueError: An admin entry names a platform whose users are not people.
        """
        self._switch = switch
        self._admins = People.of(admins)
        self._admins.warn_bare("CHATOPS_ADMINS")

    async def command(self, event: ChatEvent) -> SwitchAnswer:
        """Carry out the command `event` holds, if its author is an admin.

        Raises:
            StoreError: Redis failed; the command may be half done (carrying it out again is
                harmless: each command sets the switch to a state).
        """
        command = parse_control(event.text)
        if command is None or command.intent not in KILL_SWITCH_INTENTS:
            return SwitchAnswer(SwitchOutcome.REFUSED, "That is not a kill switch command.")
        who = event.person
        roles = frozenset({Role.ADMIN}) if who in self._admins else frozenset()
        if not may(Action.KILL_SWITCH, roles):
            log.warning(
                "kill switch %s by %s refused: not in CHATOPS_ADMINS", command.intent.value, who
            )
            return SwitchAnswer(
                SwitchOutcome.REFUSED, "Only an admin (CHATOPS_ADMINS) may use the kill switch."
            )
        answer = await self._carry_out(command.intent, event.author_name or event.author)
        if answer.outcome in (SwitchOutcome.ON, SwitchOutcome.OFF):
            on = answer.outcome is SwitchOutcome.ON
            await self._switch.audit.record(_switched(event.session_id, who, on=on))
        log.warning("kill switch command by %s: %s", who, answer.message)
        return answer

    async def _carry_out(self, intent: ControlIntent, by: str) -> SwitchAnswer:
        if intent is ControlIntent.KILL_SWITCH_ON:
            stopped = await self._switch.engage(by)
            return SwitchAnswer(
                SwitchOutcome.ON,
                f"Kill switch on: stopped {len(stopped)} live analyses; none starts until it is "
                "off.",
            )
        if intent is ControlIntent.KILL_SWITCH_OFF:
            if await self._switch.release():
                return SwitchAnswer(SwitchOutcome.OFF, "Kill switch off: queued analyses run now.")
            return SwitchAnswer(SwitchOutcome.OFF, "Kill switch was already off.")
        return SwitchAnswer(SwitchOutcome.STATUS, _describe(await self._switch.state()))


def _describe(state: SwitchState) -> str:
    if not state.on:
        return "Kill switch off."
    since = datetime.fromtimestamp(state.since, UTC).isoformat(timespec="seconds")
    return f"Kill switch on since {since} by {state.by}."


def _switched(stopped: str, by: str, *, on: bool) -> AuditEvent:
    """The audit event of the switch turned on or off, in a session (`session[/turn]`)."""
    session, _, turn = stopped.partition("/")
    return AuditEvent(
        ts=time.time(), session=session, turn=turn, kind="killswitch", who=by, data={"on": on}
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
