"""The incidents alerts open: a record per sender's group, its alerts taken in, its route's limit.

An incident is one sender's group (`AlertNotification.incident`: Alertmanager's and Grafana's
`groupKey`, PagerDuty's incident id), keyed by a digest of (sender, group) so a hostile group key
never reaches a key name. Its record says where its thread is and what became of it:

- `open`: its root message is posted and its analysis started (or, for a `notify` route, not);
- `held`: its route's hourly limit held it back; the record expires with the hour, so the
  sender's next repeat of the group opens it then;
- `resolved`: the sender said every alert of it resolved; a later firing of the same group with
  an alert not taken in before opens a new incident (and a new thread).

What a notification adds is decided against the set of alerts already taken in
(`fingerprint|startsAt`): a sender's retry and a repeat notification carry only known alerts and
add nothing. The dispatcher holds the incident's lock while it takes one notification in, so two
workers never post for the same incident at once; the lock expires, so a dead worker's
notification is taken in again by the next (a root message may then be posted twice on a
platform with no idempotency key, Slack; the analysis starts once, its start being deduplicated
on its event id).

A route's hourly limit (`CHATOPS_ALERT_MAX_PER_HOUR`) counts the incidents it opened in the last
hour (a sliding window: the count never resets all at once on the hour), each incident once,
whatever the retries. The scripts are `bot/state/lua/incident_*.lua`.
"""

from __future__ import annotations

import hashlib
import time
from enum import StrEnum

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from agent_core import map_redis_errors, register_lua
from bot.alerts import AlertSender
from bot.events import Platform
from bot.keys import BotKeys

__all__ = [
    "INCIDENT_TTL_S",
    "RATE_WINDOW_S",
    "IncidentBook",
    "IncidentRecord",
    "IncidentState",
    "incident_id",
]

INCIDENT_TTL_S = 30 * 24 * 3600
"""An incident's record outlives its last notification by this much."""
RATE_WINDOW_S = 3600
"""The window of a route's limit."""


class IncidentState(StrEnum):
    """What became of an incident (see the module docstring)."""

    OPEN = "open"
    HELD = "held"
    RESOLVED = "resolved"


class IncidentRecord(BaseModel):
    """One incident: its thread, its route, its state."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    """`incident_id(sender, group)`."""
    sender: AlertSender
    group: str
    """The sender's group key, capped (for operators; never a key name)."""
    state: IncidentState
    route: str
    platform: Platform
    channel: str
    workspace: str = ""
    thread: str = ""
    """The root message's id (Slack ts, Feishu message id): the analysis's thread."""
    root_link: str = ""
    alert_name: str = ""
    opened_at: float = 0.0
    resolved_at: float = 0.0
    analysis: bool = False
    """An analysis starts in its thread (not for a `notify` route)."""
    generation: str = ""
    """Which firing opened it (a digest of its alerts): its root's and analysis's key."""
    started: bool = True
    """False between its root message's post and its analysis's start: a retry finishes it."""


def incident_id(sender: AlertSender | str, group: str) -> str:
    """A short, key-safe id of one sender's group."""
    return hashlib.sha256(f"{sender}\x1f{group}".encode()).hexdigest()[:24]


class IncidentBook:
    """The incidents' records, their taken-in alerts, their locks and their routes' limits."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys) -> None:
        self._redis = redis
        self._keys = keys
        self._unlock = register_lua(redis, "bot.state", "incident_unlock")
        self._admit = register_lua(redis, "bot.state", "incident_admit")

    async def lock(self, incident: str, owner: str, ttl_s: float) -> bool:
        """Take the incident's lock for `ttl_s` seconds; False when another holds it."""
        with map_redis_errors("lock an incident"):
            taken = await self._redis.set(
                self._keys.incident_lock(incident), owner, nx=True, px=int(ttl_s * 1000)
            )
        return bool(taken)

    async def unlock(self, incident: str, owner: str) -> None:
        """Release the lock if `owner` still holds it (idempotent)."""
        with map_redis_errors("unlock an incident"):
            await self._unlock(keys=[self._keys.incident_lock(incident)], args=[owner])

    async def load(self, incident: str) -> IncidentRecord | None:
        """The incident's record, or None when it has none (or it expired)."""
        with map_redis_errors("read an incident"):
            raw = await self._redis.get(self._keys.incident(incident))
        return None if raw is None else IncidentRecord.model_validate_json(raw)

    async def save(self, record: IncidentRecord, *, ttl_s: int = INCIDENT_TTL_S) -> None:
        """Write the record (and keep its taken-in alerts as long)."""
        keys = self._keys
        with map_redis_errors("write an incident"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(keys.incident(record.id), record.model_dump_json(), ex=ttl_s)
                pipe.expire(keys.incident_seen(record.id), ttl_s)
                await pipe.execute()

    async def unseen(self, incident: str, alerts: list[str]) -> list[str]:
        """The alerts of `alerts` (`fingerprint|startsAt`) the incident has not taken in."""
        if not alerts:
            return []
        with map_redis_errors("read an incident's alerts"):
            known = await self._redis.smismember(self._keys.incident_seen(incident), alerts)
        return [a for a, seen in zip(alerts, known, strict=True) if not seen]

    async def take_in(self, incident: str, alerts: list[str], *, fresh: bool = False) -> None:
        """Record `alerts` as taken in; `fresh`: forget those of an earlier incident first."""
        key = self._keys.incident_seen(incident)
        with map_redis_errors("record an incident's alerts"):
            async with self._redis.pipeline(transaction=True) as pipe:
                if fresh:
                    pipe.delete(key)
                if alerts:
                    pipe.sadd(key, *alerts)
                pipe.expire(key, INCIDENT_TTL_S)
                await pipe.execute()

    async def admit(self, route: str, incident: str, limit: int, now: float | None = None) -> bool:
        """Count a new incident against its route's hourly limit; False: held back.

        An incident admitted once is admitted again (a retry after a crash is not counted twice).
        """
        now = time.time() if now is None else now
        with map_redis_errors("count a route's incidents"):
            admitted = await self._admit(
                keys=[self._keys.alert_route_opened(_route_key(route))],
                args=[now, RATE_WINDOW_S, limit, incident],
            )
        return bool(admitted)

    async def first_hold(self, route: str) -> bool:
        """True once per window: the caller posts the route's hold-back notice."""
        with map_redis_errors("mark a route's hold-back notice"):
            marked = await self._redis.set(
                self._keys.alert_route_held_notice(_route_key(route)),
                "1",
                nx=True,
                ex=RATE_WINDOW_S,
            )
        return bool(marked)

    async def forget_hold(self, route: str) -> None:
        """Undo `first_hold` (its notice could not be posted; the retry posts it)."""
        with map_redis_errors("forget a route's hold-back notice"):
            await self._redis.delete(self._keys.alert_route_held_notice(_route_key(route)))


def _route_key(route: str) -> str:
    return hashlib.sha256(route.encode()).hexdigest()[:16]
