"""Follow-ups: the Redis bookkeeping of the turns that follow one another in an analysis.

An analysis runs as a chain of turns (`bot.analysis.turn_chain`); each turn after the first is a
follow-up the chain opens itself. This module owns what Redis records about them:

- Opening a follow-up puts it in the session's open turns and in its follow-ups set (the reaper
  settles a follow-up whose worker is gone: it was never in the stream), and carries a stop that
  tombstoned the current turn over to it. It is one script: a stop (which tombstones every open
  turn) either finds the follow-up open or is carried over to it.
- Handing a drained chain over puts its continuation in the open turns and on the turns stream,
  in one script fenced by the lease, for any worker to resume.
- What a follow-up starts from: the steers queued at the cut (read, not taken: the runtime's
  `begin_turn` absorbs them) and the session's inbox (taken).
- Whether a turn was tombstoned, that is, stopped before it started.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from agent_core import (
    TOMBSTONE_TTL_S,
    TURN_KEY_TTL_S,
    UserKind,
    UserMessage,
    load_message,
    map_redis_errors,
    register_lua,
)
from bot.events import ChatEvent
from bot.keys import BotKeys
from bot.state.lease import Lease, LeaseLost
from bot.state.turn_jobs import TurnJob

__all__ = ["AWAITING_TTL_S", "Followups"]

AWAITING_TTL_S = TURN_KEY_TTL_S
"""How long an analysis waiting for approvals keeps its parked continuation: as long as the
suspended batch itself (a request expires long before, `CHATOPS_APPROVAL_TIMEOUT_S`)."""


class Followups:
    """Reads and writes the follow-up bookkeeping of every session of a worker."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys) -> None:
        self._redis = redis
        self._keys = keys
        self._open = register_lua(redis, "bot.state", "followups_open_turn")
        self._hand_over = register_lua(redis, "bot.state", "followups_hand_over")
        self._await = register_lua(redis, "bot.state", "followups_await")
        self._stop_waiting = register_lua(redis, "bot.state", "followups_stop_waiting")

    async def tombstoned(self, job: TurnJob) -> bool:
        """Whether the job's turn was stopped before it started."""
        key = self._keys.session.tombstone(job.session_id, job.turn_id)
        with map_redis_errors("read tombstone"):
            return bool(await self._redis.exists(key))

    async def open(self, session_id: str, current: str, next_turn: str) -> None:
        """Open a follow-up turn (the reaper knows it as one), carrying a stop over to it."""
        k = self._keys
        with map_redis_errors("open turn"):
            await self._open(
                keys=[
                    k.open_turns(session_id),
                    k.followups(session_id),
                    k.session.tombstone(session_id, current),
                    k.session.tombstone(session_id, next_turn),
                ],
                args=[next_turn, TOMBSTONE_TTL_S],
            )

    async def hand_over(self, job: TurnJob, lease: Lease) -> None:
        """Queue `job`, the continuation of a drained chain, for any worker to resume.

        Raises:
            LeaseLost: `lease` no longer holds the session (nothing was queued).
        """
        k = self._keys
        with map_redis_errors("hand over"):
            queued = await self._hand_over(
                keys=[k.live_turn(job.session_id), k.open_turns(job.session_id), k.turns_stream],
                args=[lease.token, job.turn_id, job.model_dump_json()],
            )
        if not queued:
            raise LeaseLost(
                f"hand-over fenced (token {lease.token} is stale)",
                session_id=job.session_id,
                turn_id=job.turn_id,
            )

    async def await_decisions(self, job: TurnJob, lease: Lease, suspended_turn: str) -> None:
        """Open `job`, the continuation of an analysis suspended for approvals; park its job.

        The desk queues it once every request is decided; a redirect or a stop queues it at
        once (`bot.intake.queue`).

        Raises:
            LeaseLost: `lease` no longer holds the session (nothing was written).
        """
        k, session = self._keys, job.session_id
        with map_redis_errors("await approvals"):
            parked = await self._await(
                keys=[
                    k.live_turn(session),
                    k.open_turns(session),
                    k.session.tombstone(session, suspended_turn),
                    k.session.tombstone(session, job.turn_id),
                    k.session.approvals(session),
                    k.awaiting(session),
                    k.turns_stream,
                    k.session.continuation(session),
                    k.session.steers(session),
                ],
                args=[
                    lease.token,
                    job.turn_id,
                    AWAITING_TTL_S,
                    job.model_dump_json(),
                    suspended_turn,
                ],
            )
        if not parked:
            raise LeaseLost(
                f"awaiting fenced (token {lease.token} is stale)",
                session_id=job.session_id,
                turn_id=job.turn_id,
            )

    async def stop_waiting(self, session_id: str, by: str) -> list[str]:
        """Stop the session's analysis that waits holding no lease; the turns tombstoned."""
        k = self._keys
        with map_redis_errors("stop a waiting analysis"):
            turns: list[bytes | str] = await self._stop_waiting(
                keys=[
                    k.open_turns(session_id),
                    k.awaiting(session_id),
                    k.turns_stream,
                    k.session.bell(session_id),
                ],
                args=[k.session.tombstone(session_id, ""), by, TOMBSTONE_TTL_S],
            )
        return [t.decode() if isinstance(t, bytes) else t for t in turns]

    async def peek_steers(self, session_id: str) -> list[tuple[str, str]]:
        """The steers queued for the session, as (author, text), left in place."""
        with map_redis_errors("read steers"):
            raw = await self._redis.lrange(self._keys.session.steers(session_id), 0, -1)
        steers = [load_message(item) for item in raw]
        return [(m.author or "someone", m.content) for m in steers if isinstance(m, UserMessage)]

    async def take_inbox(self, session_id: str) -> list[UserMessage]:
        """Messages queued for the session's next turn (sub-agent reports, scheduled notes)."""
        key = self._keys.inbox(session_id)
        with map_redis_errors("take inbox"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.lrange(key, 0, -1)
                pipe.delete(key)
                raw, _ = await pipe.execute()
        events = [ChatEvent.model_validate_json(item) for item in raw]
        return [
            UserMessage(content=e.text, author=e.author_name or e.author, kind=UserKind.NOTICE)
            for e in events
        ]
