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

from agent_core import UserKind, UserMessage, load_message
from agent_core.interrupts import TOMBSTONE_TTL_S
from agent_core.store import TURN_KEY_TTL_S, map_redis_errors
from bot.events import ChatEvent
from bot.keys import BotKeys
from bot.state.lease import Lease, LeaseLost
from bot.state.turn_jobs import TurnJob

__all__ = ["AWAITING_TTL_S", "Followups"]

AWAITING_TTL_S = TURN_KEY_TTL_S
"""How long an analysis waiting for approvals keeps its parked continuation: as long as the
suspended batch itself (a request expires long before, `CHATOPS_APPROVAL_TIMEOUT_S`)."""

# KEYS: open turns, follow-ups, the current turn's tombstone, the next turn's tombstone.
# ARGV: next turn, tombstone ttl.
_OPEN_TURN = """
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
local stop = redis.call('GET', KEYS[3])
if stop then redis.call('SET', KEYS[4], stop, 'EX', ARGV[2]) end
return 1
"""


# KEYS: the session's lease, open turns, the turns stream. ARGV: fencing token, turn, job.
# Queues the continuation only while the lease still carries the token: a worker whose lease
# was taken over must not queue a second runner of the analysis (RELIABILITY Q5).
_HAND_OVER = """
local held = redis.call('GET', KEYS[1])
if not held or string.match(held, '^(%d+)|') ~= ARGV[1] then return 0 end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('XADD', KEYS[3], '*', 'job', ARGV[3])
return 1
"""


# KEYS: the session's lease, open turns, the suspended turn's tombstone, the continuation's
# tombstone, the approvals hash, the awaiting job, the turns stream, the continuation marker,
# the steer queue. ARGV: fencing token, continuation turn, ttl, job, suspended turn.
# Opens the continuation of an analysis suspended for approvals and parks its job until the
# desk queues it, fenced like a hand-over. Done once: a re-run of the suspended turn finds the
# continuation marker and changes nothing. A stop that came first (carried over like `open`),
# a redirect already queued, or requests already decided (an expiry in between) queue it at
# once: nobody else would. The continuation is not a follow-up: once queued it is a stream
# job like any other, taken over from the stream if its worker dies.
_AWAIT = """
local held = redis.call('GET', KEYS[1])
if not held or string.match(held, '^(%d+)|') ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[8]) == 1 then return 3 end
redis.call('SET', KEYS[8], ARGV[2], 'EX', ARGV[3])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
local stop = redis.call('GET', KEYS[3])
if stop then redis.call('SET', KEYS[4], stop, 'EX', ARGV[3]) end
local waiting = false
for _, value in ipairs(redis.call('HVALS', KEYS[5])) do
  local a = cjson.decode(value)
  if a['turn_id'] == ARGV[5] and a['verdict'] == 'pending' then waiting = true end
end
if stop or not waiting or redis.call('LLEN', KEYS[9]) > 0 then
  redis.call('XADD', KEYS[7], '*', 'job', ARGV[4])
  return 2
end
redis.call('SET', KEYS[6], ARGV[4], 'EX', ARGV[3])
return 1
"""


# KEYS: open turns, the parked continuation job, the turns stream, the bell.
# ARGV: the tombstone key prefix (the key of turn ""), who stopped, tombstone ttl.
# Stops an analysis that waits holding no lease (for approvals, sub-agents or a parent's
# answer): its open turns are tombstoned and rung, and its parked continuation is queued, so
# it runs, answers what waits "interrupted" and ends without the model. Returns the turns.
_STOP_WAITING = """
local turns = redis.call('SMEMBERS', KEYS[1])
for _, turn in ipairs(turns) do
  redis.call('SET', ARGV[1] .. turn, ARGV[2], 'EX', ARGV[3])
  redis.call('RPUSH', KEYS[4], 'stop:' .. turn)
end
local job = redis.call('GET', KEYS[2])
if job then
  redis.call('XADD', KEYS[3], '*', 'job', job)
  redis.call('DEL', KEYS[2])
end
return turns
"""


class Followups:
    """Reads and writes the follow-up bookkeeping of every session of a worker."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys) -> None:
        self._redis = redis
        self._keys = keys
        self._open = redis.register_script(_OPEN_TURN)
        self._hand_over = redis.register_script(_HAND_OVER)
        self._await = redis.register_script(_AWAIT)
        self._stop_waiting = redis.register_script(_STOP_WAITING)

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
            raise LeaseLost(f"hand-over of {job.turn_id} fenced (token {lease.token} is stale)")

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
            raise LeaseLost(f"awaiting {job.turn_id} fenced (token {lease.token} is stale)")

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
