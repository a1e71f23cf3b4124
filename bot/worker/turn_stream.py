"""The workers' side of the turns stream: read, take over, count deliveries, acknowledge.

Redis's own `XACK` checks no owner (docs/design.md §Platform facts): a worker paused past its lease
(a "zombie") would acknowledge an entry that another worker took over and is still running. So the
acknowledgement of a job's entry is one script that first checks the session's lease still
carries the acknowledging worker's fencing token (docs/reliability.md Q5). Done entries are deleted,
not just acknowledged, so the stream holds only work not yet done (Q10).

`XAUTOCLAIM` also reports entries that were deleted while pending (trimmed by an operator, or
lost in a Redis failover) and drops them from the pending list. Their job is gone; the reaper
finalizes the session's card once its lease has expired (Q9), so here they are only logged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from agent_core import map_redis_errors, register_lua
from bot.keys import BotKeys
from bot.state.lease import Lease

__all__ = ["DEAD_LETTER_MAXLEN", "Entry", "TurnStream"]

log = logging.getLogger(__name__)

DEAD_LETTER_MAXLEN = 10_000
"""The dead-letter stream is trimmed (approximately) to this many entries."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of the turns stream."""

    id: str
    fields: dict[bytes, bytes]


class TurnStream:
    """Reads and acknowledges turn entries for the consumer group."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys) -> None:
        self._redis = redis
        self._keys = keys
        self._ack = register_lua(redis, "bot.worker", "turn_stream_ack")
        self._cursor = "0-0"

    async def read(self, consumer: str, block_ms: int) -> list[Entry]:
        """New entries for `consumer` (at most one), waiting up to `block_ms` for one."""
        k = self._keys
        with map_redis_errors("read turns"):
            reply: Any = await self._redis.xreadgroup(
                k.turns_group, consumer, {k.turns_stream: ">"}, count=1, block=block_ms
            )
        entries: list[Entry] = []
        for _stream, items in reply or []:  # RESP2: [[stream, [(id, fields), ...]]]
            entries.extend(Entry(_text(entry_id), dict(fields)) for entry_id, fields in items)
        return entries

    async def claim_idle(self, consumer: str, min_idle_ms: int) -> tuple[list[Entry], bool]:
        """Take over (at most one) entry pending longer than `min_idle_ms` on any consumer.

        `XAUTOCLAIM` is lock-free and atomic: of two workers claiming at once exactly one gets
        an entry (docs/reliability.md Q6), and a claimer that dies leaves nothing held (Q4). Each
        call scans a bounded part of the pending list and goes on where the last one stopped, so
        an abandoned entry behind many live ones is reached too. Returns the entries and
        whether the scan went through the whole list.
        """
        k = self._keys
        with map_redis_errors("reclaim turns"):
            reply: Any = await self._redis.xautoclaim(
                k.turns_stream,
                k.turns_group,
                consumer,
                min_idle_time=min_idle_ms,
                start_id=self._cursor,
                count=1,
            )
        self._cursor = _text(reply[0])
        deleted = reply[2] if len(reply) > 2 else []
        for entry_id in deleted:
            log.warning(
                "turn entry %s was deleted while pending: its job is lost, and its card is "
                "finalized once its lease expires",
                _text(entry_id),
            )
        claimed = [Entry(_text(entry_id), dict(fields)) for entry_id, fields in reply[1] if fields]
        return claimed, self._cursor == "0-0"

    async def keep(self, consumer: str, entry_id: str) -> None:
        """Reset the entry's idle time while its job runs (or waits for its session's lease).

        `XCLAIM … JUSTID` with no minimum idle time: the entry stays `consumer`'s and its
        delivery count is unchanged, so a long job is neither taken over (docs/reliability.md Q8)
        nor counted towards the dead letters by the takeover attempts of idle workers.
        """
        k = self._keys
        with map_redis_errors("keep turn"):
            await self._redis.xclaim(
                k.turns_stream, k.turns_group, consumer, 0, [entry_id], justid=True
            )

    async def give_back(self, consumer: str, entry_id: str) -> None:
        """Undo the count of a takeover that did not happen: the session is busy.

        `XAUTOCLAIM` counts a delivery before the claimer can see the session's lease; an
        entry waiting behind a long analysis of its session, or one whose worker lives, would
        otherwise collect deliveries it never ran and be dead-lettered for nothing.
        """
        k = self._keys
        delivered = await self.deliveries(entry_id)
        if delivered > 1:
            with map_redis_errors("give turn back"):
                await self._redis.xclaim(
                    k.turns_stream,
                    k.turns_group,
                    consumer,
                    0,
                    [entry_id],
                    retrycount=delivered - 1,
                    justid=True,
                )

    async def deliveries(self, entry_id: str) -> int:
        """How many times the entry was delivered; 0 when it is no longer pending."""
        k = self._keys
        with map_redis_errors("read pending turns"):
            pending: Any = await self._redis.xpending_range(
                k.turns_stream, k.turns_group, min=entry_id, max=entry_id, count=1
            )
        return int(pending[0]["times_delivered"]) if pending else 0

    async def ack(self, entry_id: str, lease: Lease) -> bool:
        """Acknowledge and delete the entry while `lease` still holds its session.

        Returns False (and changes nothing) when the lease moved on: the entry is then the
        new holder's to acknowledge.
        """
        k = self._keys
        with map_redis_errors("ack turn"):
            done = await self._ack(
                keys=[k.live_turn(lease.session_id), k.turns_stream],
                args=[lease.token, k.turns_group, entry_id],
            )
        return bool(done)

    async def drop(self, entry_id: str) -> None:
        """Acknowledge and delete an entry no worker can run (it holds no job)."""
        k = self._keys
        with map_redis_errors("drop turn"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.xack(k.turns_stream, k.turns_group, entry_id)
                pipe.xdel(k.turns_stream, entry_id)
                await pipe.execute()

    async def dead_letter(self, entry: Entry, deliveries: int) -> None:
        """Copy the entry to the dead-letter stream, with its id and delivery count."""
        fields: dict[Any, Any] = {**entry.fields, b"entry": entry.id, b"deliveries": deliveries}
        with map_redis_errors("dead-letter"):
            await self._redis.xadd(
                self._keys.dead_letters, fields, maxlen=DEAD_LETTER_MAXLEN, approximate=True
            )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
