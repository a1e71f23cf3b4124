"""Taking in one routed alert notification: on the alerts stream before the sender is answered.

The receivers (`bot.ingress.alert_webhooks`) verify, parse and route a notification; this writes
it, with the route that took it, to the alerts stream in one script call, deduplicated on its
content: a sender's retry within ten minutes is written once (a later repeat reaches the
dispatcher, which adds nothing for alerts it has taken in). The workers' alert dispatchers
(`bot.worker.alert_dispatch`) read the stream, post, and start the analyses; nothing slow
happens here, so the sender is answered within the ingress's ack budget. When Redis cannot take
the write, the caller answers 503 and the sender retries (Alertmanager, Grafana and PagerDuty
all retry a 5xx).
"""

from __future__ import annotations

import hashlib

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from agent_core import StoreError, map_redis_errors, register_lua
from bot.alerts import AlertNotification
from bot.errors import QueueUnavailable
from bot.keys import BotKeys
from bot.policy.alert_routes import AlertRoute

__all__ = ["ALERTS_MAXLEN", "AlertEntry", "AlertIntake"]

ALERTS_MAXLEN = 100_000
"""The alerts stream is trimmed (approximately) past this many entries."""
DEDUPE_TTL_S = 600
"""A notification's content is deduplicated for as long as senders retry one (minutes); a
repeat after that reaches the dispatcher, which adds nothing for alerts it has taken in, and
opens an incident a route's limit had held back."""


class AlertEntry(BaseModel):
    """One entry of the alerts stream: the notification, the route that took it, when."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    notification: AlertNotification
    route: AlertRoute
    received_at: float


class AlertIntake:
    """The producer side of the alerts stream."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys) -> None:
        self._redis = redis
        self._keys = keys
        self._write = register_lua(redis, "bot.intake", "alert_intake_write")

    async def take(self, entry: AlertEntry) -> bool:
        """Write `entry`; False when the same notification was written before.

        Raises:
            QueueUnavailable: Redis could not take it (the sender should retry).
        """
        digest = hashlib.sha256(
            entry.notification.model_dump_json().encode() + entry.route.name.encode()
        ).hexdigest()[:32]
        try:
            with map_redis_errors("write an alert"):
                written = await self._write(
                    keys=[self._keys.seen_alert(digest), self._keys.alerts_stream],
                    args=[DEDUPE_TTL_S, ALERTS_MAXLEN, entry.model_dump_json()],
                )
        except StoreError as exc:
            raise QueueUnavailable(f"cannot write the alert: {exc}") from exc
        return bool(written)
