"""The queue: where an accepted event goes, written once, atomically, before the webhook answers.

Every route is one Lua script that first checks the event's dedupe markers (the platform event
id, and for messages the (channel, message id) pair, since Slack sends `app_mention` and
`message` for one mention), then writes, then sets the markers. Nothing is marked seen unless
it was written, so a delivery that failed before its write (Redis down → 503) is processed when
the platform retries (RELIABILITY S10); two concurrent deliveries cannot both write (S9).

Routes:
- `start`: a turn job on the turns stream (read by workers through a consumer group), and the
  turn id in the session's open-turns set.
- `steer`: a steer message on the session's steer queue (what the runtime probes at a cut) and
  a ring of the session's bell.
- `stop`: a tombstone for every open turn of the session (queued ones never start; the live one
  stops at once) and a ring per turn; a card button names its turn, which is tombstoned even if
  its start has not arrived yet. The stop's platform time is kept a day: a start request sent
  before it, whose delivery arrives after it (a platform retry), never starts.
- `queue`: the message waits in the session's inbox for the next turn (it never cuts one).
- `approve`: the decision waits for the session's worker.

Payloads are JSON validated by pydantic models, never pickle.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError, ResponseError

from agent_core import UserKind, UserMessage, dump_message
from agent_core.interrupts import BELL_TTL_S, TOMBSTONE_TTL_S
from bot.errors import QueueUnavailable
from bot.events import ChatEvent
from bot.keys import BotKeys

__all__ = ["DEDUPE_TTL_S", "Queue", "Route", "SessionState", "Submitted", "TurnJob", "turn_id_for"]

DEDUPE_TTL_S = 24 * 3600
"""Dedupe markers live 24 h: Feishu redelivers up to 4 times over about 7 h."""

_SUBMIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return {0, ''} end
if KEYS[2] ~= KEYS[1] and redis.call('EXISTS', KEYS[2]) == 1 then return {0, ''} end
local route, ttl, payload = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local result = ''
local sent_at = tonumber(ARGV[9])
if route == 'start' then
  local stopped_at = tonumber(redis.call('GET', KEYS[9]) or '0')
  if sent_at > 0 and sent_at <= stopped_at then
    redis.call('SET', KEYS[1], '1', 'EX', ttl)
    redis.call('SET', KEYS[2], '1', 'EX', ttl)
    return {1, 'stopped-before-start'}
  end
  result = redis.call('XADD', KEYS[3], '*', 'job', payload)
  redis.call('SADD', KEYS[4], ARGV[4])
  redis.call('EXPIRE', KEYS[4], ARGV[6])
elseif route == 'steer' then
  redis.call('RPUSH', KEYS[5], payload)
  redis.call('EXPIRE', KEYS[5], ARGV[6])
  redis.call('RPUSH', KEYS[6], 'steer')
  redis.call('EXPIRE', KEYS[6], ARGV[8])
elseif route == 'stop' then
  if sent_at > tonumber(redis.call('GET', KEYS[9]) or '0') then
    redis.call('SET', KEYS[9], ARGV[9], 'EX', ARGV[6])
  end
  local turns = redis.call('SMEMBERS', KEYS[4])
  if ARGV[4] ~= '' and redis.call('SISMEMBER', KEYS[4], ARGV[4]) == 0 then
    table.insert(turns, ARGV[4])
  end
  for _, turn in ipairs(turns) do
    redis.call('SET', ARGV[5] .. turn, ARGV[7], 'EX', ARGV[6])
    redis.call('RPUSH', KEYS[6], 'stop:' .. turn)
  end
  redis.call('EXPIRE', KEYS[6], ARGV[8])
  result = tostring(#turns)
elseif route == 'queue' then
  redis.call('RPUSH', KEYS[7], payload)
  redis.call('EXPIRE', KEYS[7], ARGV[6])
elseif route == 'approve' then
  redis.call('RPUSH', KEYS[8], payload)
  redis.call('EXPIRE', KEYS[8], ARGV[6])
else
  return redis.error_reply('unknown route ' .. route)
end
redis.call('SET', KEYS[1], '1', 'EX', ttl)
redis.call('SET', KEYS[2], '1', 'EX', ttl)
return {1, result}
"""


class Route(StrEnum):
    """Where an accepted event is written."""

    START = "start"
    STEER = "steer"
    STOP = "stop"
    QUEUE = "queue"
    APPROVE = "approve"


class TurnJob(BaseModel):
    """One turn to run, as it travels on the turns stream."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn_id: str
    session_id: str
    event: ChatEvent
    enqueued_at: datetime = Field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class SessionState:
    """What the policy needs to know about a session."""

    live: bool
    """A turn of the session is running on a worker."""
    queued: bool
    """Turns wait in the queue and none is running."""
    known: bool
    """The bot has a session in this thread (history, or turns open)."""


@dataclass(frozen=True, slots=True)
class Submitted:
    """What `Queue.submit` did."""

    accepted: bool
    """False when the event was a duplicate (already written once)."""
    entry_id: str = ""
    """The turns-stream entry id of a started turn."""
    stopped_turns: int = 0
    """How many turns a stop tombstoned."""
    cancelled: bool = False
    """A start that a later stop had already cancelled (it was sent before the stop)."""


def turn_id_for(event: ChatEvent) -> str:
    """The turn id of the turn an event starts: derived from the event, so retries agree."""
    return f"turn-{event.platform}-{event.event_id}"


class Queue:
    """Writes accepted events to Redis (the producer side of the turns stream)."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys | None = None) -> None:
        self._redis = redis
        self._keys = keys or BotKeys()
        self._submit = redis.register_script(_SUBMIT)

    @property
    def keys(self) -> BotKeys:
        """The key names in use."""
        return self._keys

    async def ensure_group(self) -> None:
        """Create the workers' consumer group (and the stream) if missing."""
        try:
            await self._redis.xgroup_create(
                self._keys.turns_stream, self._keys.turns_group, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise QueueUnavailable(f"cannot create consumer group: {exc}") from exc
        except RedisError as exc:
            raise QueueUnavailable(f"cannot create consumer group: {exc}") from exc

    async def submit(self, event: ChatEvent, route: Route, *, stop_turn: str = "") -> Submitted:
        """Write one accepted event for `route`, exactly once per event and message."""
        k, session = self._keys, event.session_id
        message_key = (
            k.seen_message(event.platform, event.channel, event.message_id)
            if event.message_id
            else k.seen_event(event.platform, event.event_id)
        )
        keys = [
            k.seen_event(event.platform, event.event_id),
            message_key,
            k.turns_stream,
            k.open_turns(session),
            k.session.steers(session),
            k.session.bell(session),
            k.inbox(session),
            k.approvals(session),
            k.stopped_at(session),
        ]
        turn_id = stop_turn if route is Route.STOP else turn_id_for(event)
        args: list[str | int] = [
            route.value,
            DEDUPE_TTL_S,
            _payload(event, route, turn_id),
            turn_id,
            k.session.tombstone(session, ""),
            TOMBSTONE_TTL_S,
            event.author_name or event.author,
            BELL_TTL_S,
            repr(event.sent_at),
        ]
        try:
            written, result = await self._submit(keys=keys, args=args)
        except RedisError as exc:
            raise QueueUnavailable(f"cannot write the event: {exc}") from exc
        if not written:
            return Submitted(accepted=False)
        text = result.decode() if isinstance(result, bytes) else str(result)
        if route is Route.START:
            if text == "stopped-before-start":
                return Submitted(accepted=True, cancelled=True)
            return Submitted(accepted=True, entry_id=text)
        if route is Route.STOP:
            return Submitted(accepted=True, stopped_turns=int(text))
        return Submitted(accepted=True)

    async def session_state(self, session_id: str) -> SessionState:
        """Read what the policy needs to know about a session, in one round trip."""
        k = self._keys
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.exists(k.live_turn(session_id))
                pipe.scard(k.open_turns(session_id))
                pipe.exists(k.session.history(session_id))
                live, open_turns, history = await pipe.execute()
        except RedisError as exc:
            raise QueueUnavailable(f"cannot read the session state: {exc}") from exc
        return SessionState(
            live=bool(live),
            queued=bool(open_turns) and not live,
            known=bool(live or open_turns or history),
        )


def _payload(event: ChatEvent, route: Route, turn_id: str) -> str:
    if route is Route.START:
        return TurnJob(turn_id=turn_id, session_id=event.session_id, event=event).model_dump_json()
    if route is Route.STEER:
        steer = UserMessage(
            content=event.text, author=event.author_name or event.author, kind=UserKind.STEER
        )
        return dump_message(steer)
    return event.model_dump_json()
