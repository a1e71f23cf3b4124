"""Replay pages by turn id: what the ingress serves at `GET /runs/{turn_id}`.

`chatops replay TURN` finds the analysis the same way: the turn id names the session through
`RunIndex` (`bot.state.runs`), whose audit the page is drawn from.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.keys import BotKeys
from bot.ops.replay_html import render_html
from bot.state.audit import read_audit
from bot.state.runs import RunIndex

__all__ = ["replay_page"]


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
