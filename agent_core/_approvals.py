"""Approval gates: a call that changes something waits for a named person's decision.

A call to a tool whose risk is not read-only never runs on the model's word alone, nor does a
call the intent check found inconsistent with a person's correction. When a batch holds such
calls, the runtime runs the batch's other calls, then suspends the turn with the gated calls in
their own ledger instead of holding a worker while people decide (the balance ledger `park`s
them; the batch stays in the turn's journal, out of the closed history):

- one `Approval` record per gated call, in the session's approvals hash, with the exact call,
  its risk, who asked for the analysis, when the request expires and, for a call the intent
  check held (`agent_core._intent_check`, a read call that goes against a correction), why;
- the session's `suspended` key, naming the turn whose journal holds the batch.

Whoever decides (the approval desk in `bot`) writes the verdict into the record. The next turn
of the session, whatever started it, closes the suspended batch first (`SuspendedBatch`): an
approved call runs, and every other one is answered with a tool result that says why it did not
("denied by …", "approval expired", "interrupted …"), so the history stays closed.

Records are JSON with the field names below; the desk's script reads and writes them in Lua
(cjson), so a rename here is a rename there.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import StrEnum

import redis.asyncio as aioredis

from agent_core._errors import StoreError
from agent_core._keys import Keys
from agent_core._lua import register_lua
from agent_core._messages import AssistantMessage, ToolCall, ToolMessage, ToolStatus, load_message
from agent_core._store import Fence, map_redis_errors
from agent_core.tools._base import Risk

__all__ = [
    "Approval",
    "ApprovalBook",
    "SuspendedBatch",
    "Verdict",
    "arguments_digest",
    "closing_answer",
]


class Verdict(StrEnum):
    """Where an approval request stands."""

    PENDING = "pending"
    """Nobody has decided yet."""
    APPROVED = "approved"
    """A person allowed to approve it did: the call runs when the turn resumes."""
    DENIED = "denied"
    """A person allowed to decide refused it."""
    EXPIRED = "expired"
    """Nobody decided in time."""
    STOPPED = "stopped"
    """The analysis was stopped while the call waited."""
    SUPERSEDED = "superseded"
    """Someone redirected the analysis while the call waited: the call is dropped."""

    @property
    def is_final(self) -> bool:
        """A decided request never changes again."""
        return self is not Verdict.PENDING


def arguments_digest(arguments: str) -> str:
    """A short digest of a call's exact arguments; an approval button carries it.

    A decision is accepted only for the arguments the person saw (docs/reliability.md A4).
    """
    return hashlib.sha256(arguments.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True, kw_only=True)
class Approval:
    """One gated call and its decision: the record people approve and the audit keeps."""

    session_id: str
    turn_id: str
    """The turn whose journal holds the call's batch."""
    call_id: str
    tool: str
    arguments: str
    """The call's arguments exactly as the model produced them."""
    digest: str
    """`arguments_digest(arguments)`."""
    risk: Risk
    requester: str
    """Who asked for the analysis (a platform user id); may not approve a destructive call."""
    requested_at: float
    """Unix time of the request."""
    expires_at: float
    """Unix time after which the request can only expire."""
    verdict: Verdict = Verdict.PENDING
    decided_by: str = ""
    decided_at: float = 0.0
    refusals: tuple[str, ...] = ()
    """Presses refused (wrong person, stale button, ...), "who: why", for the audit."""
    why: str = ""
    """Why a call that changes nothing waits: the intent check's reason ("checks the database
    although the redirect said to leave it alone"). Empty for a call that changes something
    (its risk says why), and in records written before the field existed."""

    def to_json(self) -> str:
        """The record as stored."""
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> Approval:
        """Rebuild a stored record.

        Raises:
            ValueError: `raw` is not an approval record.
        """
        try:
            data = json.loads(raw)
            return cls(
                **{
                    **data,
                    "risk": Risk(data["risk"]),
                    "verdict": Verdict(data["verdict"]),
                    "refusals": tuple(data.get("refusals") or ()),
                }
            )
        except (TypeError, KeyError, json.JSONDecodeError) as exc:
            raise ValueError(f"not an approval record: {exc}") from exc

    started_at: float = 0.0
    """Unix time an approved call was handed to its tool (0: not yet). A call started but
    never answered is "in doubt" on resume, never run a second time."""

    def answer(
        self, call: ToolCall, *, stopped_by: str = "", current: bool = True
    ) -> ToolMessage | None:
        """The tool result that closes the call without running it; None when it should run.

        Args:
            call: The gated call.
            stopped_by: Set when the turn that closes the batch was itself stopped: nothing
                may run then, approved or not.
            current: False when the turn closing the batch is not its continuation (the
                analysis that asked ended without it): an approval is not carried over.
        """
        if self.verdict is Verdict.APPROVED:
            if stopped_by:
                return closing_answer(call, Verdict.STOPPED, stopped_by)
            if not current:
                text = "not run: it was approved for an analysis that ended before it could run"
                return ToolMessage(
                    call_id=call.id, name=call.name, content=text, status=ToolStatus.ERROR
                )
            return None
        return closing_answer(call, self.verdict, self.decided_by)


def closing_answer(call: ToolCall, verdict: Verdict, by: str) -> ToolMessage:
    """The tool result of a gated call that did not run, saying why (docs/reliability.md H3)."""
    who = by or "someone"
    match verdict:
        case Verdict.DENIED:
            text, status = f"denied by {who}: the call was not run", ToolStatus.ERROR
        case Verdict.EXPIRED:
            text = "approval expired: nobody approved the call in time, so it was not run"
            status = ToolStatus.ERROR
        case Verdict.SUPERSEDED:
            text = "interrupted: the analysis was redirected before anyone approved the call"
            status = ToolStatus.INTERRUPTED
        case _:
            text = f"interrupted: the analysis was stopped by {who} before the call ran"
            status = ToolStatus.INTERRUPTED
    return ToolMessage(call_id=call.id, name=call.name, content=text, status=status)


@dataclass(frozen=True, slots=True)
class SuspendedBatch:
    """A batch suspended for approvals: what the next turn of its session closes first."""

    batch_session: str
    """The session it belongs to."""
    turn_id: str
    batch: AssistantMessage
    journaled: Mapping[str, ToolMessage]
    """Results of the calls that ran before the turn suspended."""
    approvals: Mapping[str, Approval]
    """The gated calls' records, by call id."""


CLAIM_TTL_S = 7 * 24 * 3600
"""How long a claim outlives a worker that died before closing the batch (its re-run
closes it; the claim only keeps late presses out)."""


class ApprovalBook:
    """Reads a session's approval records and its suspended batch; claims it for a turn."""

    def __init__(self, redis: aioredis.Redis, keys: Keys | None = None) -> None:
        self._redis = redis
        self._keys = keys or Keys()
        self._claim = register_lua(redis, "agent_core", "approvals_claim")

    async def claim(
        self,
        suspended: SuspendedBatch,
        turn_id: str,
        pending_verdict: Verdict,
        by: str,
        fence: Fence | None,
    ) -> tuple[SuspendedBatch, bool]:
        """Claim `suspended` for `turn_id`: requests still pending become `pending_verdict`.

        Returns the batch with its final records, and whether `turn_id` is the batch's
        continuation (the only turn that may run its approved calls).

        Raises:
            StoreError: Redis failed, or `fence` no longer holds.
        """
        k, session = self._keys, suspended.batch_session
        keys = [
            k.approvals(session),
            k.closing(session),
            fence.key if fence else k.closing(session),
            k.continuation(session),
        ]
        args = [
            str(fence.token) if fence else "",
            suspended.turn_id,
            pending_verdict.value,
            by,
            time.time(),
            turn_id,
            CLAIM_TTL_S,
        ]
        with map_redis_errors("claim suspended batch"):
            held, raw, continuation = await self._claim(keys=keys, args=args)
        if not held:
            raise StoreError("claim suspended batch: fenced (the lease has moved on)")
        records = [Approval.from_json(item) for item in raw]
        approvals = {a.call_id: a for a in records if a.call_id in suspended.approvals}
        text = continuation.decode() if isinstance(continuation, bytes) else str(continuation)
        return replace(suspended, approvals=approvals), text == turn_id

    async def records(self, session_id: str) -> dict[str, Approval]:
        """Every approval record of the session, by call id."""
        with map_redis_errors("read approvals"):
            raw = await self._redis.hgetall(self._keys.approvals(session_id))
        return {
            (k.decode() if isinstance(k, bytes) else str(k)): Approval.from_json(v)
            for k, v in raw.items()
        }

    async def stopped_by(self, session_id: str, turn_id: str) -> str | None:
        """Who stopped the turn before it began (its tombstone), or None."""
        with map_redis_errors("read tombstone"):
            value = await self._redis.get(self._keys.tombstone(session_id, turn_id))
        if value is None:
            return None
        text = value.decode() if isinstance(value, bytes) else str(value)
        return text if text not in ("", "1") else "someone"

    async def suspended(self, session_id: str) -> SuspendedBatch | None:
        """The session's batch waiting for approvals, if any."""
        k = self._keys
        with map_redis_errors("read suspended batch"):
            turn = await self._redis.get(k.suspended(session_id))
            if turn is None:
                return None
            turn_id = turn.decode() if isinstance(turn, bytes) else str(turn)
            raw = await self._redis.hgetall(k.journal(session_id, turn_id))
        batch: AssistantMessage | None = None
        journaled: dict[str, ToolMessage] = {}
        for value in raw.values():
            message = load_message(value)
            if isinstance(message, AssistantMessage):
                batch = message
            elif isinstance(message, ToolMessage):
                journaled[message.call_id] = message
        if batch is None:
            return None
        records = await self.records(session_id)
        gated = {c.id: records[c.id] for c in batch.tool_calls if c.id in records}
        return SuspendedBatch(session_id, turn_id, batch, journaled, gated)
