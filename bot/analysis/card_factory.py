"""The card parts of each analysis: its record, its publisher, and a new card with its link.

A card's record and publisher belong to one session and one lease holder, so they are made per
job; this factory is built once per worker (`bot.worker.assembly`) with what they share: the
platforms' clients, the publisher's bounds, the audit, and the replay pages' index.

Contract: a new card of an alert's analysis (its starting event has `alert`) says so near its
top (`ProgressCard.origin`, with the root message's link); a new card links to
`{public_url}/runs/{turn_id}` (the ingress's replay page) only once that page's index entry is
written; when Redis refuses it, the card goes without a link
(the analysis matters more than its replay page).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from urllib.parse import quote

import redis.asyncio as aioredis

from agent_core import StoreError
from bot.events import AlertOrigin, Platform
from bot.keys import BotKeys
from bot.publishing.card_publisher import CardPublisher, PublisherOptions
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import CardTarget, ChatPlatform
from bot.state.audit import AuditLog
from bot.state.lease import Lease
from bot.state.runs import RunIndex
from bot.state.turn_jobs import TurnJob
from cards import ProgressCard

__all__ = ["CardFactory"]

log = logging.getLogger(__name__)


class CardFactory:
    """Makes the card record, publisher and new card of each job. One per worker."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        keys: BotKeys,
        platforms: Mapping[Platform, ChatPlatform],
        audit: AuditLog,
        runs: RunIndex,
        options: PublisherOptions,
        public_url: str = "",
    ) -> None:
        """Build the factory.

        Args:
            redis: The client card records are kept with.
            keys: The key layout.
            platforms: Each platform's card client.
            audit: Where publishers record the cards they show.
            runs: The replay pages' index (`bot.state.runs`).
            options: The publishers' bounds.
            public_url: `CHATOPS_PUBLIC_URL`; empty: new cards carry no link.
        """
        self._redis = redis
        self._keys = keys
        self._platforms = platforms
        self._audit = audit
        self._runs = runs
        self._options = options
        self._public_url = public_url

    def record(self, session_id: str) -> CardRecord:
        """The record of the session's card."""
        return CardRecord(self._redis, self._keys, session_id)

    def publisher(self, job: TurnJob, lease: Lease, record: CardRecord) -> CardPublisher:
        """The publisher of `job`'s card, fenced by `lease`."""
        event = job.event
        target = CardTarget(event.platform, event.channel, event.thread)
        return CardPublisher(
            self._platforms[event.platform],
            record,
            target,
            lease.token,
            self._options,
            self._audit,
        )

    async def new_card(self, job: TurnJob) -> ProgressCard:
        """A new card for the analysis `job` starts, linked to its replay page."""
        event = job.event
        alert = event.alert
        return ProgressCard(
            title=event.text,
            turn_id=job.turn_id,
            thread=event.thread,
            link=await self._link(job),
            origin=_origin(alert) if alert else "",
            origin_link=alert.root_link if alert else "",
        )

    async def _link(self, job: TurnJob) -> str:
        """The replay page of the analysis `job` starts (the ingress's `GET /runs/{turn_id}`)."""
        try:  # also what `chatops replay TURN` looks the session up by
            await self._runs.remember(job.turn_id, job.session_id)
        except StoreError as exc:
            log.warning("analysis %s has no replay link: %s", job.turn_id, exc)
            return ""
        base = self._public_url.rstrip("/")
        return f"{base}/runs/{quote(job.turn_id, safe='')}" if base else ""


def _origin(alert: AlertOrigin) -> str:
    """`Started by alert HighLatency (critical) from alertmanager` (no severity: no brackets)."""
    severity = f" ({alert.severity})" if alert.severity else ""
    return f"Started by alert {alert.alert_name}{severity} from {alert.sender}"
