"""The card factory names the alert that started an analysis on its new card.

Runs the real `CardFactory.new_card` against a loopback redis-server (it writes the replay
page's index entry); the platforms are never called, so none is given.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.analysis.card_factory import CardFactory
from bot.events import AlertOrigin, ChatEvent, Platform
from bot.keys import BotKeys
from bot.publishing.card_publisher import PublisherOptions
from bot.state.audit import AuditLog
from bot.state.runs import RunIndex
from bot.state.turn_jobs import TurnJob


def _job(alert: AlertOrigin | None) -> TurnJob:
    event = ChatEvent(
        platform=Platform.SLACK,
        event_id="Ev1",
        workspace="T1",
        channel="C1",
        thread="1700000000.000100",
        message_id="1700000000.000100",
        author="alert:alertmanager",
        text="Investigate HighLatency",
        alert=alert,
    )
    return TurnJob(turn_id="turn-slack-Ev1", session_id="s1", event=event)


def _factory(redis: aioredis.Redis) -> CardFactory:
    keys = BotKeys()
    return CardFactory(
        redis=redis,
        keys=keys,
        platforms={},
        audit=AuditLog(redis, keys),
        runs=RunIndex(redis, keys),
        options=PublisherOptions(),
        public_url="https://bot.example.com",
    )


def _alert(severity: str) -> AlertOrigin:
    return AlertOrigin(
        sender="alertmanager",
        incident="g1",
        alert_name="HighLatency",
        route="checkout",
        severity=severity,
        root_link="https://chat.example.com/archives/C1/p1700000000000100",
    )


async def test_an_alert_started_card_names_its_alert(redis_client: aioredis.Redis) -> None:
    card = await _factory(redis_client).new_card(_job(_alert("critical")))
    assert card.origin == "Started by alert HighLatency (critical) from alertmanager"
    assert card.origin_link == "https://chat.example.com/archives/C1/p1700000000000100"
    assert card.link == "https://bot.example.com/runs/turn-slack-Ev1"


async def test_no_severity_no_brackets(redis_client: aioredis.Redis) -> None:
    card = await _factory(redis_client).new_card(_job(_alert("")))
    assert card.origin == "Started by alert HighLatency from alertmanager"


async def test_a_person_started_card_has_no_origin(redis_client: aioredis.Redis) -> None:
    card = await _factory(redis_client).new_card(_job(None))
    assert card.origin == "" and card.origin_link == ""
