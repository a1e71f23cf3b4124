"""Alerts start the investigation across processes: `chatops serve` and `chatops worker`.

Requests reach the real ingress over HTTP exactly as the senders write them (Alertmanager's
version 4 JSON with its bearer token, PagerDuty v3 with its `X-PagerDuty-Signature`); the worker
posts to the fake Slack Web API and runs the analysis against the fake model provider. Marked
slow: it starts processes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.deployment import KEYS
from tests.fakes import alert_senders as senders
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg

pytestmark = pytest.mark.slow

TOKEN = "process-alert-token-0123456789"
PD_SECRET = "process-pagerduty-secret-0123"
GROUP = '{}:{alertname=~"Checkout.*"}'


def posts(slack_api: Any, thread: str | None = None) -> list[Any]:
    """The bot's posts in the channel: top-level ones, or those in `thread`."""
    return [
        c
        for c in slack_api.calls_to("chat.postMessage")
        if c.status == 200 and c.params.get("thread_ts") == thread
    ]


def firing(*names: str) -> dict[str, Any]:
    return senders.alertmanager_payload(
        group_key=GROUP,
        alerts=[
            senders.am_alert(n, fingerprint=f"fp-{n}", labels={"severity": "critical"})
            for n in names
        ],
    )


async def test_alerts_through_serve_and_worker(
    deployment, deploy_env, fake_llm, slack_api, slow_service, redis_client
) -> None:
    deployment.env = {
        **deploy_env,
        "CHATOPS_ALERT_TOKEN": TOKEN,
        "CHATOPS_PAGERDUTY_SECRET": PD_SECRET,
        "CHATOPS_ALERT_ROUTES": json.dumps(
            [
                {
                    "name": "checkout",
                    "matchers": ['alertname=~"Checkout.*"', 'severity="critical"'],
                    "platform": "slack",
                    "channel": sg.SLACK_CHANNEL_ID,
                    "mode": "investigate",
                }
            ]
        ),
    }
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("payments-db is slow."),
        fp.TextReply("Both alerts come from payments-db."),
    )
    await deployment.start()

    async def alertmanager(payload: dict[str, Any], token: str = TOKEN) -> Any:
        body, headers = senders.alertmanager_request(payload, token)
        return await deployment.http.post(
            f"{deployment.base}/alerts/alertmanager", content=body, headers=headers
        )

    one = firing("CheckoutLatencyHigh")
    for _ in range(4):  # the notification, a sender's retry, two repeat intervals
        assert (await alertmanager(one)).status_code == 200
    await slow_service.wait_for_hits(1)
    (root,) = posts(slack_api)
    thread = str(root.response["ts"])
    assert "CheckoutLatencyHigh" in root.params["text"]
    await slack_api.wait_until(
        lambda: len(posts(slack_api, thread)) >= 1
    )  # the card, in the root's thread

    both = firing("CheckoutLatencyHigh", "CheckoutErrorsHigh")
    assert (await alertmanager(both)).status_code == 200
    await slack_api.wait_until(
        lambda: any("more alert" in c.params["text"] for c in posts(slack_api, thread))
    )
    assert len(fake_llm.requests) == 1  # the notice did not cut the live turn
    slow_service.release("db")
    await fake_llm.wait_for_requests(3)
    notice = fake_llm.requests[2].messages[-1]
    assert notice["role"] == "user" and "CheckoutErrorsHigh" in notice["content"]

    done = json.loads(json.dumps(both))
    done["status"] = "resolved"
    for alert in done["alerts"]:
        alert["status"], alert["endsAt"] = "resolved", "2026-12-02T10:30:00Z"
    for _ in range(2):
        assert (await alertmanager(done)).status_code == 200
    await slack_api.wait_until(
        lambda: any("Resolved at" in c.params["text"] for c in posts(slack_api, thread))
    )

    incident = senders.pagerduty_payload(
        "incident.triggered", incident_id="PFORGED", title="Checkout is down"
    )
    body, headers = senders.pagerduty_request(incident, "not-the-secret")
    forged = await deployment.http.post(
        f"{deployment.base}/alerts/pagerduty", content=body, headers=headers
    )
    assert forged.status_code == 401
    warning = senders.alertmanager_payload(
        group_key='{}:{alertname="DiskFull"}',
        alerts=[senders.am_alert("DiskFull", fingerprint="fp-disk")],
    )
    unrouted = await alertmanager(warning)
    assert unrouted.status_code == 200 and unrouted.json()["routed"] is False

    async with asyncio.timeout(30):  # every accepted notification taken in
        # Redis has no wait for a stream to empty: polled.
        while await redis_client.xlen(KEYS.alerts_stream):  # noqa: ASYNC110
            await asyncio.sleep(0.05)
    resolved_posts = [c for c in posts(slack_api, thread) if "Resolved at" in c.params["text"]]
    assert len(resolved_posts) == 1
    assert len(posts(slack_api)) == 1  # one root message, whatever was sent
    assert len(fake_llm.requests) == 3
    metrics = (await deployment.http.get(f"{deployment.base}/metrics")).text
    assert 'chatops_ingress_alerts_total{outcome="unrouted",sender="alertmanager"} 1.0' in metrics
    assert 'chatops_ingress_rejected_total{platform="pagerduty",status="401"} 1.0' in metrics


async def test_a_feishu_route_posts_the_root_in_the_chat_and_the_analysis_in_its_topic(
    deployment, deploy_env, fake_llm, feishu_api
) -> None:
    deployment.env = {
        **deploy_env,
        "CHATOPS_ALERT_TOKEN": TOKEN,
        "CHATOPS_ALERT_ROUTES": json.dumps(
            [{"name": "feishu", "platform": "feishu", "channel": sg.FEISHU_CHAT_ID}]
        ),
    }
    fake_llm.script(fp.TextReply("payments-db is out of connections."))
    await deployment.start()
    body, headers = senders.alertmanager_request(firing("CheckoutLatencyHigh"), TOKEN)
    response = await deployment.http.post(
        f"{deployment.base}/alerts/alertmanager", content=body, headers=headers
    )
    assert response.status_code == 200, response.text

    settled = await deployment.next_settle()
    assert settled.reason == "completed"
    (create,) = feishu_api.calls_to("im.v1.message.create")
    assert create.query == {"receive_id_type": "chat_id"}
    root = create.response["data"]["message_id"]
    posted = feishu_api.message(root)
    assert posted is not None and not posted.get("root_id")  # top-level in the chat
    assert "CheckoutLatencyHigh" in posted["body"]["content"]
    cards = [m for m in feishu_api.bot_messages(sg.FEISHU_CHAT_ID) if m.get("root_id") == root]
    assert cards, "the analysis's card is in the root's topic"
    await deployment.released(settled.session_id)
    final = feishu_api.message(cards[0]["message_id"]) or {}
    assert "payments-db is out of connections." in final["body"]["content"]
    assert "Started by alert CheckoutLatencyHigh" in final["body"]["content"]
