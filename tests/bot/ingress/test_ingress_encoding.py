r"""Fault matrix X14: text that cannot be encoded, in an authentic body, is a 400, never a 500.

Why this way: the failure was a lone surrogate escape (`"\ud800"`) that the JSON parser let
through and the Redis write could not encode, a 500 with a traceback. It lives between the
parser and the write, so each route is driven end to end: the real app over ASGI with its
lifespan, every body signed (Slack), encrypted and signed (Feishu) or carrying the bearer token
(console) exactly as the platform would send it, and a real Redis whose turns stream must stay
empty on a refusal. A valid surrogate pair (an emoji escaped the same way) must still go
through, and a bad signature must still be a 401 first: the check is after verification.
Bodies are built with `ensure_ascii=True`, so the surrogate travels as the `\uXXXX` escape a
sender would write (raw surrogates cannot be UTF-8 at all).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from bot.adapters.slack.inbound import SlackIdentity
from bot.ingress.app import create_app
from bot.keys import BotKeys
from bot.settings import Settings
from tests.fakes import signing as sg
from tests.fakes.feishu_api import FakeFeishuAPI

SLACK_SECRET = "encoding-signing-secret-0000000000"
ENCRYPT_KEY = "encoding-encrypt-key-0123456789"
TOKEN = "encoding-verification-token"
CONSOLE_TOKEN = "encoding-console-token"
KEYS = BotKeys()

LONE = ["\ud800", "\udfff"]
"""A lone leading and a lone trailing surrogate."""
EMOJI = "\U0001f600"
"""Sent as the pair `\\ud83d\\ude00`: must be accepted."""


@pytest.fixture
async def client(
    feishu_api: FakeFeishuAPI, redis_client: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(
        _env_file=None,
        SLACK_SIGNING_SECRET=SLACK_SECRET,
        SLACK_BOT_TOKEN="xoxb-test",
        FEISHU_APP_ID=sg.FEISHU_APP_ID,
        FEISHU_APP_SECRET=sg.FEISHU_APP_SECRET,
        FEISHU_ENCRYPT_KEY=ENCRYPT_KEY,
        FEISHU_VERIFICATION_TOKEN=TOKEN,
        FEISHU_DOMAIN=feishu_api.base_url,
        CHATOPS_CONSOLE_TOKEN=CONSOLE_TOKEN,
    )
    identity = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)
    app = create_app(settings, redis=redis_client, slack=identity)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
            yield http


def escaped(payload: Any) -> bytes:
    r"""Compact JSON with every non-ASCII character as a `\uXXXX` escape (surrogates too)."""
    return json.dumps(payload, separators=(",", ":")).encode()


async def stream_len(redis: aioredis.Redis) -> int:
    return int(await redis.xlen(KEYS.turns_stream))


def assert_clean_400(response: httpx.Response, caplog: pytest.LogCaptureFixture) -> None:
    assert response.status_code == 400, response.text
    assert response.json() == {"error": "malformed request"}
    assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"


# --- Slack events ------------------------------------------------------------------------------


def slack_mention(text: str) -> tuple[bytes, dict[str, str]]:
    payload = sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> {text}", ts=sg.slack_ts())
    return sg.slack_request(escaped(payload), secret=SLACK_SECRET)


@pytest.mark.parametrize("lone", LONE, ids=["ud800", "udfff"])
async def test_x14_slack_event_with_a_lone_surrogate_is_400(
    client, redis_client, caplog, lone
) -> None:
    """X14: a signed Slack event whose text holds a lone surrogate escape."""
    caplog.set_level(logging.INFO)
    body, headers = slack_mention(f"checkout {lone} is down")
    assert b"\\ud8" in body or b"\\udf" in body  # the escape is what travels
    response = await client.post("/slack/events", content=body, headers=headers)
    assert_clean_400(response, caplog)
    assert response.headers["x-slack-no-retry"] == "1"
    assert await stream_len(redis_client) == 0


async def test_x14_slack_event_with_an_escaped_emoji_is_accepted(client, redis_client) -> None:
    """X14: a valid surrogate pair is one character, written as it was meant."""
    body, headers = slack_mention(f"checkout {EMOJI} is down")
    assert b"\\ud83d\\ude00" in body
    response = await client.post("/slack/events", content=body, headers=headers)
    assert response.status_code == 200, response.text
    entry = (await redis_client.xrange(KEYS.turns_stream))[0][1]
    assert json.loads(entry[b"job"])["event"]["text"] == f"checkout {EMOJI} is down"


async def test_x14_a_badly_signed_body_with_a_lone_surrogate_is_401_first(
    client, redis_client
) -> None:
    """X14: the signature is verified before the body is parsed."""
    body, headers = slack_mention("down \ud800")
    headers["X-Slack-Signature"] = "v0=" + "0" * 64
    response = await client.post("/slack/events", content=body, headers=headers)
    assert response.status_code == 401
    assert await stream_len(redis_client) == 0


# --- Slack interactivity -----------------------------------------------------------------------


def slack_press(value: str) -> tuple[bytes, dict[str, str]]:
    payload = sg.slack_block_actions(action_id="stop", value=value, message_ts=sg.slack_ts())
    return sg.slack_interactivity(payload, secret=SLACK_SECRET)  # its JSON is ensure_ascii


@pytest.mark.parametrize("lone", LONE, ids=["ud800", "udfff"])
async def test_x14_slack_button_press_with_a_lone_surrogate_is_400(
    client, redis_client, caplog, lone
) -> None:
    """X14: a signed interactivity payload whose button value holds a lone surrogate."""
    caplog.set_level(logging.INFO)
    body, headers = slack_press(f"t{lone}")
    response = await client.post("/slack/events", content=body, headers=headers)
    assert_clean_400(response, caplog)
    assert await stream_len(redis_client) == 0


async def test_x14_slack_button_press_with_an_escaped_emoji_is_not_refused(client) -> None:
    """X14: the same press with a valid pair is read (a Stop of no live turn: 200)."""
    body, headers = slack_press(f"t{EMOJI}")
    response = await client.post("/slack/events", content=body, headers=headers)
    assert response.status_code == 200, response.text


# --- Feishu ------------------------------------------------------------------------------------


def sealed(plaintext: str) -> tuple[bytes, dict[str, str]]:
    """Encrypt and sign a plaintext exactly as given (its escapes untouched)."""
    body = json.dumps({"encrypt": sg.feishu_encrypt(plaintext, ENCRYPT_KEY)}).encode()
    timestamp = str(int(time.time()))
    nonce = uuid.uuid4().hex
    return body, {
        "Content-Type": "application/json; charset=utf-8",
        "X-Lark-Request-Timestamp": timestamp,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": sg.feishu_signature(timestamp, nonce, ENCRYPT_KEY, body),
    }


def feishu_message(text: str, *, nested_escape: str = "") -> str:
    """A message event's plaintext; `nested_escape` is written raw into the inner content."""
    payload = sg.feishu_message_receive(text=f"@_user_1 {text}")
    payload["header"]["token"] = TOKEN
    if nested_escape:  # the content is JSON text whose own escape only its own parse decodes
        payload["event"]["message"]["content"] = '{"text":"@_user_1 down ' + nested_escape + '"}'
    return json.dumps(payload, separators=(",", ":"))


@pytest.mark.parametrize("lone", LONE, ids=["ud800", "udfff"])
async def test_x14_feishu_event_with_a_lone_surrogate_is_400(
    client, redis_client, caplog, lone
) -> None:
    """X14: a lone surrogate escape in the decrypted payload (the sender's open id)."""
    caplog.set_level(logging.INFO)
    payload = json.loads(feishu_message("down"))
    payload["event"]["sender"]["sender_id"]["open_id"] = f"ou_{lone}"
    body, headers = sealed(json.dumps(payload, separators=(",", ":")))
    response = await client.post("/feishu/events", content=body, headers=headers)
    assert_clean_400(response, caplog)
    assert await stream_len(redis_client) == 0


@pytest.mark.parametrize("escape", ["\\ud800", "\\udfff"], ids=["ud800", "udfff"])
async def test_x14_feishu_message_content_with_a_lone_surrogate_is_400(
    client, redis_client, caplog, escape
) -> None:
    """X14: the escape inside the message's content, JSON within the JSON."""
    caplog.set_level(logging.INFO)
    body, headers = sealed(feishu_message("", nested_escape=escape))
    response = await client.post("/feishu/events", content=body, headers=headers)
    assert_clean_400(response, caplog)
    assert await stream_len(redis_client) == 0


async def test_x14_feishu_message_with_escaped_emoji_is_accepted(client, redis_client) -> None:
    """X14: a valid pair, at both levels, reaches the turns stream as the one character."""
    body, headers = sealed(feishu_message("x", nested_escape=f"{EMOJI} \\ud83d\\ude00"))
    response = await client.post("/feishu/events", content=body, headers=headers)
    assert response.status_code == 200, response.text
    entry = (await redis_client.xrange(KEYS.turns_stream))[0][1]
    assert json.loads(entry[b"job"])["event"]["text"] == f"down {EMOJI} {EMOJI}"


@pytest.mark.parametrize("lone", LONE, ids=["ud800", "udfff"])
async def test_x14_feishu_card_callback_with_a_lone_surrogate_is_400(client, caplog, lone) -> None:
    """X14: a card button press whose value holds a lone surrogate escape."""
    caplog.set_level(logging.INFO)
    payload = sg.feishu_card_action(
        value={"action": "stop", "turn": f"t{lone}"}, open_message_id="om_1", token=TOKEN
    )
    payload["header"]["token"] = TOKEN
    body, headers = sealed(json.dumps(payload, separators=(",", ":")))
    response = await client.post("/feishu/card", content=body, headers=headers)
    assert_clean_400(response, caplog)


# --- Console -----------------------------------------------------------------------------------


def console_message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "channel": "ops",
        "thread": "t-1",
        "message_id": f"m-{sg.slack_ts()}",
        "user": "alice",
        "text": text,
        "mention": True,
    }


@pytest.mark.parametrize("lone", LONE, ids=["ud800", "udfff"])
async def test_x14_console_message_with_a_lone_surrogate_is_400(
    client, redis_client, caplog, lone
) -> None:
    """X14: a console client (token held) sending a lone surrogate escape."""
    caplog.set_level(logging.INFO)
    headers = {"authorization": f"Bearer {CONSOLE_TOKEN}", "content-type": "application/json"}
    body = escaped(console_message(f"down {lone}"))
    response = await client.post("/console/events", content=body, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == "malformed request"
    assert "surrogate" in response.json()["detail"] or "hex escape" in response.json()["detail"]
    assert not [r for r in caplog.records if r.exc_info]
    assert await stream_len(redis_client) == 0


async def test_x14_console_message_with_an_escaped_emoji_is_accepted(client, redis_client) -> None:
    """X14: the console's valid pair is written as the one character."""
    headers = {"authorization": f"Bearer {CONSOLE_TOKEN}", "content-type": "application/json"}
    body = escaped(console_message(f"down {EMOJI}"))
    assert b"\\ud83d\\ude00" in body
    response = await client.post("/console/events", content=body, headers=headers)
    assert response.status_code == 200, response.text
    entry = (await redis_client.xrange(KEYS.turns_stream))[0][1]
    assert json.loads(entry[b"job"])["event"]["text"] == f"down {EMOJI}"
