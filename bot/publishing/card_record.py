"""The card record: the durable state of a session's progress card in Redis (`BotKeys.card`).

One hash per session (kept `CARD_TTL_S`) says where the card is (`platform`, `channel`,
`thread`, `message_id`), the latest state shown or to be shown (`state`, a `ProgressCard` as
JSON), and who may write it. Writers are fenced by lease token and sequence:

- `token` is the fencing token of the lease whose holder writes the card; a claim with an older
  token is refused, so a paused zombie cannot overwrite its successor's card.
- `seq` counts accepted writes; the reaper's finalization lands only if nobody wrote since it
  read the record.
- `final` is `1` once a final state is recorded; no claim or finalization is accepted after it,
  so a final card stays final (the next analysis in the thread attaches a fresh record).
- `posting` is set while the card is being posted and not yet recorded (`begin_post`): the
  key it is posted with and when; a writer killed mid-post leaves it, and the next one looks
  for that card (`ChatPlatform.find_card`) instead of posting a second one.
- `delivered` says whether that final state reached the platform: `1`, `0`, or
  `sending:<unix time>` while a sender has it. A final not yet delivered is also named in the
  undelivered-finals index (`BotKeys.undelivered_cards`), which the reaper sweeps.
- A final card is shown again only as the same analysis's final card (`refinal`: its answer
  marked wrong), never reopened: only while the record is still the one its caller read
  (final, the same `seq` and `message_id`) and no sender holds an older state; the new state is
  then an undelivered final, which the reaper's sweep shows on the card's own message.

Each fenced check-and-write is one Lua script, so two writers never interleave inside one.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import redis.asyncio as aioredis

from agent_core import map_redis_errors, register_lua
from bot.keys import BotKeys
from bot.publishing.platform import CardTarget
from cards import ProgressCard

__all__ = ["CARD_TTL_S", "DELIVERY_STALE_S", "MARKED_BY_CHARS", "CardRecord", "Posting"]

CARD_TTL_S = 30 * 24 * 3600
DELIVERY_STALE_S = 60
"""A final state whose sender has not confirmed it within this long is sent again (reaper)."""
MARKED_BY_CHARS = 200
"""Longest name kept of who marked a card's answer wrong (the renderers show fewer)."""


@dataclass(frozen=True, slots=True)
class Posting:
    """A post of the card under way (`CardRecord.begin_post`)."""

    key: str
    """The card's key on the platform (`ChatPlatform.post_card`): 32 hex digits."""
    since: float
    """When the post was begun (epoch seconds)."""
    earlier: bool
    """An earlier writer began this post and never recorded its answer: it may be shown."""


class CardRecord:
    """Reads and writes the session's card record (`BotKeys.card`)."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys, session_id: str) -> None:
        self._redis = redis
        self.session_id = session_id
        self._key = keys.card(session_id)
        self._lease_key = keys.live_turn(session_id)
        self._undelivered = keys.undelivered_cards
        self._claim = register_lua(redis, "bot.publishing", "card_record_claim")
        self._attach = register_lua(redis, "bot.publishing", "card_record_attach")
        self._abandon = register_lua(redis, "bot.publishing", "card_record_abandon")
        self._take_delivery = register_lua(redis, "bot.publishing", "card_record_take_delivery")
        self._drop_delivery = register_lua(redis, "bot.publishing", "card_record_drop_delivery")
        self._refinal = register_lua(redis, "bot.publishing", "card_record_refinal")

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

    async def refinal(self, final: ProgressCard, *, seq: str, message_id: str) -> bool:
        """Record `final`, a new state of the final card read at `seq` on `message_id`.

        Refused (False) when the record changed since it was read (a write, or a later analysis
        in the thread on a message of its own), is not final, or a sender holds an older state.
        On success the state is an undelivered final: the reaper's next sweep shows it.

        Raises:
            StoreError: Redis failed.
        """
        assert final.is_final
        with map_redis_errors("record a final card again"):
            done = await self._refinal(
                keys=[self._key, self._undelivered],
                args=[self.session_id, final.to_json(), seq, message_id],
            )
        return bool(done)

    async def show_marked_wrong(self, turn_id: str, who: str) -> bool:
        """Show the final card of `turn_id` with its answer marked wrong by `who` (`refinal`).

        Only the card this record holds is shown again, and only while it is that analysis's
        final, answered card nobody marked yet; a later analysis in the thread has a card of its
        own, which this never touches. False when nothing was recorded.

        Raises:
            StoreError: Redis failed.
        """
        fields = await self.read()
        if fields.get("final") != "1" or not fields.get("state"):
            return False
        try:
            card = ProgressCard.from_json(fields["state"])
        except ValueError:
            return False
        if card.turn_id != turn_id or not card.can_mark_wrong:
            return False
        marked = card.evolve(marked_wrong_by=who[:MARKED_BY_CHARS])
        seq, message_id = fields.get("seq", ""), fields.get("message_id", "")
        return await self.refinal(marked, seq=seq, message_id=message_id)

    async def take_delivery(self, stale_s: float = DELIVERY_STALE_S) -> bool:
        """Take the delivery of the recorded final state, unless another is sending it."""
        with map_redis_errors("take card delivery"):
            return bool(await self._take_delivery(keys=[self._key], args=[int(stale_s)]))

    async def drop_delivery(self) -> None:
        """Give up delivering the recorded final for now (a reaper sweep will retry it)."""
        with map_redis_errors("drop card delivery"):
            await self._drop_delivery(keys=[self._key])

    async def begin_post(self) -> Posting:
        """Record that the card is being posted, before the post: the key to post it with.

        A writer killed after the platform took its post but before `set_message` leaves the
        mark; whoever posts the card next (a worker that took over, the reaper) is given the
        same key with `earlier` set, so it looks for that post before posting another.
        """
        mark = f"{uuid.uuid4().hex} {time.time():.3f}"
        with map_redis_errors("record card post"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hsetnx(self._key, "posting", mark)
                pipe.hget(self._key, "posting")
                _, stored = await pipe.execute()
        stored = _text(stored or mark)
        key, _, at = stored.partition(" ")
        try:
            since = float(at)
        except ValueError:
            since = 0.0
        return Posting(key=key, since=since, earlier=stored != mark)

    async def set_message(self, message_id: str) -> None:
        """Record where the card was posted (and that no post is under way any more)."""
        with map_redis_errors("record card"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._key, "message_id", message_id)
                pipe.hdel(self._key, "posting")
                await pipe.execute()

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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
