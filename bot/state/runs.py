"""Which session each analysis belongs to, by the turn id that started it.

A card links to its analysis by that turn id, but the audit is kept per session. The worker
writes the mapping when it opens the analysis's card, with the audit's retention as its expiry,
so a replay page outlives neither its audit nor its purpose (`bot.ops.runs`).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from agent_core import map_redis_errors
from bot.keys import BotKeys
from bot.state.audit import DEFAULT_RETENTION_S

__all__ = ["RunIndex"]


class RunIndex:
    """Which session each analysis (by its first turn id) belongs to."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys | None = None,
        *,
        ttl_s: int = DEFAULT_RETENTION_S,
    ) -> None:
        self._redis = redis
        self._keys = keys or BotKeys()
        self._ttl_s = ttl_s

    async def remember(self, turn_id: str, session_id: str) -> None:
        """Record the session of the analysis `turn_id` starts.

        Raises:
            StoreError: Redis failed.
        """
        with map_redis_errors("remember a run"):
            await self._redis.set(self._keys.run(turn_id), session_id, ex=self._ttl_s)

    async def session_of(self, turn_id: str) -> str | None:
        """The session of the analysis `turn_id` starts; None when unknown (or expired).

        Raises:
            StoreError: Redis failed.
        """
        with map_redis_errors("look a run up"):
            raw: bytes | str | None = await self._redis.get(self._keys.run(turn_id))
        if raw is None:
            return None
        return raw.decode() if isinstance(raw, bytes) else raw
