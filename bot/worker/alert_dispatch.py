"""The alert dispatcher: each worker takes routed notifications from the alerts stream and acts.

One task per worker, owned by the worker's task group, reads the alerts stream through the
dispatchers' consumer group, one entry at a time, and takes each in under its incident's lock
(`bot.state.incidents`):

- a new incident (or one firing again after it resolved) is counted against its route's hourly
  limit; admitted, its root message is posted at the top of the route's channel (title,
  severity, key labels, links) and, unless the route only notifies, an analysis starts in its
  thread: an ordinary `ChatEvent` from the `alert` author, with the alert quoted as its task, the
  route's tools, a triage's step cap, and the number of earlier analyses of the same alert. Held
  back, nothing is posted but one notice an hour in the route's channel;
- alerts joining the incident are posted in its thread and reach a live or queued analysis as a
  notice (the policy queues an alert's message for the next turn; it never cuts one, and wakes
  nothing once the analysis ended);
- the resolved notification posts "Resolved at …" in the thread once and reaches a running
  analysis the same way; it does not stop it. PagerDuty's acknowledgement likewise;
- what the incident has taken in already (a sender's retry, a repeat) adds nothing.

An entry is acknowledged once taken in. One that fails (a platform down, Redis away) stays
pending and is taken in again, by this worker or another, once idle for `RETRY_IDLE_MS`; after
`MAX_DELIVERIES` it is set aside on the alerts' dead letters, logged. The poster's idempotency
key is the same on every attempt (Feishu dedupes on it; Slack has none, so a worker killed
between its post and the record posts the root twice, while the analysis starts once: its
start's event id is the same on every attempt).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter
from pydantic import ValidationError
from redis.exceptions import RedisError, ResponseError

from agent_core import StoreError, checkpoint, map_redis_errors, until_set
from bot.alerts import Alert, AlertNotification, AlertStatus
from bot.control.killswitch import KillSwitch
from bot.errors import PlatformError, QueueUnavailable
from bot.events import ALERT, AlertMode, AuthorKind, ChatEvent, Platform
from bot.intake.alert_intake import AlertEntry
from bot.intake.queue import Queue
from bot.intake.routing import route_event
from bot.keys import BotKeys
from bot.publishing.channel_posts import ChannelPoster
from bot.state.incidents import (
    RATE_WINDOW_S,
    IncidentBook,
    IncidentRecord,
    IncidentState,
    incident_id,
)
from bot.state.memory import MemoryBook
from bot.worker import alert_texts as texts
from cards import Notice

__all__ = ["AlertDispatcher", "DispatchOptions"]

log = logging.getLogger(__name__)

LOCK_TTL_S = 60.0
"""An incident's lock outlives any one take-in (its posts are bounded by `STEP_TIMEOUT_S`)."""
LOCK_TRIES, LOCK_WAIT_S = 50, 0.1
"""A held lock is tried again for about 5 s before the entry is left for a retry."""
STEP_TIMEOUT_S = 40.0
"""Bound of taking in one notification."""
UNLOCK_TIMEOUT_S = 5.0
RETRY_IDLE_MS = 30_000
"""An entry pending this long (its dispatcher failed or died) is taken in again."""
MAX_DELIVERIES = 5
DEAD_MAXLEN = 10_000


class DispatchOptions:
    """What the settings say about alerts, for the dispatcher."""

    def __init__(
        self, *, max_per_hour: int = 10, triage_steps: int = 4, memory_days: int = 90
    ) -> None:
        self.max_per_hour = max_per_hour
        self.triage_steps = triage_steps
        self.memory_days = memory_days


class AlertDispatcher:
    """Takes routed alert notifications in: posts, starts analyses, passes notices on."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        keys: BotKeys,
        posters: Mapping[Platform, ChannelPoster],
        memory: MemoryBook | None,
        name: str,
        options: DispatchOptions | None = None,
        registry: CollectorRegistry | None = None,
        block_s: float = 2.0,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._posters = posters
        self._memory = memory
        self._name = name
        self._options = options or DispatchOptions()
        self._block_ms = int(block_s * 1000)
        self._book = IncidentBook(redis, keys)
        self._queue = Queue(redis, keys)
        self._switch = KillSwitch(redis, keys)
        self._switch_seen = False
        self.taken = Counter(
            "chatops_alert_notifications",
            "Alert notifications the dispatcher took in, by what they did (opened, notified, "
            "held, joined, resolved, acknowledged, nothing new, dead-lettered)",
            ["outcome"],
            registry=registry,
        )

    async def run(self, stopping: asyncio.Event) -> None:
        """Take entries in until `stopping` is set (an entry in progress is finished first)."""
        await self._ensure_group()
        while not stopping.is_set():
            checkpoint()
            if await self._switched_on():
                await until_set(stopping, asyncio.sleep(self._block_ms / 1000))
                continue
            try:
                entry = await self._reclaimed() or await until_set(stopping, self._read())
            except StoreError as exc:
                log.warning("cannot read the alerts stream (%s); retrying", exc)
                await until_set(stopping, asyncio.sleep(self._block_ms / 1000))
                continue
            if isinstance(entry, tuple):  # not interrupted by the stop, and something to do
                await self._handle(*entry)

    async def _switched_on(self) -> bool:
        """The kill switch is on, or cannot be read (never taken for off): take nothing in."""
        try:
            on = (await self._switch.state()).on
        except StoreError:
            return True
        if on != self._switch_seen:
            self._switch_seen = on
            log.warning(
                "kill switch %s: %s",
                "on" if on else "off",
                "alerts wait" if on else "taking alerts in again",
            )
        return on

    async def _ensure_group(self) -> None:
        """Create the dispatchers' group (and the stream) if missing; Redis away is waited out."""
        k = self._keys
        try:
            await self._redis.xgroup_create(k.alerts_stream, k.alerts_group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                log.warning("cannot create the alerts group (%s); reads will retry", exc)
        except RedisError as exc:
            log.warning("cannot create the alerts group (%s); reads will retry", exc)

    async def _read(self) -> tuple[str, dict[bytes, bytes]] | None:
        k = self._keys
        with map_redis_errors("read alerts"):
            reply: Any = await self._redis.xreadgroup(
                k.alerts_group, self._name, {k.alerts_stream: ">"}, count=1, block=self._block_ms
            )
        for _stream, items in reply or []:
            for entry_id, fields in items:
                return _text(entry_id), dict(fields)
        return None

    async def _reclaimed(self) -> tuple[str, dict[bytes, bytes]] | None:
        k = self._keys
        with map_redis_errors("reclaim alerts"):
            reply: Any = await self._redis.xautoclaim(
                k.alerts_stream, k.alerts_group, self._name, RETRY_IDLE_MS, "0-0", count=1
            )
        for entry_id, fields in reply[1] if reply else []:
            if fields:  # a deleted entry is reported with no fields
                return _text(entry_id), dict(fields)
        return None

    async def _handle(self, entry_id: str, fields: dict[bytes, bytes]) -> None:
        """Take one entry in and acknowledge it; one that fails stays pending for a retry.

        Nothing an entry does can end the dispatcher (and with it the worker's task group):
        a failure is logged, the entry left pending, and its deliveries counted towards the
        dead letters.
        """
        try:
            entry = AlertEntry.model_validate_json(fields.get(b"entry", b""))
        except ValidationError as exc:
            log.error("alert entry %s is not an alert (%s): dropped", entry_id, exc)
            await self._ack(entry_id)
            return
        n = entry.notification
        incident = incident_id(n.sender, n.incident)
        try:
            if await self._deliveries(entry_id) > MAX_DELIVERIES:
                await self._dead_letter(entry_id, fields)
                return
            if not await self._locked(incident):
                return  # another dispatcher takes in this incident still: retried once idle
            try:
                async with asyncio.timeout(STEP_TIMEOUT_S):
                    outcome = await self._take_in(entry, incident)
            finally:
                await asyncio.shield(self._unlock(incident))
        except (PlatformError, StoreError, QueueUnavailable, TimeoutError) as exc:
            log.warning("alert entry %s not taken in (retried): %s", entry_id, exc)
            return
        except Exception:
            log.exception("alert entry %s failed (retried, then set aside)", entry_id)
            return
        self.taken.labels(outcome).inc()
        log.info("alert %s (%s, route %s): %s", incident, n.sender, entry.route.name, outcome)
        await self._ack(entry_id)

    async def _unlock(self, incident: str) -> None:
        """Release the incident's lock, bounded (its expiry frees it anyway)."""
        try:
            async with asyncio.timeout(UNLOCK_TIMEOUT_S):
                await self._book.unlock(incident, self._name)
        except (StoreError, TimeoutError) as exc:
            log.warning("incident %s not unlocked (it expires): %s", incident, exc)

    async def _locked(self, incident: str) -> bool:
        """Take the incident's lock, waiting a little for another dispatcher to finish."""
        for _ in range(LOCK_TRIES):
            if await self._book.lock(incident, self._name, LOCK_TTL_S):
                return True
            await asyncio.sleep(LOCK_WAIT_S)
        return False

    async def _take_in(self, entry: AlertEntry, incident: str) -> str:
        n, record = entry.notification, await self._book.load(incident)
        firing = texts.alert_ids(n.alerts, AlertStatus.FIRING)
        if record is None or record.state is IncidentState.RESOLVED:
            if not await self._book.unseen(incident, firing):
                return "nothing new"  # resolved or repeated, or none of it is new
            return await self._open(entry, incident, firing)
        if record.state is IncidentState.HELD:
            return "held"
        if not record.started:  # its opening failed after the root message was posted
            return await self._finish_opening(entry, record, firing)
        outcomes = []
        new = set(await self._book.unseen(incident, firing))
        if new:
            joined = [a for a in n.alerts if f"{a.fingerprint}|{a.starts_at}" in new]
            await self._joined(record, n, joined, sorted(new))
            outcomes.append("joined")
        acked = texts.alert_ids(n.alerts, AlertStatus.ACKNOWLEDGED)
        if acked and await self._book.unseen(incident, acked):
            await self._say(record, n, texts.acknowledged_notice(n, time.time()), "ack", [])
            await self._book.take_in(incident, acked)
            outcomes.append("acknowledged")
        if n.status is AlertStatus.RESOLVED:
            now = time.time()
            await self._say(record, n, texts.resolved_notice(n, now), "resolved", list(n.alerts))
            resolved = record.model_copy(
                update={"state": IncidentState.RESOLVED, "resolved_at": now}
            )
            await self._book.save(resolved)
            outcomes.append("resolved")
        return " and ".join(outcomes) or "nothing new"

    async def _open(self, entry: AlertEntry, incident: str, firing: list[str]) -> str:
        n, route = entry.notification, entry.route
        poster = self._posters.get(route.platform)
        if poster is None:
            log.error(  # the worker's platforms are not the ingress's: a configuration error
                "alert route %s: platform %s is not configured here", route.name, route.platform
            )
            return "nothing new"
        name = texts.alert_name(n)
        record = IncidentRecord(
            id=incident,
            sender=n.sender,
            group=n.incident[:500],
            state=IncidentState.HELD,
            route=route.name,
            platform=route.platform,
            channel=route.channel,
            alert_name=name[:200],
        )
        generation = _digest(firing)
        admitted = await self._book.admit(
            route.name, f"{incident}:{generation}", self._options.max_per_hour
        )
        if not admitted:
            if await self._book.first_hold(route.name):
                notice = texts.held_notice(route, self._options.max_per_hour, n)
                try:
                    await poster.post_root(route.channel, notice, key=f"held-{incident}")
                except PlatformError:
                    await self._book.forget_hold(route.name)  # the retry posts it
                    raise
            await self._book.save(record, ttl_s=RATE_WINDOW_S)
            return "held"
        posted = await poster.post_root(
            route.channel, texts.root_notice(n, route), key=f"alert-{incident}-{generation}"
        )
        # Recorded before the analysis starts: a retry after a failure from here on finds the
        # thread and finishes the opening in it, never posting a second root message.
        opening = record.model_copy(
            update={
                "state": IncidentState.OPEN,
                "workspace": posted.workspace,
                "thread": posted.thread,
                "root_link": posted.link,
                "opened_at": time.time(),
                "analysis": route.mode is not AlertMode.NOTIFY,
                "generation": generation,
                "started": False,
            }
        )
        await self._book.save(opening)
        return await self._finish_opening(entry, opening, firing)

    async def _finish_opening(
        self, entry: AlertEntry, record: IncidentRecord, firing: list[str]
    ) -> str:
        """Start the analysis of an opened incident (once: deduplicated on its event id)."""
        if record.analysis:
            await self._start(
                entry,
                record.id,
                record.generation,
                record.workspace,
                record.thread,
                record.root_link,
                firing,
            )
        await self._book.take_in(record.id, firing, fresh=True)
        await self._book.save(record.model_copy(update={"started": True}))
        return "opened" if record.analysis else "notified"

    async def _start(
        self,
        entry: AlertEntry,
        incident: str,
        generation: str,
        workspace: str,
        thread: str,
        link: str,
        firing: list[str],
    ) -> None:
        n, route, opts = entry.notification, entry.route, self._options
        name = texts.alert_name(n)
        past = await self._past(name)
        triage = route.mode is AlertMode.TRIAGE
        steps = opts.triage_steps if triage else None
        event = ChatEvent(
            platform=route.platform,
            event_id=f"alert-{incident}-{generation}",
            workspace=workspace,
            channel=route.channel,
            thread=thread,
            message_id="",  # deduped on the event id alone
            author=f"{ALERT}:{n.sender}",
            author_name=f"{n.sender} alert",
            author_kind=AuthorKind.ALERT,
            text=await texts.task_text(n, route, past=past, days=opts.memory_days, steps=steps),
            sent_at=entry.received_at,
            tools=route.tools,
            alert=texts.origin_of(n, route, root_link=link, fingerprints=firing),
            max_steps=steps,
        )
        outcome = await route_event(self._queue, event)
        log.info("alert %s: analysis %s in thread %s", incident, outcome, thread)

    async def _past(self, name: str) -> int:
        if self._memory is None:
            return 0
        try:
            return await self._memory.count_for_alert(name, days=self._options.memory_days)
        except StoreError as exc:
            log.warning("earlier analyses of %s not counted: %s", name, exc)
            return 0

    async def _joined(
        self, record: IncidentRecord, n: AlertNotification, joined: list[Alert], ids: list[str]
    ) -> None:
        await self._say(record, n, texts.joined_notice(n, joined), f"join-{_digest(ids)}", joined)
        await self._book.take_in(record.id, ids)

    async def _say(
        self,
        record: IncidentRecord,
        n: AlertNotification,
        notice: Notice,
        what: str,
        alerts: list[Alert],
    ) -> None:
        """Post `notice` in the incident's thread; a live analysis reads it as a notice."""
        poster = self._posters.get(record.platform)
        if poster is None or not record.thread:
            return
        key = f"alert-{record.id}-{what}-{int(record.opened_at)}"
        await poster.post_in_thread(record.channel, record.thread, notice, key=key)
        if not record.analysis:
            return
        event = ChatEvent(
            platform=record.platform,
            event_id=key,
            workspace=record.workspace,
            channel=record.channel,
            thread=record.thread,
            message_id="",
            author=f"{ALERT}:{n.sender}",
            author_name=f"{n.sender} alert",
            author_kind=AuthorKind.ALERT,
            text=await texts.notice_text(n, notice.title, alerts),
            sent_at=time.time(),
        )
        await route_event(self._queue, event)  # queued for a live or queued turn, else ignored

    async def _deliveries(self, entry_id: str) -> int:
        k = self._keys
        with map_redis_errors("count an alert's deliveries"):
            pending: Any = await self._redis.xpending_range(
                k.alerts_stream, k.alerts_group, min=entry_id, max=entry_id, count=1
            )
        return int(pending[0]["times_delivered"]) if pending else 0

    async def _dead_letter(self, entry_id: str, fields: dict[bytes, bytes]) -> None:
        log.error("alert entry %s failed %d times: set aside", entry_id, MAX_DELIVERIES)
        with map_redis_errors("set an alert aside"):
            await self._redis.xadd(
                self._keys.alerts_dead, {b"entry": fields.get(b"entry", b"")}, maxlen=DEAD_MAXLEN
            )
        self.taken.labels("dead-lettered").inc()
        await self._ack(entry_id)

    async def _ack(self, entry_id: str) -> None:
        k = self._keys
        try:
            with map_redis_errors("acknowledge an alert"):
                async with self._redis.pipeline(transaction=True) as pipe:
                    pipe.xack(k.alerts_stream, k.alerts_group, entry_id)
                    pipe.xdel(k.alerts_stream, entry_id)
                    await pipe.execute()
        except StoreError as exc:
            log.warning(
                "alert entry %s not acknowledged (taken in again, adding nothing): %s",
                entry_id,
                exc,
            )


def _digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
