"""The reaper: no card stays "in progress" after the worker running it is gone.

A worker keeps its session's lease alive with heartbeats; when it dies the lease expires and the
lease index (`BotKeys.leases`, scored by expiry) still names the session. Each sweep:

1. For every session whose lease expired: finalize its card as "interrupted" (an atomic script
   that refuses while a lease is held again and does nothing to a card already final), settle
   the turn the card named (`failed`, "interrupted"; a no-op when it was settled), and drop the
   session from the index.
2. Deliver every final state that is recorded but not yet shown (a platform outage at the
   worker's last update, or step 1 itself).
3. Expire approval requests nobody decided in time (`bot.control.approval_desk`): each expiry
   that ends an analysis's wait queues its continuation, which answers the call "approval expired".

Every step is idempotent, so two reapers (or one that crashed half-way) finish the same work
without doing it twice (docs/reliability.md C10). A turn whose lease expired is first left to the
workers for `RESUME_GRACE_S` (one of them reclaims and resumes it on the same card, C4); a card
is therefore final at the latest one lease TTL plus that grace plus one sweep interval after its
worker's last heartbeat (C3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import redis.asyncio as aioredis

from agent_core import SettleReason, SettleRecord, map_redis_errors
from bot.control.approval_desk import ApprovalDesk
from bot.events import Platform
from bot.keys import BotKeys
from bot.publishing.card_posting import post_card_once
from bot.publishing.card_record import DELIVERY_STALE_S, CardRecord
from bot.publishing.platform import CardGone, CardRef, CardTarget, ChatPlatform, PlatformError
from bot.state.lease import Leases
from bot.state.settle import SettleWriter, Verdict
from cards import CardStatus, ProgressCard

__all__ = ["INTERRUPTED_ERROR", "Reaper", "SweepReport"]

log = logging.getLogger(__name__)

INTERRUPTED_ERROR = "interrupted: the worker running this turn stopped (lease expired)"
RESUME_GRACE_S = 5.0
"""How long after a lease expired the reaper waits: an idle worker reclaims the turn and
resumes it on the same card within about that long (a worker polls every 2 s), and only a turn
nobody resumed is finalized as interrupted."""


@dataclass(frozen=True, slots=True)
class SweepReport:
    """What one sweep did."""

    interrupted: int
    """Cards finalized as interrupted."""
    delivered: int
    """Final states shown on the platform."""
    expired: int = 0
    """Approval requests nobody decided in time, now expired (their analyses continue)."""


class Reaper:
    """Finalizes abandoned cards and delivers pending final states."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        keys: BotKeys,
        leases: Leases,
        settle: SettleWriter,
        platforms: Mapping[Platform, ChatPlatform],
        grace_s: float = RESUME_GRACE_S,
    ) -> None:
        self._redis = redis
        self._grace_ms = int(grace_s * 1000)
        self._keys = keys
        self._leases = leases
        self._settle = settle
        self._platforms = platforms
        self._desk = ApprovalDesk(redis, keys)

    async def sweep(self, now_ms: int | None = None) -> SweepReport:
        """One pass over expired leases and undelivered finals.

        Each session is handled on its own: a failure is logged and retried by the next sweep,
        and never keeps the other sessions waiting.
        """
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        interrupted = delivered = 0
        for session in await self._leases.expired(now_ms - self._grace_ms):
            try:
                interrupted += await self._reap(session)
            except Exception:
                log.exception("reaping %s failed; the next sweep retries", session)
        with map_redis_errors("read undelivered cards"):
            pending = await self._redis.smembers(self._keys.undelivered_cards)
        for raw in pending:
            session = raw.decode() if isinstance(raw, bytes) else str(raw)
            try:
                delivered += await self._deliver(session)
            except Exception:
                log.exception("delivering the card of %s failed; the next sweep retries", session)
        try:
            expired = await self._desk.expire_due()
        except Exception:
            log.exception("expiring approvals failed; the next sweep retries")
            expired = 0
        return SweepReport(interrupted=interrupted, delivered=delivered, expired=expired)

    async def _reap(self, session_id: str) -> int:
        """Finalize, settle, deliver, forget: each step idempotent, the last one last."""
        record = CardRecord(self._redis, self._keys, session_id)
        fields = await record.read()
        interrupted = 0
        if fields.get("final") == "0" and fields.get("state"):
            card = ProgressCard.from_json(fields["state"]).ended(CardStatus.INTERRUPTED)
            if await record.abandon(card, fields.get("seq", "0")):
                log.warning("turn %s of %s lost its worker: interrupted", card.turn_id, session_id)
                interrupted = 1
        await self._deliver(session_id, stale_s=0 if interrupted else DELIVERY_STALE_S)
        await self._settle_claimed(session_id)  # after the card: the settle is the last word
        await self._leases.forget(session_id)
        return interrupted

    async def _settle_claimed(self, session_id: str) -> None:
        """Settle every open turn the dead worker had claimed: begun, or a follow-up it made.

        A turn that never began is left alone: it is still in the stream for a worker to take.
        """
        k = self._keys
        with map_redis_errors("read open turns"):
            open_turns = await self._redis.smembers(k.open_turns(session_id))
        for raw in open_turns:
            turn = raw.decode() if isinstance(raw, bytes) else str(raw)
            with map_redis_errors("read turn"):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.exists(k.session.begun(session_id, turn))
                    pipe.sismember(k.followups(session_id), turn)
                    begun, followup = await pipe.execute()
            if begun or followup:
                await self._settle_interrupted(session_id, turn)

    async def _settle_interrupted(self, session_id: str, turn_id: str) -> None:
        now = datetime.now(UTC)
        record = SettleRecord(
            session_id=session_id,
            turn_id=turn_id,
            reason=SettleReason.FAILED,
            final_event_id="",
            error=INTERRUPTED_ERROR,
            started_at=now,
            ended_at=now,
        )
        verdict = Verdict(automation=False, no_final_reply=False, remedy_eligible=False)
        await self._settle.write(record, verdict, lease=None)

    async def _deliver(self, session_id: str, stale_s: float = DELIVERY_STALE_S) -> int:
        record = CardRecord(self._redis, self._keys, session_id)
        fields = await record.read()
        if fields.get("final") != "1" or fields.get("delivered") == "1" or not fields.get("state"):
            await record.mark_delivered()  # nothing left to show (expired or already shown)
            return 0
        if not await record.take_delivery(stale_s):
            return 0  # being sent (by its worker, or another reaper): not twice
        kind = fields.get("platform", "")
        platform = self._platforms.get(Platform(kind)) if kind in set(Platform) else None
        if platform is None:
            log.error("card of %s is on an unconfigured platform", session_id)
            return 0
        card = ProgressCard.from_json(fields["state"])
        try:
            await self._show(platform, fields, card, record)
        except PlatformError as exc:
            log.warning("final card of %s not delivered yet: %s", session_id, exc)
            await record.drop_delivery()
            return 0
        await record.mark_delivered()
        target = CardTarget(Platform(kind), fields.get("channel", ""), fields.get("thread", ""))
        try:  # the dead worker's status line, if any (Slack clears it after 2 minutes anyway)
            await platform.set_status(target, "")
        except PlatformError as exc:
            log.info("status line of %s not cleared: %s", session_id, exc)
        return 1

    async def _show(
        self,
        platform: ChatPlatform,
        fields: Mapping[str, str],
        card: ProgressCard,
        record: CardRecord,
    ) -> None:
        kind = Platform(fields["platform"])
        if fields.get("message_id"):
            try:
                await platform.update_card(
                    CardRef(kind, fields["channel"], fields["message_id"]), card
                )
                return
            except CardGone:
                log.info("card of %s was deleted; posting the final state anew", card.turn_id)
        target = CardTarget(kind, fields["channel"], fields["thread"])
        await post_card_once(platform, record, target, card)
