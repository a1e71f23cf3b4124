"""The approval desk: decides Approve and Deny presses, and expires requests nobody decided.

A press names one waiting call (`<call id>|<digest of its arguments>`, the button's value) of
the session whose card it is on. It is accepted only when all of these hold (RELIABILITY A4,
A5, S17, F13), else it is refused, the refusal goes on the record, and the call keeps waiting:

- the call is waiting for a decision (a replay, or a press on a decided call, changes nothing);
- the arguments are the ones the button showed (the digest matches);
- the request has not expired (a late press expires it instead), and no turn has claimed the
  batch to close it (a redirect or a stop got there first);
- the kill switch is off, for an approval (a denial is always taken);
- the person may decide: approving needs a configured responder (`CHATOPS_RESPONDERS`), and a
  destructive call may not be approved by the person who asked for the analysis (two-person
  rule); denying is open to responders and to that person.

The decision is one script: it writes the verdict and, when it was the analysis's last waiting
call, queues the continuation job (`BotKeys.awaiting`) on the turns stream. The continuation
closes the suspended batch: approved calls run, the others are answered with why they did not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

import redis.asyncio as aioredis

from agent_core.approvals import Approval, Verdict
from agent_core.store import map_redis_errors
from agent_core.tools.base import Risk
from bot.audit import AuditEvent, AuditLog
from bot.events import ChatEvent
from bot.keys import BotKeys
from bot.steer_policy import Action, Role, may

__all__ = ["ApprovalDesk", "Press", "PressOutcome", "approval_button_value", "parse_button_value"]

log = logging.getLogger(__name__)

# KEYS: approvals hash, awaiting job, turns stream, approvals-due index, closing marker,
# kill switch. ARGV: call id, verdict, who, now, digest, refusal reason ('' when the press is
# authorized), session id.
_DECIDE = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return {'unknown', ''} end
local a = cjson.decode(raw)
local now = tonumber(ARGV[4])
local function save() redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(a)) end
if a['verdict'] ~= 'pending' then return {'decided', a['verdict']} end
if redis.call('EXISTS', KEYS[5]) == 1 then return {'decided', 'closed'} end
if ARGV[2] == 'approved' and redis.call('EXISTS', KEYS[6]) == 1 then
  ARGV[6] = 'the kill switch is on'
end
local outcome = 'ok'
if now > tonumber(a['expires_at']) then
  a['verdict'] = 'expired'
  a['decided_by'] = ''
  a['decided_at'] = now
  outcome = 'expired'
elseif ARGV[6] ~= '' or a['digest'] ~= ARGV[5] then
  local why = ARGV[6]
  if why == '' then why = 'the button shows other arguments' end
  local refusals = a['refusals']
  if type(refusals) ~= 'table' then refusals = {} end
  table.insert(refusals, ARGV[3] .. ': ' .. why)
  a['refusals'] = refusals
  save()
  return {'refused', why}
else
  a['verdict'] = ARGV[2]
  a['decided_by'] = ARGV[3]
  a['decided_at'] = now
end
save()
local turn = a['turn_id']
for _, value in ipairs(redis.call('HVALS', KEYS[1])) do
  local other = cjson.decode(value)
  if other['turn_id'] == turn and other['verdict'] == 'pending' then
    return {outcome, a['verdict']}
  end
end
local job = redis.call('GET', KEYS[2])
if job then
  redis.call('XADD', KEYS[3], '*', 'job', job)
  redis.call('DEL', KEYS[2])
end
redis.call('ZREM', KEYS[4], ARGV[7])
return {outcome, a['verdict']}
"""


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
    ALREADY_DECIDED = "already_decided"


@dataclass(frozen=True, slots=True)
class Press:
    """What the desk did with a press, and what to tell the person."""

    outcome: PressOutcome
    message: str


class ApprovalDesk:
    """Decides presses and expiries for every session."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys,
        responders: Iterable[str] = (),
        clock: Callable[[], float] = time.time,
        audit: AuditLog | None = None,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._responders = frozenset(responders)
        self._clock = clock
        self._audit = audit or AuditLog(redis, keys)
        self._decide = redis.register_script(_DECIDE)

    async def press(self, event: ChatEvent) -> Press:
        """Decide one Approve or Deny press (`event.action` is `approve` or `deny`)."""
        who = event.author
        parsed = parse_button_value(event.action_value)
        if parsed is None or event.action not in ("approve", "deny"):
            return Press(PressOutcome.REFUSED, "This button does not name a waiting call.")
        call_id, digest = parsed
        session = event.session_id
        record = await self._record(session, call_id)
        if record is None:
            return Press(PressOutcome.REFUSED, "No call of this analysis waits for that.")
        approve = event.action == "approve"
        refusal = self._refusal(record, who, approve=approve)
        verdict = Verdict.APPROVED if approve else Verdict.DENIED
        result = await self._write(session, call_id, verdict, who, digest, refusal)
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
                if record.verdict is Verdict.PENDING and record.expires_at <= now:
                    press = await self._write(
                        session, record.call_id, Verdict.EXPIRED, "", record.digest, ""
                    )
                    expired += press.outcome is PressOutcome.EXPIRED
        return expired

    def _refusal(self, record: Approval, who: str, *, approve: bool) -> str:
        roles = frozenset({Role.RESPONDER}) if who in self._responders else frozenset()
        is_requester = who == record.requester
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
        self, session: str, call_id: str, verdict: Verdict, who: str, digest: str, refusal: str
    ) -> Press:
        k = self._keys
        keys = [
            k.session.approvals(session),
            k.awaiting(session),
            k.turns_stream,
            k.session.approvals_due,
            k.session.closing(session),
            k.killswitch,
        ]
        args = [call_id, verdict.value, who, self._clock(), digest, refusal, session]
        with map_redis_errors("decide approval"):
            raw_outcome, raw_verdict = await self._decide(keys=keys, args=args)
        outcome = _text(raw_outcome)
        detail = _text(raw_verdict)
        match outcome:
            case "ok" if verdict is Verdict.APPROVED:
                return Press(PressOutcome.APPROVED, "Approved: the call runs now.")
            case "ok":
                return Press(PressOutcome.DENIED, "Denied: the call will not run.")
            case "expired":
                return Press(PressOutcome.EXPIRED, "Too late: this request has expired.")
            case "decided" if detail == "closed":
                return Press(
                    PressOutcome.ALREADY_DECIDED, "No longer waiting: the analysis moved on."
                )
            case "decided":
                return Press(PressOutcome.ALREADY_DECIDED, f"Already decided ({detail}).")
            case "refused":
                return Press(PressOutcome.REFUSED, f"Not accepted: {detail}.")
            case _:
                return Press(PressOutcome.REFUSED, "No call of this analysis waits for that.")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
