"""The approval desk: decides Approve and Deny presses, and expires requests nobody decided.

A press names one waiting call (`<call id>|<digest of its arguments>`, the button's value) of
the session whose card it is on. It is accepted only when all of these hold (docs/reliability.md A4,
A5, S17, F13), else it is refused, the refusal goes on the record, and the call keeps waiting:

- the call is waiting for a decision (a replay, or a press on a decided call, changes nothing);
- the arguments are the ones the button showed (the digest matches);
- the request has not expired (a late press expires it instead), and no turn has claimed the
  batch to close it (a redirect or a stop got there first);
- the kill switch is off, for an approval (a denial is always taken);
- the person may decide: approving needs a configured responder (`CHATOPS_RESPONDERS`), and a
  destructive call may not be approved by the person who asked for the analysis, nor by anyone
  whose redirect or answer reached it (two-person rule, docs/reliability.md A5, X11: the session's
  participants, `BotKeys.participants`, written by the submit script that accepted each of
  them); denying is open to responders and to that person.

People are compared by their platform-qualified ids (`ChatEvent.person`, `bot.people`; X10): the
presser's, the requester's (qualified with the session's platform when the record holds it
bare) and the configured responders'. The audit trail's `who` and the record's `decided_by` and
refusals name the qualified id.

A call nobody asked for (a scheduled job's run, requester `scheduler:<job id>`) has no first
person, so a destructive one needs two distinct approvers (X12): the first approval is recorded
(`BotKeys.first_approvals`, and the audit trail) and the call keeps waiting; an approval by
another person releases it; the same person again is refused. Participants are refused here too.

The decision is one script: it checks the participants, counts the approvals, writes the verdict
and, when it was the analysis's last waiting call, queues the continuation job
(`BotKeys.awaiting`) on the turns stream. The continuation closes the suspended batch: approved
calls run, the others are answered with why they did not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

import redis.asyncio as aioredis

from agent_core import (
    TURN_KEY_TTL_S,
    Approval,
    ApprovalVerdict,
    Risk,
    map_redis_errors,
    register_lua,
)
from bot.events import ChatEvent, is_unattended, person_of
from bot.keys import BotKeys
from bot.people import People
from bot.policy.authority import Action, Role, approvals_needed, may
from bot.state.audit import AuditEvent, AuditLog

__all__ = ["ApprovalDesk", "Press", "PressOutcome", "approval_button_value", "parse_button_value"]

log = logging.getLogger(__name__)


def approval_button_value(approval: Approval) -> str:
    """The value an Approve or Deny button carries: the call and the arguments it shows."""
    return f"{approval.call_id}|{approval.digest}"


def parse_button_value(value: str) -> tuple[str, str] | None:
    """(call id, digest) from a button value, or None when it is not one."""
    call_id, sep, digest = value.partition("|")
    return (call_id, digest) if sep and call_id and digest else None


class PressOutcome(StrEnum):
    """What became of a press."""

    APPROVED = "approved"
    DENIED = "denied"
    REFUSED = "refused"
    """Not accepted: wrong person, other arguments, or not a waiting call."""
    EXPIRED = "expired"
    """Too late: the request expired (and is now recorded as expired)."""
    RECORDED = "recorded"
    """A first approval of a call that needs two: recorded, and the call still waits."""
    ALREADY_DECIDED = "already_decided"


@dataclass(frozen=True, slots=True)
class Press:
    """What the desk did with a press, and what to tell the person."""

    outcome: PressOutcome
    message: str
    unknown: bool = False
    """The press names no waiting call of its session (a value that is not `<call id>|<digest>`,
    or a call nobody asked about): refused, and nothing went on the record. A route whose
    client can take it (the console's) answers 404 or 400; the chat platforms need their 200."""


class ApprovalDesk:
    """Decides presses and expiries for every session."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys,
        responders: People | Iterable[str] = (),
        clock: Callable[[], float] = time.time,
        audit: AuditLog | None = None,
    ) -> None:
        """Build the desk; each bare responder id is warned about here, at start-up.

        Args:
            redis: The shared Redis.
            keys: The key names in use.
            responders: `CHATOPS_RESPONDERS`, qualified ids (bare ones as `bot.people` reads
                them).
            clock: Unix time, for expiry.
            audit: Where each press goes on the record.

        Raises:
            ValueError: A responder entry names a platform whose users are not people.
        """
        self._redis = redis
        self._keys = keys
        self._responders = People.of(responders)
        self._responders.warn_bare("CHATOPS_RESPONDERS")
        self._clock = clock
        self._audit = audit or AuditLog(redis, keys)
        self._decide = register_lua(redis, "bot.control", "approval_desk_decide")

    async def press(self, event: ChatEvent) -> Press:
        """Decide one Approve or Deny press (`event.action` is `approve` or `deny`)."""
        who = event.person
        parsed = parse_button_value(event.action_value)
        if parsed is None or event.action not in ("approve", "deny"):
            return Press(
                PressOutcome.REFUSED, "This button does not name a waiting call.", unknown=True
            )
        call_id, digest = parsed
        session = event.session_id
        record = await self._record(session, call_id)
        if record is None:
            return _UNKNOWN
        approve = event.action == "approve"
        requester = person_of(event.platform, record.requester)
        refusal = self._refusal(record, who, requester, approve=approve)
        verdict = ApprovalVerdict.APPROVED if approve else ApprovalVerdict.DENIED
        rule = _Rule.of(record, approve=approve)
        result = await self._write(session, call_id, verdict, who, digest, refusal, rule)
        log.info(
            "approval press on %s (%s) by %s: %s", call_id, record.tool, who, result.outcome.value
        )
        data = {"call_id": call_id, "tool": record.tool, "verdict": result.outcome.value}
        pressed = AuditEvent(
            ts=time.time(),
            session=session,
            turn=record.turn_id,
            kind="approval",
            who=who,
            data=data,
        )
        await self._audit.record(pressed)
        return result

    async def expire_due(self) -> int:
        """Expire every request past its time nobody decided; return how many."""
        now = self._clock()
        with map_redis_errors("read due approvals"):
            sessions = await self._redis.zrangebyscore(self._keys.session.approvals_due, 0, now)
        expired = 0
        for raw in sessions:
            session = raw.decode() if isinstance(raw, bytes) else str(raw)
            with map_redis_errors("read approvals"):
                records = await self._redis.hvals(self._keys.session.approvals(session))
            for value in records:
                record = Approval.from_json(value)
                if record.verdict is ApprovalVerdict.PENDING and record.expires_at <= now:
                    press = await self._write(
                        session,
                        record.call_id,
                        ApprovalVerdict.EXPIRED,
                        "",
                        record.digest,
                        "",
                        _ANYONE,
                    )
                    expired += press.outcome is PressOutcome.EXPIRED
        return expired

    def _refusal(self, record: Approval, who: str, requester: str, *, approve: bool) -> str:
        """Why `who` may not decide `record`, from the configuration alone ('' when they may).

        Who took part in the analysis, and earlier approvals, are the script's to check: they
        change between this read and the write.
        """
        roles = frozenset({Role.RESPONDER}) if who in self._responders else frozenset()
        is_requester = who == requester
        if not approve:
            return "" if roles or is_requester else "only a responder may decide this call"
        action = Action.APPROVE_DESTRUCTIVE if record.risk is Risk.DESTRUCTIVE else Action.APPROVE
        if may(action, roles, is_requester=is_requester):
            return ""
        if roles and is_requester:
            return "a destructive call needs a second person: you asked for this analysis"
        return "only a responder may approve this call"

    async def _record(self, session: str, call_id: str) -> Approval | None:
        with map_redis_errors("read approval"):
            raw = await self._redis.hget(self._keys.session.approvals(session), call_id)
        return None if raw is None else Approval.from_json(raw)

    async def _write(
        self,
        session: str,
        call_id: str,
        verdict: ApprovalVerdict,
        who: str,
        digest: str,
        refusal: str,
        rule: _Rule,
    ) -> Press:
        k = self._keys
        keys = [
            k.session.approvals(session),
            k.awaiting(session),
            k.turns_stream,
            k.session.approvals_due,
            k.session.closing(session),
            k.killswitch,
            k.participants(session),
            k.first_approvals(session),
        ]
        args = [
            *(call_id, verdict.value, who, self._clock(), digest, refusal, session),
            "1" if rule.two_person else "0",
            rule.approvals,
            TURN_KEY_TTL_S,
        ]
        with map_redis_errors("decide approval"):
            raw_outcome, raw_verdict = await self._decide(keys=keys, args=args)
        outcome = _text(raw_outcome)
        detail = _text(raw_verdict)
        match outcome:
            case "ok" if verdict is ApprovalVerdict.APPROVED:
                return Press(PressOutcome.APPROVED, "Approved: the call runs now.")
            case "ok":
                return Press(PressOutcome.DENIED, "Denied: the call will not run.")
            case "expired":
                return Press(PressOutcome.EXPIRED, "Too late: this request has expired.")
            case "recorded":
                return Press(
                    PressOutcome.RECORDED,
                    "Approval recorded: a scheduled job's destructive call waits for a second "
                    "person's approval.",
                )
            case "decided" if detail == "closed":
                return Press(
                    PressOutcome.ALREADY_DECIDED, "No longer waiting: the analysis moved on."
                )
            case "decided":
                return Press(PressOutcome.ALREADY_DECIDED, f"Already decided ({detail}).")
            case "refused":
                return Press(PressOutcome.REFUSED, f"Not accepted: {detail}.")
            case _:  # "unknown": the record went between our read and the script
                return _UNKNOWN


@dataclass(frozen=True, slots=True)
class _Rule:
    """What the script enforces for one press beyond the configuration."""

    two_person: bool
    """The analysis's participants may not approve it."""
    approvals: int
    """Distinct approvals the call needs before it runs."""

    @classmethod
    def of(cls, record: Approval, *, approve: bool) -> _Rule:
        if not approve:
            return _ANYONE
        action = Action.APPROVE_DESTRUCTIVE if record.risk is Risk.DESTRUCTIVE else Action.APPROVE
        needed = approvals_needed(action, unattended=is_unattended(record.requester))
        return cls(two_person=action is Action.APPROVE_DESTRUCTIVE, approvals=needed)


_UNKNOWN = Press(PressOutcome.REFUSED, "No call of this analysis waits for that.", unknown=True)
"""A press naming a call its session never asked about."""

_ANYONE = _Rule(two_person=False, approvals=1)
"""A denial or an expiry: one decision, by anyone the configuration allows."""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
