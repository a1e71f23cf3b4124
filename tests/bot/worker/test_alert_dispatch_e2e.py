"""Alerts start the investigation: through the ingress's HTTP routes and a real worker, in process.

The sender's request goes to the real ingress app (over ASGI) exactly as Alertmanager or
PagerDuty writes it; the worker's alert dispatcher posts to the fake Slack (or Feishu) Web API
and starts the analysis against the fake model provider; everything shares one real Redis.
Waits are on the fakes' recorded calls and on the settles book, never on sleeps of a fixed
length.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import SecretStr

from bot.keys import BotKeys
from bot.settings import Settings
from tests.fakes import alert_senders as senders
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import Bot, open_bot
from tests.slack_view import card_text

TOKEN = "alert-token-0123456789"
PD_SECRET = "pagerduty-secret-0123456789"
CHANNEL = sg.SLACK_CHANNEL_ID
KEYS = BotKeys()


def routes(**extra: Any) -> str:
    route = {
        "name": "checkout",
        "matchers": ['alertname=~"Checkout.*"'],
        "platform": "slack",
        "channel": CHANNEL,
        "mode": "investigate",
        **extra,
    }
    pagerduty = {
        "name": "pd",
        "matchers": ['service="checkout"'],
        "platform": "slack",
        "channel": CHANNEL,
        "mode": "investigate",
    }
    return json.dumps([route, pagerduty])


def alert_settings(settings: Settings, **update: Any) -> Settings:
    return settings.model_copy(
        update={
            "alert_token": SecretStr(TOKEN),
            "pagerduty_secret": SecretStr(PD_SECRET),
            "alert_routes": routes(),
            **update,
        }
    )


@pytest.fixture
async def alert_bot(bot_settings: Settings, redis_client) -> AsyncIterator[Bot]:
    async with open_bot(alert_settings(bot_settings), redis_client) as running:
        yield running


def firing(group: str = '{}:{alertname="CheckoutLatencyHigh"}', *names: str) -> dict[str, Any]:
    alerts = [
        senders.am_alert(name, fingerprint=f"fp-{name}", labels={"severity": "critical"})
        for name in (names or ("CheckoutLatencyHigh",))
    ]
    return senders.alertmanager_payload(group_key=group, alerts=alerts)


async def send_alertmanager(bot: Bot, payload: dict[str, Any], token: str = TOKEN) -> Any:
    body, headers = senders.alertmanager_request(payload, token)
    return await bot.http.post("/alerts/alertmanager", content=body, headers=headers)


def roots(slack_api: Any) -> list[Any]:
    """The bot's top-level posts in the channel (the incidents' root messages, notices)."""
    return [
        c
        for c in slack_api.calls_to("chat.postMessage")
        if c.status == 200 and not c.params.get("thread_ts") and c.params.get("channel") == CHANNEL
    ]


def root_ts(call: Any) -> str:
    return str(call.response["ts"])


async def test_a_firing_alert_opens_one_thread_and_one_analysis_and_repeats_add_nothing(
    alert_bot: Bot, fake_llm, slack_api
) -> None:
    fake_llm.script(fp.TextReply("Checkout latency is high because payments-db is slow."))
    # The dispatchers' group exists already, as it does for every worker after the first.
    await alert_bot.redis.xgroup_create(KEYS.alerts_stream, KEYS.alerts_group, mkstream=True)
    await alert_bot.start_worker()
    payload = firing()
    for _ in range(4):  # the notification, its retry and two repeat intervals
        response = await send_alertmanager(alert_bot, payload)
        assert response.status_code == 200, response.text
    await fake_llm.wait_for_requests(1)
    await slack_api.wait_until(lambda: len(roots(slack_api)) >= 1)
    await slack_api.wait_until(
        lambda: any("payments-db" in card_text(c) for c in _cards(slack_api))
    )

    (root,) = roots(slack_api)
    assert "CheckoutLatencyHigh" in root.params["text"]
    (card,) = in_thread(slack_api, root_ts(root))  # the analysis's card, in the root's thread
    final = slack_api.message(CHANNEL, str(card.response["ts"])) or {}
    shown = json.dumps(final.get("blocks", []))
    assert "Started by alert CheckoutLatencyHigh (critical) from alertmanager" in shown
    assert "archives" in shown  # the root message's permalink
    task = fake_llm.requests[0].messages[-1]["content"]
    assert "<alert_notification" in task and "CheckoutLatencyHigh" in task
    assert len(fake_llm.requests) == 1


def _cards(slack_api: Any) -> list[Any]:
    return [c for c in slack_api.calls_to("chat.update") if c.status == 200]


def resolved(payload: dict[str, Any]) -> dict[str, Any]:
    """The same group's resolved notification, as Alertmanager sends it."""
    done: dict[str, Any] = json.loads(json.dumps(payload))
    done["status"] = "resolved"
    for alert in done["alerts"]:
        alert["status"] = "resolved"
        alert["endsAt"] = "2026-12-02T10:30:00Z"
    return done


async def drained(redis: Any) -> None:
    """Wait until the dispatcher took every notification in (acknowledged and deleted)."""
    async with asyncio.timeout(30):
        # Redis has no wait for a stream to empty: polled.
        while await redis.xlen(KEYS.alerts_stream):  # noqa: ASYNC110
            await asyncio.sleep(0.05)


def in_thread(slack_api: Any, thread: str) -> list[Any]:
    return [
        c
        for c in slack_api.calls_to("chat.postMessage")
        if c.status == 200 and c.params.get("thread_ts") == thread
    ]


async def test_a_joining_alert_reaches_the_running_analysis_as_a_notice_and_resolved_posts_once(
    alert_bot: Bot, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("payments-db is slow."),
        fp.TextReply("Both alerts come from payments-db."),
    )
    await alert_bot.start_worker()
    group = '{}:{alertname=~"Checkout.*"}'
    assert (await send_alertmanager(alert_bot, firing(group))).status_code == 200
    await slow_service.wait_for_hits(1)
    (root,) = roots(slack_api)
    thread = root_ts(root)

    both = firing(group, "CheckoutLatencyHigh", "CheckoutErrorsHigh")
    assert (await send_alertmanager(alert_bot, both)).status_code == 200
    await slack_api.wait_until(
        lambda: any("more alert" in c.params["text"] for c in in_thread(slack_api, thread))
    )
    assert len(fake_llm.requests) == 1  # a notice never cuts the live turn
    slow_service.release("db")
    await fake_llm.wait_for_requests(3)

    notice = fake_llm.requests[2].messages[-1]
    assert notice["role"] == "user" and "Notice from alertmanager" in notice["content"]
    assert "CheckoutErrorsHigh" in notice["content"]
    for _ in range(2):  # the resolved notification and its retry
        assert (await send_alertmanager(alert_bot, resolved(both))).status_code == 200
    await slack_api.wait_until(
        lambda: any("Resolved at" in c.params["text"] for c in in_thread(slack_api, thread))
    )
    await drained(alert_bot.redis)  # the retry taken in too
    said = [c for c in in_thread(slack_api, thread) if "Resolved at" in c.params["text"]]
    assert len(said) == 1
    assert len(roots(slack_api)) == 1


async def test_unrouted_forged_and_malformed_alerts_start_nothing(
    alert_bot: Bot, fake_llm, slack_api, redis_client
) -> None:
    disk = senders.alertmanager_payload(
        group_key='{}:{alertname="DiskFull"}',
        alerts=[senders.am_alert("DiskFull", fingerprint="fp-disk")],
    )
    response = await send_alertmanager(alert_bot, disk)
    assert response.status_code == 200 and response.json()["routed"] is False
    assert (await send_alertmanager(alert_bot, firing(), token="wrong")).status_code == 401

    incident = senders.pagerduty_payload(
        "incident.triggered", incident_id="PGR0VU2", title="Checkout is down"
    )
    body, headers = senders.pagerduty_request(incident, "not-the-secret")
    forged = await alert_bot.http.post("/alerts/pagerduty", content=body, headers=headers)
    assert forged.status_code == 401
    malformed = await alert_bot.http.post(
        "/alerts/alertmanager",
        content=b'{"version": "4", "alerts": 7}',
        headers={"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
    )
    assert malformed.status_code == 400

    assert await redis_client.xlen(KEYS.alerts_stream) == 0
    metrics = (await alert_bot.http.get("/metrics")).text
    assert 'chatops_ingress_alerts_total{outcome="unrouted",sender="alertmanager"} 1.0' in metrics
    assert 'chatops_ingress_rejected_total{platform="pagerduty",status="401"} 1.0' in metrics
    assert roots(slack_api) == [] and fake_llm.requests == []  # nothing was written to take in


async def test_a_signed_pagerduty_incident_opens_its_thread_and_its_analysis(
    alert_bot: Bot, fake_llm, slack_api
) -> None:
    fake_llm.script(fp.TextReply("The checkout service is down: its pods crash-loop."))
    await alert_bot.start_worker()
    incident = senders.pagerduty_payload(
        "incident.triggered", incident_id="PGR0VU2", title="Checkout is down"
    )
    body, headers = senders.pagerduty_request(incident, PD_SECRET)
    response = await alert_bot.http.post("/alerts/pagerduty", content=body, headers=headers)
    assert response.status_code == 200, response.text
    await fake_llm.wait_for_requests(1)
    (root,) = roots(slack_api)
    assert "Checkout is down" in root.params["text"]
    assert "pagerduty" in fake_llm.requests[0].messages[-1]["content"]


async def test_fifty_groups_in_a_minute_on_a_route_limited_to_ten_start_ten_and_one_notice(
    bot_settings: Settings, redis_client, fake_llm, slack_api
) -> None:
    settings = alert_settings(bot_settings, alert_max_per_hour=10)
    fake_llm.script(*(fp.TextReply(f"answer {n}") for n in range(10)))
    async with open_bot(settings, redis_client) as bot:
        for n in range(50):
            group = f'{{}}:{{alertname="CheckoutLatencyHigh",pod="p{n}"}}'
            payload = senders.alertmanager_payload(
                group_key=group,
                alerts=[senders.am_alert("CheckoutLatencyHigh", fingerprint=f"fp{n}")],
            )
            assert (await send_alertmanager(bot, payload)).status_code == 200
        await bot.start_worker()
        await slack_api.wait_until(lambda: len(roots(slack_api)) >= 11, timeout_s=60)
        await fake_llm.wait_for_requests(10)
        await drained(redis_client)
    texts = [c.params["text"] for c in roots(slack_api)]
    assert sum("held back" in t for t in texts) == 1
    assert sum("Firing" in t for t in texts) == 10
    assert len(fake_llm.requests) == 10


async def test_the_same_alert_firing_again_sees_the_first_answer_through_past_analyses(
    alert_bot: Bot, fake_llm, slack_api
) -> None:
    fake_llm.script(
        fp.TextReply("First time: payments-db ran out of connections."),
        fp.ToolCallsReply([fp.ToolCall("past_analyses", {"query": "CheckoutLatencyHigh"})]),
        fp.TextReply("Same as last time: the connection pool."),
    )
    await alert_bot.start_worker()
    first = firing()
    assert (await send_alertmanager(alert_bot, first)).status_code == 200
    await fake_llm.wait_for_requests(1)
    await slack_api.wait_until(
        lambda: any("ran out of connections" in card_text(c) for c in _cards(slack_api))
    )
    assert "No earlier analysis" in fake_llm.requests[0].messages[-1]["content"]
    assert (await send_alertmanager(alert_bot, resolved(first))).status_code == 200

    again = firing()
    again["alerts"][0]["startsAt"] = "2026-12-09T10:00:00Z"  # the same alert, a week later
    await slack_api.wait_until(
        lambda: any("Resolved at" in c.params["text"] for c in _all_posts(slack_api))
    )
    assert (await send_alertmanager(alert_bot, again)).status_code == 200
    await fake_llm.wait_for_requests(3)

    assert len(roots(slack_api)) == 2  # a new incident, a new thread
    second_task = fake_llm.requests[1].messages[-1]["content"]
    assert "1 earlier analysis" in second_task
    tool_result = fake_llm.requests[2].messages[-1]
    assert tool_result["role"] == "tool"
    assert "payments-db ran out of connections" in tool_result["content"]


def _all_posts(slack_api: Any) -> list[Any]:
    return [c for c in slack_api.calls_to("chat.postMessage") if c.status == 200]


async def test_a_flapping_alert_counts_against_its_routes_limit_each_time_it_opens(
    bot_settings: Settings, redis_client, fake_llm, slack_api
) -> None:
    settings = alert_settings(
        bot_settings, alert_max_per_hour=1, alert_routes=routes(mode="notify")
    )
    async with open_bot(settings, redis_client) as bot:
        await bot.start_worker()
        first = firing()
        assert (await send_alertmanager(bot, first)).status_code == 200
        assert (await send_alertmanager(bot, resolved(first))).status_code == 200
        await slack_api.wait_until(
            lambda: any("Resolved at" in c.params["text"] for c in _all_posts(slack_api))
        )
        again = firing()
        again["alerts"][0]["startsAt"] = "2026-12-02T11:00:00Z"  # it fires again
        assert (await send_alertmanager(bot, again)).status_code == 200
        await drained(redis_client)
    texts = [c.params["text"] for c in roots(slack_api)]
    assert sum("Firing" in t for t in texts) == 1
    assert sum("held back" in t for t in texts) == 1
    assert fake_llm.requests == []  # notify: no analysis at all
