"""The card publisher: gets the progress card of one analysis onto the platform, truthfully.

Contract (DESIGN.md invariant 6, RELIABILITY C1-C8):
- One card per analysis: posted once in the thread, then updated. A continuing analysis (a
  redirected turn's follow-up, a turn resumed on another worker) reuses the card it finds in the
  session's card record, as long as that card is not final.
- Updates coalesce: `show` only records the latest state; one flusher sends it at most once per
  `min_interval_s` (Slack `chat.update` is Tier 3, ~50/min; Feishu allows 5 QPS per message) and
  waits out a 429's `Retry-After`, after which it sends whatever is latest.
- Fenced by (lease token, sequence): every send is first claimed in the card record by a Lua
  script that refuses a writer with an older token and anything after a final state. A send
  that raced a final (a paused zombie whose claim predates the final) is followed by a re-read,
  and the stored final is sent again, so a final card stays final.
- The final state is recorded before it is sent; if it cannot be delivered now, the record says
  so (`delivered=0`) and the reaper delivers it later. A card deleted by a person (C7) does not
  stop the run: the final answer is posted as a new message.
- On Slack, a status line ("is investigating…") is refreshed before its 2-minute expiry and
  cleared on every exit path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from agent_core.errors import AgentError
from agent_core.interrupts import checkpoint
from agent_core.store import map_redis_errors
from bot.keys import BotKeys
from bot.platform import (
    CardGone,
    CardRef,
    CardTarget,
    ChatPlatform,
    PlatformError,
    PlatformRateLimited,
    PlatformUnavailable,
)
from cards.model import CardStatus, ProgressCard

__all__ = ["CardPublisher", "CardRecord", "PublisherOptions"]

log = logging.getLogger(__name__)

# KEYS: card record, undelivered-finals index. ARGV: token, final flag, card JSON, session.
# Returns the new sequence number, or 0 when refused (older token, or the card is final).
_CLAIM = """
if redis.call('HGET', KEYS[1], 'final') == '1' then return 0 end
local token = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token > tonumber(ARGV[1]) then return 0 end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'state', ARGV[3], 'final', ARGV[2])
if ARGV[2] == '1' then
  local now = redis.call('TIME')
  redis.call('HSET', KEYS[1], 'delivered', 'sending:' .. now[1])
  redis.call('SADD', KEYS[2], ARGV[4])
end
return seq
"""

# KEYS: card record. ARGV: seconds after which a delivery in progress counts as abandoned.
# Takes the delivery of a recorded final state: 1 when the caller must send it now.
_TAKE_DELIVERY = """
local state = redis.call('HGET', KEYS[1], 'delivered')
if not state or state == '1' then return 0 end
local now = tonumber(redis.call('TIME')[1])
local since = tonumber(string.match(state, '^sending:(%d+)$') or '')
if since and now - since < tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'delivered', 'sending:' .. now)
return 1
"""

# KEYS: card record, lease, undelivered-finals index. ARGV: session, final state, the sequence
# number it was built from. The reaper's finalization: only while no lease is held, only a live
# card, and only if nobody wrote the card since it was read. 1 when done.
_ABANDON = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if redis.call('HGET', KEYS[1], 'final') ~= '0' then return 0 end
if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[3] then return 0 end
local now = redis.call('TIME')
redis.call('HSET', KEYS[1], 'final', '1', 'delivered', 'sending:' .. now[1], 'state', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('SADD', KEYS[3], ARGV[1])
return 1
"""


# KEYS: card record. Gives a failed delivery back, so the next sweep retries it at once.
_DROP_DELIVERY = """
local state = redis.call('HGET', KEYS[1], 'delivered')
if state and string.match(state, '^sending:') then redis.call('HSET', KEYS[1], 'delivered', '0') end
return 1
"""

# KEYS: card record, lease. ARGV: token, platform, channel, thread, ttl.
# Attaches a new owner to a live card of the same thread: returns its message id, or '' when a
# new card must be posted (none yet, or the last one is final).
_ATTACH = """
local held = redis.call('GET', KEYS[2])
if not held or string.match(held, '^(%d+)|') ~= ARGV[1] then return redis.error_reply('lease') end
local rec = redis.call('HMGET', KEYS[1], 'final', 'message_id', 'thread', 'platform')
if rec[1] == '0' and rec[2] and rec[2] ~= '' and rec[3] == ARGV[4] and rec[4] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'token', ARGV[1])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return rec[2]
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'seq', 0, 'final', '0', 'platform', ARGV[2],
  'channel', ARGV[3], 'thread', ARGV[4], 'message_id', '')
redis.call('EXPIRE', KEYS[1], ARGV[5])
return ''
"""

CARD_TTL_S = 30 * 24 * 3600
DELIVERY_STALE_S = 60
"""A final state whose sender has not confirmed it within this long is sent again (reaper)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PublisherOptions:
    """Pacing of card updates (seconds)."""

    min_interval_s: float = 1.0
    """Least time between two updates of one card."""
    status_refresh_s: float = 90.0
    """Slack's status line clears itself after 2 minutes: refresh it before that."""
    final_timeout_s: float = 20.0
    """How long the final update is retried before it is left to the reaper."""
    retry_s: float = 1.0
    """Back-off after a timeout or 5xx."""


class CardRecord:
    """Reads and writes the session's card record (`BotKeys.card`)."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys, session_id: str) -> None:
        self._redis = redis
        self.session_id = session_id
        self._key = keys.card(session_id)
        self._lease_key = keys.live_turn(session_id)
        self._undelivered = keys.undelivered_cards
        self._claim = redis.register_script(_CLAIM)
        self._attach = redis.register_script(_ATTACH)
        self._abandon = redis.register_script(_ABANDON)
        self._take_delivery = redis.register_script(_TAKE_DELIVERY)
        self._drop_delivery = redis.register_script(_DROP_DELIVERY)

    async def attach(self, token: int, target: CardTarget) -> str:
        """Become the card's writer; the live card's message id, or '' to post a new one."""
        with map_redis_errors("attach card"):
            raw = await self._attach(
                keys=[self._key, self._lease_key],
                args=[token, target.platform.value, target.channel, target.thread, CARD_TTL_S],
            )
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    async def claim(self, token: int, card: ProgressCard) -> int:
        """Claim the right to show `card`; 0 when refused (fenced, or already final)."""
        with map_redis_errors("claim card"):
            seq = await self._claim(
                keys=[self._key, self._undelivered],
                args=[token, int(card.is_final), card.to_json(), self.session_id],
            )
        return int(seq)

    async def abandon(self, final: ProgressCard, seq: str) -> bool:
        """Record `final` for a card whose lease expired (the reaper); False if not to be done.

        `seq` is the record's sequence number when `final` was built from its state: a write
        since then (a worker came back) wins.
        """
        with map_redis_errors("abandon card"):
            done = await self._abandon(
                keys=[self._key, self._lease_key, self._undelivered],
                args=[self.session_id, final.to_json(), seq],
            )
        return bool(done)

    async def take_delivery(self, stale_s: float = DELIVERY_STALE_S) -> bool:
        """Take the delivery of the recorded final state, unless another is sending it."""
        with map_redis_errors("take card delivery"):
            return bool(await self._take_delivery(keys=[self._key], args=[int(stale_s)]))

    async def drop_delivery(self) -> None:
        """Give up delivering the recorded final for now (a reaper sweep will retry it)."""
        with map_redis_errors("drop card delivery"):
            await self._drop_delivery(keys=[self._key])

    async def set_message(self, message_id: str) -> None:
        """Record where the card was posted."""
        with map_redis_errors("record card"):
            await self._redis.hset(self._key, "message_id", message_id)

    async def mark_delivered(self) -> None:
        """The final state reached the platform."""
        with map_redis_errors("record card"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._key, "delivered", "1")
                pipe.srem(self._undelivered, self.session_id)
                await pipe.execute()

    async def read(self) -> dict[str, str]:
        """The record's fields."""
        with map_redis_errors("read card"):
            raw = await self._redis.hgetall(self._key)
        return {_text(k): _text(v) for k, v in raw.items()}


class CardPublisher:
    """Publishes one analysis's card; owned by the actor (its `run` task lives in its group)."""

    def __init__(
        self,
        platform: ChatPlatform,
        record: CardRecord,
        target: CardTarget,
        token: int,
        options: PublisherOptions | None = None,
    ) -> None:
        self._platform = platform
        self._record = record
        self._target = target
        self._token = token
        self._options = options or PublisherOptions()
        self._ref: CardRef | None = None
        self._desired: ProgressCard | None = None
        self._claimed: ProgressCard | None = None
        self._changed = asyncio.Event()
        self._last_sent = float("-inf")
        self._status_at = float("-inf")
        self._status_shown = False
        self.sent = 0
        """Platform calls that changed the card (posts and updates), for tests and metrics."""

    @property
    def ref(self) -> CardRef | None:
        """Where the card is, once posted."""
        return self._ref

    async def attach(self) -> None:
        """Become the writer of the analysis's live card (if any), without showing anything."""
        message_id = await self._record.attach(self._token, self._target)
        if message_id:
            self._ref = CardRef(self._target.platform, self._target.channel, message_id)

    async def open(self, card: ProgressCard) -> None:
        """Post the card (or attach to the analysis's live card) and show `card` on it."""
        await self._deliver_leftover()
        await self.attach()
        self.show(card)
        await self._flush()
        await self._refresh_status(card, force=True)

    def show(self, card: ProgressCard) -> None:
        """Make `card` the state to publish next (earlier unsent states are dropped)."""
        self._desired = card
        self._changed.set()

    async def run(self) -> None:
        """Send changes as they come, paced, until cancelled (the final goes via `finish`)."""
        while True:
            checkpoint()  # redis-py on 3.11 can swallow a cancel (see `checkpoint`)
            wait = self._options.status_refresh_s
            try:
                async with asyncio.timeout(wait):
                    await self._changed.wait()
            except TimeoutError:
                if self._desired is not None:
                    await self._refresh_status(self._desired)
                continue
            pause = self._last_sent + self._options.min_interval_s - time.monotonic()
            if pause > 0:
                await asyncio.sleep(pause)
            await self._flush()
            if self._desired is not None:
                await self._refresh_status(self._desired)

    async def flush(self) -> bool:
        """Send the latest state now (the flusher task is gone); True when it was shown."""
        return await self._flush()

    async def finish(self, card: ProgressCard) -> bool:
        """Record and deliver the final state; clear the status line. True when delivered.

        Call it shielded: it must run even when the turn was cancelled. Idempotent.
        """
        assert card.is_final
        self.show(card)
        delivered = False
        try:
            async with asyncio.timeout(self._options.final_timeout_s):
                delivered = await self._flush()
        except TimeoutError:
            log.warning("final card of %s not delivered yet: left to the reaper", card.turn_id)
        finally:
            if not delivered and self._claimed is card:
                await self._hand_over()
            await self._clear_status()
        return delivered

    async def _hand_over(self) -> None:
        try:
            await self._record.drop_delivery()
        except AgentError as exc:
            log.warning("final card left to the reaper's stale-delivery check: %s", exc)

    async def _flush(self) -> bool:
        """Send the latest state, retrying throttles and outages. True when it was shown.

        Each state is claimed in the card record once (the fence), then delivered until the
        platform takes it, is refused for good, or a newer live state replaces it.
        """
        while True:
            checkpoint()
            card = self._desired
            if card is None:
                return True
            self._changed.clear()
            try:
                if card is not self._claimed:
                    if not await self._record.claim(self._token, card):
                        log.info("card update for %s refused by the fence", card.turn_id)
                        return False
                    self._claimed = card
                await self._send(card)
                return True
            except PlatformRateLimited as exc:
                await asyncio.sleep(exc.retry_after_s)
            except PlatformUnavailable as exc:
                log.info("card update failed (%s); retrying", exc)
                await asyncio.sleep(self._options.retry_s)
            except (PlatformError, AgentError) as exc:
                log.warning("card update not made: %s", exc)
                return False
            except Exception:  # a card that cannot be shown must never end the analysis
                log.exception("card update failed unexpectedly")
                return False

    async def _send(self, card: ProgressCard) -> None:
        await self._deliver(card)
        self._last_sent = time.monotonic()
        self.sent += 1
        if card.is_final:
            await self._record.mark_delivered()
        else:
            await self._heal()

    async def _deliver(self, card: ProgressCard) -> None:
        if self._ref is not None:
            try:
                await self._platform.update_card(self._ref, card)
                return
            except CardGone:
                log.warning("card %s was deleted; posting anew", self._ref.message_id)
                self._ref = None
                if not card.is_final:
                    return  # the run goes on; its final answer is posted as a new message
        self._ref = await self._platform.post_card(self._target, card)
        await self._record.set_message(self._ref.message_id)

    async def _heal(self) -> None:
        """After a live update: if a final (or a newer writer) landed meanwhile, re-send it."""
        stored = await self._record.read()
        raced = stored.get("final") == "1" or int(stored.get("token") or "0") > self._token
        if raced and stored.get("state") and self._ref is not None:
            final = ProgressCard.from_json(stored["state"])
            if final.is_final:
                await self._platform.update_card(self._ref, final)

    async def _deliver_leftover(self) -> None:
        """Show a previous analysis's final state that its worker could not deliver.

        Attaching starts a new record for the session; without this, a final recorded during a
        platform outage would be forgotten with the old record (the reaper delivers it later
        otherwise). Best effort: a failure here is logged, and the new analysis goes on.
        """
        try:
            fields = await self._record.read()
            if fields.get("final") != "1" or fields.get("delivered") == "1":
                return
            if not fields.get("state") or not fields.get("message_id"):
                return
            if not await self._record.take_delivery(stale_s=0):
                return
            ref = CardRef(self._target.platform, fields.get("channel", ""), fields["message_id"])
            await self._platform.update_card(ref, ProgressCard.from_json(fields["state"]))
            await self._record.mark_delivered()
        except Exception as exc:
            log.warning("a previous final card could not be delivered: %s", exc)

    async def _refresh_status(self, card: ProgressCard, *, force: bool = False) -> None:
        if card.is_final:
            return
        now = time.monotonic()
        if not force and now - self._status_at < self._options.status_refresh_s:
            return
        text = "is stopping…" if card.status is CardStatus.STOPPING else "is investigating…"
        try:
            await self._platform.set_status(self._target, text)
            self._status_at, self._status_shown = now, True
        except PlatformError as exc:
            log.info("status line not set: %s", exc)

    async def clear_status(self) -> None:
        """Clear the status line (every exit path of an analysis ends with this)."""
        await self._clear_status()

    async def _clear_status(self) -> None:
        if not self._status_shown:
            return
        try:
            await self._platform.set_status(self._target, "")
            self._status_shown = False
        except PlatformError as exc:
            log.warning("status line not cleared: %s", exc)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
