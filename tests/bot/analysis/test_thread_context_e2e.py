"""The thread an analysis is asked in reaches the model: Slack and Feishu, end to end.

Why this way: what the model is first sent results from the ingress routing the mention, the
worker's thread reader paging the platform's API through its real SDK, the extraction of
attachments, blocks and cards, the token bound, the untrusted framing and the wire conversion.
So the bot runs in process (`tests/inprocess_bot.py`) against the protocol-faithful fakes of
Slack and Feishu, seeded with a thread as an alerting app and people leave it (the alert with
attachments and blocks, two human replies, an earlier card of the bot's), and the assertions
read the fake OpenAI provider's recorded requests and the card the fake platform holds. A read
that fails is scripted on the fake the way the platform answers it (Slack's `missing_scope`,
Feishu's 99991672).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from bot.settings import Settings
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.feishu_api import SCOPE_MISSING, FakeFeishuAPI, feishu_error
from tests.fakes.service import SlowService
from tests.fakes.slack_api import FakeSlackAPI, slack_error
from tests.inprocess_bot import open_bot
from tests.slack_view import card_text, cards_in, updates_of

CHANNEL = sg.SLACK_CHANNEL_ID
BOB = "U0BOBRESP1"
ALERT_BOT = "B0ALERTMGR"
RUNBOOK = "https://runbooks.example.com/checkout/high-latency"
CARD_TEXT = "earlier card of the bot: checked the gateway"

ALERT_ATTACHMENTS = [
    {
        "color": "#d63232",
        "fallback": "[FIRING:1] CheckoutHighLatency",
        "pretext": "Alertmanager",
        "title": "[FIRING:1] CheckoutHighLatency (checkout prod)",
        "title_link": "https://alertmanager.example.com/#/alerts",
        "text": "checkout p99 latency is 2.4s (threshold 1s) since 09:12",
        "fields": [
            {"title": "severity", "value": "critical", "short": True},
            {"title": "runbook_url", "value": RUNBOOK, "short": False},
        ],
    }
]
ALERT_BLOCKS = [
    {"type": "header", "text": {"type": "plain_text", "text": "CheckoutHighLatency firing"}},
    {
        "type": "section",
        "text": {"type": "mrkdwn", "text": "*Summary:* p99 above 1s on checkout-api"},
        "fields": [{"type": "mrkdwn", "text": "*Cluster:* prod-eu-1"}],
    },
]


async def post_earlier_card(api: FakeSlackAPI, root: str) -> None:
    """The bot's card of an earlier analysis in the thread, posted as the bot posts it."""
    client = AsyncWebClient(token=api.token, base_url=api.base_url)
    await client.chat_postMessage(
        channel=CHANNEL,
        thread_ts=root,
        text=CARD_TEXT,
        blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": CARD_TEXT}}],
    )


async def seed_slack_thread(api: FakeSlackAPI) -> tuple[str, str]:
    """An alert's thread with two human replies and the bot's card; (root ts, mention ts)."""
    root = sg.slack_ts()
    api.add_app_message(
        CHANNEL,
        root,
        bot_id=ALERT_BOT,
        name="Alertmanager",
        attachments=ALERT_ATTACHMENTS,
        blocks=ALERT_BLOCKS,
    )
    api.add_user(BOB, "bob", "Bob Builder")
    first = sg.slack_ts()
    api.add_message(CHANNEL, first, "restarted checkout-api-7f9, no change", thread_ts=root)
    await post_earlier_card(api, root)
    api.add_message(
        CHANNEL, sg.slack_ts(), "db looks fine, p99 of queries 20ms", user=BOB, thread_ts=root
    )
    mention = sg.slack_ts()
    api.add_message(
        CHANNEL, mention, f"<@{sg.SLACK_BOT_USER_ID}> what is going on?", thread_ts=root
    )
    return root, mention


def slack_card_text(api: FakeSlackAPI, root: str) -> str:
    """What this analysis's card (the thread's last) shows now (the earlier card came first)."""
    posted = cards_in(api, root)[-1]
    updates = updates_of(api, posted.response["ts"])
    return card_text(updates[-1] if updates else posted)


def user_contents(request: fp.RecordedRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "user"]


async def test_slack_first_request_carries_the_alert_and_the_replies_in_order(
    bot, fake_llm, slack_api: FakeSlackAPI, slow_service: SlowService
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/probe")})]),
        fp.TextReply("checkout is slow because of the gateway."),
    )
    root, mention = await seed_slack_thread(slack_api)
    await bot.start_worker()
    text = f"<@{sg.SLACK_BOT_USER_ID}> what is going on?"
    await bot.post(sg.slack_app_mention(ts=mention, thread_ts=root, text=text))
    await slow_service.wait_for_hits(1)
    # The alerting app posts again while the analysis runs: context, never a redirect.
    await bot.post(sg.slack_bot_message(text="[FIRING:2] still firing", thread_ts=root))
    slow_service.release("probe")
    assert bot.worker is not None
    await bot.worker.wait_finished(1)

    first, second = fake_llm.requests
    context, task = user_contents(first)
    assert context.startswith("[The thread's earlier messages, for context only")
    assert task.endswith("what is going on?") and "what is going on" not in context
    # The alert, from its attachments and its blocks; then both replies in order, by name.
    for shown in (
        "Alertmanager (app) (root)",
        "[FIRING:1] CheckoutHighLatency (checkout prod)",
        "checkout p99 latency is 2.4s",
        "severity: critical",
        "CheckoutHighLatency firing",
        "p99 above 1s on checkout-api",
        "prod-eu-1",
    ):
        assert shown in context, shown
    alice = context.index("] alice:")
    bob = context.index("] bob:")
    assert context.index("CheckoutHighLatency") < alice < bob
    assert context.index("restarted checkout-api-7f9") < context.index("db looks fine")
    assert "<chat_message" in context and "untrusted data" in context
    # The runbook is offered inside the one untrusted block, never after it.
    assert context.rstrip().endswith("</chat_message>") and context.count("</chat_message>") == 1
    assert context.index("<chat_message") < context.index(f"- {RUNBOOK}\n") < alice
    # None of the bot's own posts: its earlier card, nor this analysis's.
    assert CARD_TEXT not in context and "Investigating" not in context
    # The other bot's message during the analysis steered nothing.
    assert [m["role"] for m in second.messages] == ["system", "user", "user", "assistant", "tool"]
    assert not any("still firing" in c or "Correction" in c for c in user_contents(second))
    assert "gateway" in slack_card_text(slack_api, root)
    (read,) = {c.params["ts"] for c in slack_api.calls_to("conversations.replies")}
    assert read == root


async def test_slack_thread_that_cannot_be_read_the_analysis_runs_and_the_card_says_so(
    bot, fake_llm, slack_api: FakeSlackAPI
) -> None:
    fake_llm.script(fp.TextReply("Answered without the thread."))
    root, mention = await seed_slack_thread(slack_api)
    slack_api.script(
        "conversations.replies",
        slack_error("missing_scope", needed="channels:history", provided="chat:write"),
    )
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=mention, thread_ts=root, text="<@X> status?"))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)

    (request,) = fake_llm.requests
    assert [m["role"] for m in request.messages] == ["system", "user"]  # the task alone
    shown = slack_card_text(slack_api, root)
    assert "Answered without the thread" in shown
    assert "Started without the thread" in shown and "channels:history" in shown


async def test_slack_context_off_reads_nothing(
    bot_settings: Settings, redis_client, fake_llm, slack_api: FakeSlackAPI
) -> None:
    fake_llm.script(fp.TextReply("ok"))
    root, mention = await seed_slack_thread(slack_api)
    settings = bot_settings.model_copy(update={"thread_context_tokens": 0})
    async with open_bot(settings, redis_client) as running:
        await running.start_worker()
        await running.post(sg.slack_app_mention(ts=mention, thread_ts=root))
        assert running.worker is not None
        await running.worker.wait_finished(1)

    assert [m["role"] for m in fake_llm.requests[0].messages] == ["system", "user"]
    assert slack_api.calls_to("conversations.replies") == []


# --- Feishu -----------------------------------------------------------------------------------

FEISHU_KEY = "thread-context-feishu-encrypt-key"
FEISHU_TOKEN = "thread-context-feishu-verify-token"
ALERT_APP = "cli_alertingapp0000001"
FEISHU_BOB = "ou_bobresponder000000000000000001"
ROOT = "om_alert_root_00000000000000000001"
MENTION = "om_mention_000000000000000000000001"


def feishu_settings(settings: Settings, api: FakeFeishuAPI) -> Settings:
    return settings.model_copy(
        update={
            "feishu_app_id": sg.FEISHU_APP_ID,
            "feishu_app_secret": SecretStr(sg.FEISHU_APP_SECRET),
            "feishu_encrypt_key": SecretStr(FEISHU_KEY),
            "feishu_verification_token": SecretStr(FEISHU_TOKEN),
            "feishu_domain": api.base_url,
        }
    )


def alert_card() -> dict[str, Any]:
    """An alerting app's card (JSON 2.0), as Grafana-style apps send them."""
    return {
        "schema": "2.0",
        "header": {"title": {"tag": "plain_text", "content": "[FIRING] CheckoutHighLatency"}},
        "body": {
            "elements": [
                {"tag": "markdown", "content": "checkout p99 latency is 2.4s\nseverity: critical"},
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": "Runbook"},
                    "behaviors": [{"type": "open_url", "default_url": RUNBOOK}],
                },
            ]
        },
    }


def seed_feishu_thread(api: FakeFeishuAPI) -> None:
    now = 1_712_000_000_000
    api.add_message(
        ROOT,
        msg_type="interactive",
        content=alert_card(),
        sender_id=ALERT_APP,
        sender_type="app",
        sender_name="Grafana Alerts",
        create_time_ms=now,
    )
    api.add_message(
        "om_reply_one_000000000000000000001",
        root_id=ROOT,
        text="restarted checkout-api-7f9, no change",
        sender_id=sg.FEISHU_USER_OPEN_ID,
        sender_name="Alice",
        create_time_ms=now + 1000,
    )
    api.add_message(  # the bot's card of an earlier analysis
        "om_old_card_0000000000000000000001",
        root_id=ROOT,
        msg_type="interactive",
        content={
            "schema": "2.0",
            "body": {"elements": [{"tag": "markdown", "content": CARD_TEXT}]},
        },
        sender_id=sg.FEISHU_APP_ID,
        sender_type="app",
        create_time_ms=now + 2000,
    )
    api.add_message(
        "om_reply_two_000000000000000000001",
        root_id=ROOT,
        msg_type="post",
        content={
            "zh_cn": {
                "title": "",
                "content": [[{"tag": "text", "text": "db looks fine, p99 of queries 20ms"}]],
            }
        },
        sender_id=FEISHU_BOB,
        sender_name="Bob",
        create_time_ms=now + 3000,
    )
    api.add_message(
        MENTION,
        root_id=ROOT,
        text="@_user_1 what is going on?",
        sender_id=sg.FEISHU_USER_OPEN_ID,
        create_time_ms=now + 4000,
    )


async def feishu_mention(running: Any) -> None:
    event = sg.feishu_message_receive(
        message_id=MENTION, root_id=ROOT, parent_id=ROOT, text="@_user_1 what is going on?"
    )
    body, headers = sg.feishu_request(
        event, encrypt_key=FEISHU_KEY, verification_token=FEISHU_TOKEN
    )
    response = await running.http.post("/feishu/events", content=body, headers=headers)
    assert response.status_code == 200, response.text


def feishu_card_text(api: FakeFeishuAPI) -> str:
    (posted,) = [c for c in api.calls_to("im.v1.message.reply") if c.status == 200]
    card_id = posted.response["data"]["message_id"]
    patches = [
        c
        for c in api.calls_to("im.v1.message.patch")
        if c.path_params["message_id"] == card_id and c.status == 200
    ]
    last = json.loads((patches or [posted])[-1].params["content"])
    return "\n".join(str(e.get("content", "")) for e in last["body"]["elements"])


async def test_feishu_first_request_carries_the_alert_card_and_the_replies_in_order(
    bot_settings: Settings, redis_client, fake_llm, feishu_api: FakeFeishuAPI
) -> None:
    fake_llm.script(fp.TextReply("checkout is slow because of the gateway."))
    seed_feishu_thread(feishu_api)
    async with open_bot(feishu_settings(bot_settings, feishu_api), redis_client) as running:
        await running.start_worker()
        await feishu_mention(running)
        assert running.worker is not None
        await running.worker.wait_finished(1)

    (request,) = fake_llm.requests
    context, task = user_contents(request)
    assert task.endswith("what is going on?") and "what is going on" not in context
    assert "Grafana Alerts (app) (root)" in context
    assert "[FIRING] CheckoutHighLatency" in context and "p99 latency is 2.4s" in context
    assert context.index("Grafana Alerts") < context.index("Alice") < context.index("Bob")
    assert context.index("restarted checkout-api-7f9") < context.index("db looks fine")
    assert CARD_TEXT not in context
    assert context.rstrip().endswith("</chat_message>") and context.count("</chat_message>") == 1
    assert context.index("<chat_message") < context.index(f"- {RUNBOOK}\n")
    assert context.index(f"- {RUNBOOK}\n") < context.index("Grafana Alerts")
    (listed,) = {c.query["container_id_type"] for c in feishu_api.calls_to("im.v1.message.list")}
    assert listed == "thread"


async def test_feishu_thread_that_cannot_be_read_the_analysis_runs_and_the_card_says_so(
    bot_settings: Settings, redis_client, fake_llm, feishu_api: FakeFeishuAPI
) -> None:
    fake_llm.script(fp.TextReply("Answered without the thread."))
    seed_feishu_thread(feishu_api)
    feishu_api.script(
        "im.v1.message.get",
        feishu_error(
            SCOPE_MISSING,
            "Access denied. One of the following scopes is required: [im:message:readonly]",
        ),
    )
    async with open_bot(feishu_settings(bot_settings, feishu_api), redis_client) as running:
        await running.start_worker()
        await feishu_mention(running)
        assert running.worker is not None
        await running.worker.wait_finished(1)

    (request,) = fake_llm.requests
    assert [m["role"] for m in request.messages] == ["system", "user"]
    shown = feishu_card_text(feishu_api)
    assert "Answered without the thread" in shown
    assert "Started without the thread" in shown and "99991672" in shown
