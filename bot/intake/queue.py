"""The queue: where an accepted event goes, written once, atomically, before the webhook answers.

Every route is one Lua script that first checks the event's dedupe markers (the platform event
id, and for messages the (channel, message id) pair, since Slack sends `app_mention` and
`message` for one mention), then writes, then sets the markers. Nothing is marked seen unless
it was written, so a delivery that failed before its write (Redis down → 503) is processed when
the platform retries (docs/reliability.md S10); two concurrent deliveries cannot both write (S9).

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
- `approve`: the press is kept in the session's approval presses (the desk,
  `bot.control.approval_desk`, decides it right after).
- `killswitch`: nothing is written but the dedupe markers; the ingress then carries the admin
  command out (`bot.control.killswitch`), and forgets the markers (`Queue.forget`) if it could
  not, so the platform's retry carries it out instead.

A start, a steer and a queued message also add their author (`ChatEvent.person`) to the
session's participants, in the same step that accepts them, so no one who shaped the analysis
can be missed when the approval desk looks for a destructive call's second person (X11).
A steer and a stop also append who did it to the session's audit trail (`Trail`), and a stop
answers whether its session dispatched sub-agents, in the same call: the webhook's steer and
stop paths cost one round trip, and an event is never accepted without its audit entry.

Payloads are JSON validated by pydantic models, never pickle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core import (
    TOMBSTONE_TTL_S,
    TURN_KEY_TTL_S,
    SessionKey,
    UserKind,
    UserMessage,
    dump_message,
    register_lua,
)
from bot.errors import QueueUnavailable
from bot.events import ChatEvent
from bot.keys import BotKeys, BotSessionKey
from bot.process.redis_pool import replicated_call
from bot.process.script_batch import ScriptBatch
from bot.state.turn_jobs import TurnJob, ensure_group, turn_id_for

__all__ = [
    "DEDUPE_TTL_S",
    "Queue",
    "Route",
    "StateRoutes",
    "Submitted",
    "Trail",
    "TurnJob",
    "turn_id_for",
]

DEDUPE_TTL_S = 24 * 3600
"""Dedupe markers live 24 h: Feishu redelivers up to 4 times over about 7 h."""


def _submit_values() -> dict[str, object]:
    """The submit script's placeholders (`lua/queue_submit.lua`).

    The session key layout and the TTLs, each from its one definition.
    """
    layout = (
        SessionKey.HISTORY,
        SessionKey.BELL,
        SessionKey.STEERS,
        SessionKey.TOMBSTONE,
        BotSessionKey.OPEN_TURNS,
        BotSessionKey.STOPPED_AT,
        BotSessionKey.LIVE_TURN,
        BotSessionKey.INBOX,
        BotSessionKey.APPROVAL_PRESSES,
        BotSessionKey.AWAITING,
        BotSessionKey.PARTICIPANTS,
        BotSessionKey.AUDIT,
    )
    return {
        **{name.name: name.value for name in layout},
        "PARTICIPANTS_TTL": TURN_KEY_TTL_S,
        "KEEP": TOMBSTONE_TTL_S,
        "DEDUPE_TTL": DEDUPE_TTL_S,
    }


class Route(StrEnum):
    """Where an accepted event is written."""

    START = "start"
    STEER = "steer"
    STOP = "stop"
    QUEUE = "queue"
    APPROVE = "approve"
    KILL_SWITCH = "killswitch"


@dataclass(frozen=True, slots=True)
class Submitted:
    """What `Queue.submit` did."""

    accepted: bool
    """False when the event was a duplicate (already written once) or ignored."""
    route: Route | None = None
    """The route taken; None for a duplicate or an ignored event."""
    entry_id: str = ""
    """The turns-stream entry id of a started turn."""
    stopped_turns: int = 0
    """How many turns a stop tombstoned."""
    duplicate: bool = False
    """The event (or its message) was already written once."""
    cancelled: bool = False
    """A start that a later stop had already cancelled (it was sent before the stop)."""
    parent: bool = False
    """A stopped session dispatched sub-agents (their trees are to be stopped too)."""


@dataclass(frozen=True, slots=True)
class Trail:
    """Who steered or stopped, appended to the session's audit trail in the submit's own call.

    One round trip instead of two on the webhook's steer and stop paths (bench/ingress.py), and
    the event and its audit entry are written together or not at all.
    """

    steer: str
    """The JSON `bot.state.audit.AuditEvent` written if the event steers ("" for none)."""
    stop: str
    """The one written if it stops ("" for none)."""
    maxlen: int
    """The trail's approximate length cap (`XADD MAXLEN ~`)."""
    retention_s: int
    """The trail's expiry, refreshed by the write."""


class Queue:
    """Writes accepted events to Redis (the producer side of the turns stream)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys | None = None,
        *,
        replicas: int = 0,
        on_unreplicated: Callable[[], None] | None = None,
        batched: bool = False,
    ) -> None:
        """`replicas`: how many replicas must hold an event before `submit` returns.

        0 (the default): none, the primary's reply is enough. Otherwise the submit is followed by
        `WAIT` (`bot.process.redis_pool.replicated_call`); an event the replicas did not
        acknowledge in time is still accepted (the primary has it, as without the wait) and
        `on_unreplicated` is called (a metric). docs/reliability.md Q20, `bench/replica_wait.py`.

        `batched`: concurrent submits share one write and one read per turn of the event loop
        (`bot.process.script_batch`; the ingress's, which `aclose` then ends). Not with
        `replicas`, nor on a cluster's client or a single connection: those submit one by one.
        """
        self._redis = redis
        self._keys = keys or BotKeys()
        self._submit = register_lua(redis, "bot.intake", "queue_submit", **_submit_values())
        self._replicas = replicas
        self._on_unreplicated = on_unreplicated
        self._batch = (
            ScriptBatch(redis, self._submit)
            if batched
            and not replicas
            and isinstance(redis, aioredis.Redis)
            and not redis.single_connection_client
            else None
        )

    async def aclose(self) -> None:
        """Wait for the batched submits still in flight (see `batched`)."""
        if self._batch is not None:
            await self._batch.aclose()

    @property
    def keys(self) -> BotKeys:
        """The key names in use."""
        return self._keys

    async def ensure_group(self) -> None:
        """Create the workers' consumer group (and the stream) if missing."""
        await ensure_group(self._redis, self._keys)

    async def forget(self, event: ChatEvent) -> None:
        """Drop the dedupe markers of an event whose write had no effect, so a retry counts.

        Raises:
            QueueUnavailable: Redis did not answer.
        """
        try:
            await self._redis.delete(*self._markers(event))
        except RedisError as exc:
            raise QueueUnavailable(f"cannot forget the event: {exc}") from exc

    def _markers(self, event: ChatEvent) -> tuple[str, str]:
        """The event's dedupe markers: its delivery, and its message (or the delivery again)."""
        k = self._keys
        delivery = k.seen_event(event.platform, event.event_id)
        if not event.message_id:
            return delivery, delivery
        return delivery, k.seen_message(event.platform, event.channel, event.message_id)

    async def submit(
        self,
        event: ChatEvent,
        routes: StateRoutes,
        *,
        stop_turn: str = "",
        trail: Trail | None = None,
    ) -> Submitted:
        """Write one accepted event, exactly once per event and message, in one round trip.

        Args:
            event: The normalized event.
            routes: The route the policy chose for each state the session may be in; the
                script reads the state and takes the matching one (None: ignore).
            stop_turn: For a stop button, the turn it names (tombstoned even if not open).
            trail: The audit entries of a steer or a stop, written with it (None: none).
        """
        k, session = self._keys, event.session_id
        keys = [
            *self._markers(event),
            k.turns_stream,
            k.session.session_prefix(session),
            k.parents,
        ]
        used = set(routes)
        args: list[str | int] = [
            "|".join(route.value if route else "" for route in routes),
            _job(event) if Route.START in used else "",
            _steer(event) if Route.STEER in used else "",
            event.model_dump_json() if used & {Route.QUEUE, Route.APPROVE} else "",
            turn_id_for(event),
            stop_turn,
            event.author_name or event.author,
            repr(event.sent_at),
            event.person,
            trail.steer if trail else "",
            trail.stop if trail else "",
            trail.maxlen if trail else 0,
            trail.retention_s if trail else 0,
            session,
        ]
        try:
            if self._replicas:
                reply, acknowledged = await replicated_call(
                    self._redis, self._submit, keys, args, self._replicas
                )
                if acknowledged < self._replicas and self._on_unreplicated is not None:
                    self._on_unreplicated()
            elif self._batch is not None:
                reply = await self._batch(keys, args)
            else:
                reply = await self._submit(keys=keys, args=args)
            status, route, result, parent = reply
        except RedisError as exc:
            raise QueueUnavailable(f"cannot write the event: {exc}") from exc
        if status != 1:
            return Submitted(accepted=False, duplicate=status == 0)
        taken, text = Route(_text(route)), _text(result)
        if taken is Route.START:
            if text == "stopped-before-start":
                return Submitted(accepted=True, route=taken, cancelled=True)
            return Submitted(accepted=True, route=taken, entry_id=text)
        if taken is Route.STOP:
            stopped = int(text)
            return Submitted(accepted=True, route=taken, stopped_turns=stopped, parent=parent == 1)
        return Submitted(accepted=True, route=taken)


StateRoutes = tuple[Route | None, Route | None, Route | None, Route | None]
"""Routes for a session that is: unknown (no thread); known and idle; queued; live."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _job(event: ChatEvent) -> str:
    job = TurnJob(turn_id=turn_id_for(event), session_id=event.session_id, event=event)
    return job.model_dump_json()


def _steer(event: ChatEvent) -> str:
    author = event.author_name or event.author
    return dump_message(UserMessage(content=event.text, author=author, kind=UserKind.STEER))
