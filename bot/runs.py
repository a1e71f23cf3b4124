"""Replay pages by turn id: what the ingress serves at `GET /runs/{turn_id}` (issue 9).

A card links to its analysis by the turn id that started it, but the audit is kept per session.
`RunIndex` maps that turn id to its session: the worker writes it when it opens the analysis's
card, with the audit's retention as its expiry, so a page outlives neither its audit nor its
purpose. `chatops replay TURN` finds the analysis the same way.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from agent_core.store import map_redis_errors
from bot.audit import DEFAULT_RETENTION_S, read_audit
from bot.keys import BotKeys
from bot.replay_html import render_html

__all__ = ["RunIndex", "replay_page"]


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


async def replay_page(
    redis: aioredis.Redis, turn_id: str, keys: BotKeys | None = None
) -> str | None:
    """The replay page of the analysis `turn_id` starts; None when it has no audit.

    Raises:
        StoreError: Redis failed.
    """
    session = await RunIndex(redis, keys).session_of(turn_id)
    if session is None:
        return None
    events = await read_audit(redis, session, turn_id, keys)
    return render_html(events) if events else None
