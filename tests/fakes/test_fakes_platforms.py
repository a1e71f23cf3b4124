"""Tests for the Slack/Feishu request builders and the fake Slack and Feishu APIs.

Why this way: the bot's adapters will be tested against these fakes, so the fakes themselves
must be proven against the real SDKs rather than against our idea of the protocols. Signed
requests are checked with the platforms' own verifiers (slack_sdk's ``SignatureVerifier``,
slack-bolt's request parsing and dispatch, lark-oapi's ``AESCipher`` and event/card
dispatchers); the fake APIs are driven only through the real ``AsyncWebClient`` and lark-oapi
``Client`` over loopback HTTP, never by calling their handlers directly. lark-oapi is imported
inside the tests that need it because importing it costs seconds (docs/design.md §Platform facts).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs

import pytest
from slack_bolt.request.internals import parse_body
from slack_bolt.request.payload_utils import is_action, is_event
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from tests.fakes.feishu_api import (
    ELEMENT_NOT_FOUND,
    MESSAGE_RATE_LIMITED,
    MESSAGE_RECALLED,
    RATE_LIMITED,
    SEQUENCE_COMPARE_FAILED,
    STREAMING_CLOSED,
    TOKEN_INVALID,
    FakeFeishuAPI,
    _feishu_api_server,
    feishu_api,
    frequency_limited,
)
from tests.fakes.signing import (
    FEISHU_APP_ID,
    FEISHU_APP_SECRET,
    FEISHU_BOT_OPEN_ID,
    FEISHU_CHAT_ID,
    SLACK_BOT_ID,
    SLACK_BOT_USER_ID,
    SLACK_CHANNEL_ID,
    SLACK_TEAM_ID,
    feishu_card_action,
    feishu_decrypt,
    feishu_legacy_card_action,
    feishu_legacy_card_request,
    feishu_message_receive,
    feishu_message_receive_v1,
    feishu_request,
    feishu_url_verification,
    slack_app_mention,
    slack_block_actions,
    slack_bot_message,
    slack_interactivity,
    slack_message,
    slack_message_changed,
    slack_message_deleted,
    slack_own_message,
    slack_request,
    slack_ts,
    slack_url_verification,
)
from tests.fakes.slack_api import (
    MAX_BLOCKS,
    FakeSlackAPI,
    _slack_api_server,
    ratelimited,
    slack_api,
    slack_error,
    slow,
)

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
ENCRYPT_KEY = "test-encrypt-key-0123"
VERIFICATION_TOKEN = "test-verification-token"

# Registered by import; pinned fixture names make the aliases harmless.
_fixtures = (_slack_api_server, slack_api, _feishu_api_server, feishu_api)


def _client(api: FakeSlackAPI) -> AsyncWebClient:
    return AsyncWebClient(token=api.token, base_url=api.base_url)


# --- Slack signing and payloads ---------------------------------------------------------------


def test_slack_event_is_signed_the_way_slack_sdk_verifies() -> None:
    payload = slack_app_mention(text=f"<@{SLACK_BOT_USER_ID}> 结账 500 了 🔥")
    body, headers = slack_request(payload, secret=SECRET)

    assert SignatureVerifier(SECRET).is_valid_request(body, headers)
    assert headers["Content-Type"] == "application/json"
    assert "结账".encode() in body, "multibyte text is sent as UTF-8, not \\u escapes"
    assert parse_body(body.decode(), headers["Content-Type"]) == payload
    assert is_event(payload)
    tampered = body.replace(b"500", b"501")
    assert not SignatureVerifier(SECRET).is_valid_request(tampered, headers)
    assert not SignatureVerifier("another-secret").is_valid_request(body, headers)


@pytest.mark.parametrize(
    ("skew", "valid"), [(-301, False), (-299, True), (299, True), (301, False)]
)
def test_slack_timestamp_is_signed_and_windowed(skew: int, valid: bool) -> None:
    body, headers = slack_request(
        slack_url_verification(), secret=SECRET, timestamp=time.time() + skew
    )

    assert SignatureVerifier(SECRET).is_valid_request(body, headers) is valid


def test_slack_retry_headers_and_verbatim_timestamps() -> None:
    body, headers = slack_request(
        slack_message(), secret=SECRET, retry_num=2, retry_reason="http_timeout"
    )
    assert headers["X-Slack-Retry-Num"] == "2"
    assert headers["X-Slack-Retry-Reason"] == "http_timeout"

    _, malformed = slack_request(b"{}", secret=SECRET, timestamp="1e3")
    assert malformed["X-Slack-Request-Timestamp"] == "1e3"


def test_slack_interactivity_is_a_form_encoded_payload() -> None:
    payload = slack_block_actions(action_id="stop_run", value="run-42", message_ts=slack_ts())
    body, headers = slack_interactivity(payload, secret=SECRET)

    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert SignatureVerifier(SECRET).is_valid_request(body, headers)
    assert json.loads(parse_qs(body.decode())["payload"][0]) == payload
    parsed = parse_body(body.decode(), headers["Content-Type"])
    assert parsed == payload
    assert is_action(parsed)
    action = parsed["actions"][0]
    assert (action["type"], action["action_id"], action["value"]) == (
        "button",
        "stop_run",
        "run-42",
    )
    assert parsed["container"]["message_ts"] == parsed["message"]["ts"]


def test_slack_payload_shapes() -> None:
    ts = slack_ts()
    mention = slack_app_mention(ts=ts, thread_ts="1700000000.000100")
    message = slack_message(ts=ts, thread_ts="1700000000.000100")

    assert mention["type"] == "event_callback"
    assert mention["event"]["type"] == "app_mention"
    assert mention["event"]["text"].startswith(f"<@{SLACK_BOT_USER_ID}>")
    assert mention["authorizations"][0]["user_id"] == SLACK_BOT_USER_ID
    assert message["event"]["ts"] == ts and message["event"]["channel_type"] == "channel"
    assert mention["event_id"] != message["event_id"], "two deliveries of one message (S11)"
    assert slack_own_message()["event"]["bot_id"] == SLACK_BOT_ID
    assert slack_bot_message()["event"]["subtype"] == "bot_message"
    changed = slack_message_changed(ts=ts, text="new", previous_text="old")["event"]
    assert (changed["subtype"], changed["message"]["ts"], changed["message"]["text"]) == (
        "message_changed",
        ts,
        "new",
    )
    deleted = slack_message_deleted(deleted_ts=ts)["event"]
    assert (deleted["subtype"], deleted["deleted_ts"]) == ("message_deleted", ts)
    assert slack_url_verification("abc")["challenge"] == "abc"


async def test_bolt_accepts_the_signed_requests(slack_api: FakeSlackAPI) -> None:
    from slack_bolt.async_app import AsyncApp
    from slack_bolt.request.async_request import AsyncBoltRequest

    app = AsyncApp(client=_client(slack_api), signing_secret=SECRET, process_before_response=True)
    seen: list[str] = []

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any]) -> None:
        seen.append(event["text"])

    @app.action("stop_run")
    async def on_stop(ack: Any, body: dict[str, Any]) -> None:
        await ack()
        seen.append(body["actions"][0]["value"])

    mention_body, mention_headers = slack_request(slack_app_mention(), secret=SECRET)
    click = slack_block_actions(action_id="stop_run", value="run-7", message_ts=slack_ts())
    click_body, click_headers = slack_interactivity(click, secret=SECRET)
    challenge_body, challenge_headers = slack_request(slack_url_verification("c1"), secret=SECRET)

    def bolt_request(body: bytes, headers: dict[str, str]) -> AsyncBoltRequest:
        multi: dict[str, str | Sequence[str]] = dict(headers)
        return AsyncBoltRequest(body=body.decode(), headers=multi)

    for body, headers in [(mention_body, mention_headers), (click_body, click_headers)]:
        response = await app.async_dispatch(bolt_request(body, headers))
        assert response.status == 200
    challenge = await app.async_dispatch(bolt_request(challenge_body, challenge_headers))
    forged_headers = {**mention_headers, "X-Slack-Signature": "v0=" + "0" * 64}
    forged = await app.async_dispatch(bolt_request(mention_body, forged_headers))

    assert seen == [slack_app_mention()["event"]["text"], "run-7"]
    assert json.loads(challenge.body) == {"challenge": "c1"}
    assert forged.status == 401
    assert [c.operation for c in slack_api.calls] == ["auth.test"]


# --- Feishu signing and payloads --------------------------------------------------------------


def _raw_request(body: bytes, headers: dict[str, str]) -> Any:
    from lark_oapi.core.model import RawRequest

    request = RawRequest()
    request.uri = "/feishu/events"
    request.body = body
    request.headers = headers
    return request


def test_feishu_body_decrypts_with_lark_and_signature_matches() -> None:
    from lark_oapi.core.utils import AESCipher

    payload = feishu_message_receive()
    body, headers = feishu_request(
        payload, encrypt_key=ENCRYPT_KEY, verification_token=VERIFICATION_TOKEN, nonce="n0nce"
    )

    plaintext = AESCipher(ENCRYPT_KEY).decrypt_str(json.loads(body)["encrypt"])
    assert json.loads(plaintext)["header"]["token"] == VERIFICATION_TOKEN
    assert json.loads(plaintext)["event"] == payload["event"]
    assert feishu_decrypt(json.loads(body)["encrypt"], ENCRYPT_KEY) == plaintext
    assert headers["X-Lark-Request-Nonce"] == "n0nce"
    # lark-oapi's own check (dispatcher_handler._verify_sign); it raises on a mismatch.
    import lark_oapi as lark
    from lark_oapi.core.exception import AccessDeniedException

    dispatcher = lark.EventDispatcherHandler.builder(ENCRYPT_KEY, VERIFICATION_TOKEN).build()
    dispatcher._verify_sign(_raw_request(body, headers), ENCRYPT_KEY)
    with pytest.raises(AccessDeniedException):
        dispatcher._verify_sign(_raw_request(body + b" ", headers), ENCRYPT_KEY)


def test_lark_dispatches_the_signed_events_and_callbacks() -> None:
    import lark_oapi as lark
    from lark_oapi.event.callback.model.p2_card_action_trigger import (
        P2CardActionTriggerResponse,
    )

    received: list[Any] = []

    def on_card(data: Any) -> P2CardActionTriggerResponse:
        received.append(data)
        return P2CardActionTriggerResponse({"toast": {"type": "info", "content": "stopping"}})

    dispatcher = (
        lark.EventDispatcherHandler.builder(ENCRYPT_KEY, VERIFICATION_TOKEN)
        .register_p2_im_message_receive_v1(received.append)
        .register_p1_customized_event("message", received.append)
        .register_p2_card_action_trigger(on_card)
        .build()
    )

    def send(payload: dict[str, Any], **kwargs: Any) -> Any:
        kwargs.setdefault("verification_token", VERIFICATION_TOKEN)
        body, headers = feishu_request(payload, encrypt_key=ENCRYPT_KEY, **kwargs)
        return dispatcher.do(_raw_request(body, headers))

    message = feishu_message_receive(root_id="om_root", parent_id="om_root")
    assert send(message).status_code == 200
    assert send(feishu_message_receive_v1(text="hello")).status_code == 200
    card = send(feishu_card_action(value={"action": "stop"}, open_message_id="om_card"))
    assert card.status_code == 200
    assert json.loads(card.content)["toast"]["content"] == "stopping"
    for encrypt in (True, False):
        challenge = send(feishu_url_verification("ch-1"), encrypt=encrypt)
        assert json.loads(challenge.content) == {"challenge": "ch-1"}
    assert send(message, verification_token="wrong").status_code == 500  # F10 (lark: 500)
    assert send(message, sign=False).status_code == 500  # F4: lark's TypeError, as a 500

    event, v1, callback = received
    assert event.header.event_type == "im.message.receive_v1"
    assert event.event.message.mentions[0].id.open_id == FEISHU_BOT_OPEN_ID
    assert json.loads(event.event.message.content)["text"].startswith("@_user_1 ")
    assert event.event.message.root_id == "om_root"
    assert event.event.sender.sender_type == "user"
    assert v1.event["text_without_at_bot"] == " hello"
    assert callback.event.action.value == {"action": "stop"}
    assert callback.event.context.open_message_id == "om_card"


def test_legacy_card_callback_is_signed_with_sha1() -> None:
    import lark_oapi as lark

    clicks: list[Any] = []
    handler = (
        lark.CardActionHandler.builder(ENCRYPT_KEY, VERIFICATION_TOKEN)
        .register(clicks.append)
        .build()
    )
    payload = feishu_legacy_card_action(value={"run": "r1"}, open_message_id="om_card")
    body, headers = feishu_legacy_card_request(payload, verification_token=VERIFICATION_TOKEN)

    assert handler.do(_raw_request(body, headers)).status_code == 200
    assert clicks[0].action.value == {"run": "r1"}
    wrong, wrong_headers = feishu_legacy_card_request(payload, verification_token="nope")
    assert handler.do(_raw_request(wrong, wrong_headers)).status_code == 500


# --- Fake Slack API through AsyncWebClient ----------------------------------------------------


async def test_slack_post_update_delete_through_the_sdk(slack_api: FakeSlackAPI) -> None:
    client = _client(slack_api)

    me = await client.auth_test()
    posted = await client.chat_postMessage(
        channel=SLACK_CHANNEL_ID, thread_ts="1700000000.000100", text="Investigating…"
    )
    updated = await client.chat_update(channel=SLACK_CHANNEL_ID, ts=posted["ts"], text="Done")
    await client.chat_delete(channel=SLACK_CHANNEL_ID, ts=posted["ts"])
    with pytest.raises(SlackApiError) as gone:
        await client.chat_update(channel=SLACK_CHANNEL_ID, ts=posted["ts"], text="again")

    assert (me["user_id"], me["bot_id"], me["team_id"]) == (
        SLACK_BOT_USER_ID,
        SLACK_BOT_ID,
        SLACK_TEAM_ID,
    )
    assert posted["message"]["bot_id"] == SLACK_BOT_ID
    assert posted["message"]["thread_ts"] == "1700000000.000100"
    assert updated["message"]["text"] == "Done"
    assert gone.value.response["error"] == "message_not_found"
    assert slack_api.posts() == []
    post, _, delete, _ = slack_api.calls[1:]
    assert post.headers["content-type"].startswith("application/json")
    assert delete.params == {"channel": SLACK_CHANNEL_ID, "ts": posted["ts"]}, "sent as query"
    assert {c.token for c in slack_api.calls} == {slack_api.token}


async def test_slack_auth_and_unknown_methods(slack_api: FakeSlackAPI) -> None:
    with pytest.raises(SlackApiError) as wrong:
        await AsyncWebClient(token="xoxb-wrong", base_url=slack_api.base_url).auth_test()
    with pytest.raises(SlackApiError) as missing:
        await AsyncWebClient(base_url=slack_api.base_url).auth_test()
    with pytest.raises(SlackApiError) as unknown:
        await _client(slack_api).api_call("chat.teleport")

    assert wrong.value.response["error"] == "invalid_auth"
    assert missing.value.response["error"] == "not_authed"
    assert unknown.value.response["error"] == "unknown_method"


async def test_slack_scripted_faults(slack_api: FakeSlackAPI) -> None:
    client = _client(slack_api)
    posted = await client.chat_postMessage(channel=SLACK_CHANNEL_ID, text="v1")
    slack_api.script("chat.update", ratelimited(retry_after=7), slack_error("message_not_found"))

    with pytest.raises(SlackApiError) as limited:
        await client.chat_update(channel=SLACK_CHANNEL_ID, ts=posted["ts"], text="v2")
    with pytest.raises(SlackApiError) as not_found:
        await client.chat_update(channel=SLACK_CHANNEL_ID, ts=posted["ts"], text="v3")
    await client.chat_update(channel=SLACK_CHANNEL_ID, ts=posted["ts"], text="v4")

    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "7"
    assert limited.value.response["error"] == "ratelimited"
    assert not_found.value.response["error"] == "message_not_found"
    assert [c.status for c in slack_api.calls_to("chat.update")] == [429, 200, 200]
    assert slack_api.posts()[0]["text"] == "v4", "scripted errors change nothing"
    assert slack_api.remaining() == 0


async def test_slack_slow_answer_happens_after_the_work(slack_api: FakeSlackAPI) -> None:
    client = _client(slack_api)
    slack_api.script("chat.postMessage", slow(0.3))
    started = time.monotonic()

    pending = asyncio.create_task(client.chat_postMessage(channel=SLACK_CHANNEL_ID, text="hi"))
    await slack_api.wait_for_calls(1, "chat.postMessage")
    assert not pending.done()
    assert [p["text"] for p in slack_api.posts()] == ["hi"], "posted before the answer"
    await pending

    assert time.monotonic() - started >= 0.3


async def test_reset_releases_a_held_answer(slack_api: FakeSlackAPI) -> None:
    slack_api.script("auth.test", slow(30))
    pending = asyncio.create_task(_client(slack_api).auth_test())
    await slack_api.wait_for_calls(1, "auth.test")

    slack_api.reset()
    async with asyncio.timeout(2):
        assert (await pending)["ok"]


def test_feishu_script_rejects_unknown_operations(feishu_api: FakeFeishuAPI) -> None:
    with pytest.raises(ValueError, match="im.v1.message.patch"):
        feishu_api.script("im.message.patch", frequency_limited())


async def test_slack_block_limits(slack_api: FakeSlackAPI) -> None:
    client = _client(slack_api)
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "x"}}
    button = {
        "type": "button",
        "action_id": "stop",
        "value": "v" * 2001,
        "text": {"type": "plain_text", "text": "Stop"},
    }

    await client.chat_postMessage(
        channel=SLACK_CHANNEL_ID, text="ok", blocks=[section] * MAX_BLOCKS
    )
    with pytest.raises(SlackApiError) as too_many:
        await client.chat_postMessage(channel=SLACK_CHANNEL_ID, text="x", blocks=[section] * 51)
    with pytest.raises(SlackApiError) as too_long:
        await client.chat_postMessage(
            channel=SLACK_CHANNEL_ID, text="x", blocks=[{"type": "actions", "elements": [button]}]
        )

    assert too_many.value.response["error"] == "invalid_blocks"
    assert too_long.value.response["error"] == "invalid_blocks"


async def test_slack_threads_status_and_users(slack_api: FakeSlackAPI) -> None:
    client = _client(slack_api)
    root = slack_ts()
    slack_api.add_message(SLACK_CHANNEL_ID, root, f"<@{SLACK_BOT_USER_ID}> why?")
    await client.chat_postMessage(channel=SLACK_CHANNEL_ID, thread_ts=root, text="Looking")
    await client.assistant_threads_setStatus(
        channel_id=SLACK_CHANNEL_ID, thread_ts=root, status="is checking logs…"
    )

    replies = await client.conversations_replies(channel=SLACK_CHANNEL_ID, ts=root)
    user = await client.users_info(user="U0HUMAN01")
    with pytest.raises(SlackApiError) as human:
        await client.chat_update(channel=SLACK_CHANNEL_ID, ts=root, text="edited")

    assert [m["text"] for m in replies["messages"]] == [f"<@{SLACK_BOT_USER_ID}> why?", "Looking"]
    assert user["user"]["name"] == "alice"
    assert slack_api.thread_status(SLACK_CHANNEL_ID, root) == "is checking logs…"
    assert human.value.response["error"] == "cant_update_message"


async def test_slack_replies_page_as_slack_does(slack_api: FakeSlackAPI) -> None:
    client = _client(slack_api)
    root = slack_ts()
    slack_api.add_app_message(
        SLACK_CHANNEL_ID,
        root,
        bot_id="B0ALERTS",
        name="Alertmanager",
        attachments=[{"fallback": "[FIRING:1] X", "text": "p99 2s"}],
        blocks=[{"type": "header", "text": {"type": "plain_text", "text": "X"}}],
    )
    replies = [slack_ts() for _ in range(4)]
    for ts in replies:
        slack_api.add_message(SLACK_CHANNEL_ID, ts, f"reply {ts}", thread_ts=root)

    first = await client.conversations_replies(channel=SLACK_CHANNEL_ID, ts=root, limit=3)
    rest = await client.conversations_replies(
        channel=SLACK_CHANNEL_ID, ts=root, limit=3, cursor=first["response_metadata"]["next_cursor"]
    )
    before = await client.conversations_replies(
        channel=SLACK_CHANNEL_ID, ts=root, latest=replies[2], inclusive=False
    )
    slack_api.script(
        "conversations.replies", slack_error("missing_scope", needed="channels:history")
    )
    with pytest.raises(SlackApiError) as refused:
        await client.conversations_replies(channel=SLACK_CHANNEL_ID, ts=root)
    with pytest.raises(SlackApiError) as unknown:
        await client.conversations_replies(channel=SLACK_CHANNEL_ID, ts=slack_ts())

    parent = first["messages"][0]
    assert (parent["ts"], parent["subtype"], parent["bot_id"]) == (root, "bot_message", "B0ALERTS")
    assert parent["attachments"][0]["text"] == "p99 2s" and parent["blocks"][0]["type"] == "header"
    assert [m["ts"] for m in first["messages"][1:]] == replies[:2] and first["has_more"]
    assert [m["ts"] for m in rest["messages"]] == replies[2:] and not rest["has_more"]
    assert rest["response_metadata"]["next_cursor"] == ""
    assert [m["ts"] for m in before["messages"]] == [root, *replies[:2]]
    assert refused.value.response["needed"] == "channels:history"
    assert unknown.value.response["error"] == "thread_not_found"


# --- Fake Feishu API through lark-oapi --------------------------------------------------------


def _lark_client(api: FakeFeishuAPI, **builder: Any) -> Any:
    import lark_oapi as lark

    chain = lark.Client.builder().app_id(FEISHU_APP_ID).app_secret(FEISHU_APP_SECRET)
    chain = chain.domain(api.base_url)
    if builder.get("enable_set_token"):
        chain = chain.enable_set_token(True)
    return chain.build()


def _card(text: str = "Investigating…", *, streaming: bool = False) -> str:
    return json.dumps(
        {
            "schema": "2.0",
            "config": {"update_multi": True, "streaming_mode": streaming},
            "body": {"elements": [{"tag": "markdown", "element_id": "answer", "content": text}]},
        }
    )


async def test_feishu_reply_then_patch_through_lark(feishu_api: FakeFeishuAPI) -> None:
    from lark_oapi.api.im.v1 import (
        PatchMessageRequest,
        PatchMessageRequestBody,
        ReplyMessageRequest,
        ReplyMessageRequestBody,
    )

    client = _lark_client(feishu_api)
    reply = await client.im.v1.message.areply(
        ReplyMessageRequest.builder()
        .message_id("om_user_mention")
        .request_body(
            ReplyMessageRequestBody.builder()
            .msg_type("interactive")
            .content(_card())
            .reply_in_thread(True)
            .uuid("run-1-card")
            .build()
        )
        .build()
    )
    assert reply.success(), (reply.code, reply.msg)
    message_id = reply.data.message_id
    patch = await client.im.v1.message.apatch(
        PatchMessageRequest.builder()
        .message_id(message_id)
        .request_body(PatchMessageRequestBody.builder().content(_card("Done")).build())
        .build()
    )

    assert patch.success(), (patch.code, patch.msg)
    assert reply.data.root_id == reply.data.parent_id == "om_user_mention"
    assert reply.data.thread_id and reply.data.sender.sender_type == "app"
    stored = feishu_api.message(message_id)
    assert stored is not None and "Done" in stored["body"]["content"]
    patch_call = feishu_api.calls_to("im.v1.message.patch")[0]
    assert patch_call.token == feishu_api.tenant_access_token
    assert patch_call.path_params == {"message_id": message_id}
    assert patch.raw.headers["x-tt-logid"], "X-Tt-Logid is on every answer"
    # lark-oapi's async transport lower-cases header names, so its "X-Tt-Logid" lookup misses.
    assert patch.get_log_id() is None


async def test_feishu_get_and_list_a_topic_through_lark(feishu_api: FakeFeishuAPI) -> None:
    from lark_oapi.api.im.v1 import GetMessageRequest, ListMessageRequest

    client = _lark_client(feishu_api)
    feishu_api.add_message("om_topic_root", text="alert", sender_id="cli_alerts", sender_type="app")
    for i in range(3):
        feishu_api.add_message(f"om_topic_{i}", root_id="om_topic_root", text=f"reply {i}")
    got = client.im.v1.message.get(GetMessageRequest.builder().message_id("om_topic_root").build())
    assert got.success(), (got.code, got.msg)
    (root,) = got.data.items
    assert root.thread_id and root.sender.sender_type == "app" and root.sender.id == "cli_alerts"

    def page(token: str = "") -> Any:
        builder = (
            ListMessageRequest.builder()
            .container_id_type("thread")
            .container_id(root.thread_id)
            .sort_type("ByCreateTimeDesc")
            .page_size(2)
        )
        return client.im.v1.message.list((builder.page_token(token) if token else builder).build())

    first = page()
    second = page(first.data.page_token)
    bad = client.im.v1.message.list(
        ListMessageRequest.builder().container_id_type("topic").container_id("x").build()
    )

    assert first.success() and first.data.has_more and not second.data.has_more
    ids = [m.message_id for m in [*first.data.items, *second.data.items]]
    assert ids == ["om_topic_2", "om_topic_1", "om_topic_0", "om_topic_root"]
    assert json.loads(first.data.items[0].body.content) == {"text": "reply 2"}
    assert not bad.success() and bad.code == 99992402


async def test_feishu_bot_info_by_raw_request(feishu_api: FakeFeishuAPI) -> None:
    import lark_oapi as lark

    request = (
        lark.BaseRequest.builder()
        .http_method(lark.HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({lark.AccessTokenType.TENANT})
        .build()
    )
    response = await _lark_client(feishu_api).arequest(request)

    # Client.arequest never parses the body in async mode (it looks up "Content-Type" in
    # lower-cased headers): code is 0 for any 2xx and None otherwise. Read raw.content.
    assert (response.code, response.raw.status_code) == (0, 200)
    bot = json.loads(response.raw.content)["bot"]
    assert (bot["open_id"], bot["app_name"]) == (FEISHU_BOT_OPEN_ID, "chatops")


async def test_feishu_message_errors(feishu_api: FakeFeishuAPI) -> None:
    from lark_oapi.api.im.v1 import (
        CreateMessageRequest,
        CreateMessageRequestBody,
        PatchMessageRequest,
        PatchMessageRequestBody,
    )

    client = _lark_client(feishu_api)

    async def create(uuid: str) -> Any:
        body = CreateMessageRequestBody.builder().receive_id(FEISHU_CHAT_ID).msg_type("interactive")
        return await client.im.v1.message.acreate(
            CreateMessageRequest.builder()
            .receive_id_type("chat_id")
            .request_body(body.content(_card()).uuid(uuid).build())
            .build()
        )

    async def patch(message_id: str) -> Any:
        return await client.im.v1.message.apatch(
            PatchMessageRequest.builder()
            .message_id(message_id)
            .request_body(PatchMessageRequestBody.builder().content(_card("x")).build())
            .build()
        )

    first, again = await create("same-uuid"), await create("same-uuid")
    assert first.data.message_id == again.data.message_id, "uuid makes create idempotent"
    assert first.data.chat_id == FEISHU_CHAT_ID
    message_id = first.data.message_id

    results = [await patch(message_id) for _ in range(6)]
    assert [r.code for r in results] == [0] * 5 + [MESSAGE_RATE_LIMITED]
    unknown = await patch("om_" + "0" * 32)
    feishu_api.recall(message_id)
    recalled = await patch(message_id)

    assert (unknown.code, unknown.raw.status_code) == (230001, 400)
    assert "invalid message_id" in unknown.msg
    assert recalled.code == MESSAGE_RECALLED
    assert recalled.error["log_id"], "lark-oapi leaves `error` a plain dict"


async def test_feishu_scripted_rate_limit_and_bad_token(feishu_api: FakeFeishuAPI) -> None:
    import lark_oapi as lark

    feishu_api.script("bot.v3.info", frequency_limited(reset_s=3))
    request = (
        lark.BaseRequest.builder()
        .http_method(lark.HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({lark.AccessTokenType.TENANT})
        .build()
    )
    limited = await _lark_client(feishu_api).arequest(request)
    wrong_token = await _lark_client(feishu_api, enable_set_token=True).arequest(
        request, lark.RequestOption.builder().tenant_access_token("t-stale").build()
    )

    assert limited.code is None, "see test_feishu_bot_info_by_raw_request"
    assert limited.raw.status_code == 429
    assert json.loads(limited.raw.content)["code"] == RATE_LIMITED
    assert limited.raw.headers["x-ogw-ratelimit-reset"] == "3"
    assert wrong_token.raw.status_code == 400
    assert json.loads(wrong_token.raw.content)["code"] == TOKEN_INVALID


async def test_feishu_cardkit_sequence_and_streaming(feishu_api: FakeFeishuAPI) -> None:
    from lark_oapi.api.cardkit.v1 import (
        Card,
        ContentCardElementRequest,
        ContentCardElementRequestBody,
        CreateCardRequest,
        CreateCardRequestBody,
        SettingsCardRequest,
        SettingsCardRequestBody,
        UpdateCardRequest,
        UpdateCardRequestBody,
    )

    cardkit = _lark_client(feishu_api).cardkit.v1
    created = await cardkit.card.acreate(
        CreateCardRequest.builder()
        .request_body(
            CreateCardRequestBody.builder().type("card_json").data(_card(streaming=True)).build()
        )
        .build()
    )
    card_id = created.data.card_id

    async def stream(element_id: str, text: str, sequence: int) -> Any:
        body = ContentCardElementRequestBody.builder().content(text).sequence(sequence).build()
        return await cardkit.card_element.acontent(
            ContentCardElementRequest.builder()
            .card_id(card_id)
            .element_id(element_id)
            .request_body(body)
            .build()
        )

    async def update(sequence: int) -> Any:
        card = Card.builder().type("card_json").data(_card("final")).build()
        return await cardkit.card.aupdate(
            UpdateCardRequest.builder()
            .card_id(card_id)
            .request_body(UpdateCardRequestBody.builder().card(card).sequence(sequence).build())
            .build()
        )

    codes = [
        (await stream("answer", "The api", 1)).code,
        (await stream("answer", "The api pods", 1)).code,
        (await stream("nope", "x", 2)).code,
        (await stream("answer", "The api pods restart", 2)).code,
    ]
    card = feishu_api.card(card_id)
    assert (
        card is not None
        and card["data"]["body"]["elements"][0]["content"] == "The api pods restart"
    )
    closed = await cardkit.card.asettings(
        SettingsCardRequest.builder()
        .card_id(card_id)
        .request_body(
            SettingsCardRequestBody.builder()
            .settings(json.dumps({"config": {"streaming_mode": False}}))
            .sequence(3)
            .build()
        )
        .build()
    )
    codes += [closed.code, (await stream("answer", "late", 4)).code]
    codes += [(await update(5)).code, (await update(5)).code]

    assert codes == [
        0,
        SEQUENCE_COMPARE_FAILED,
        ELEMENT_NOT_FOUND,
        0,
        0,
        STREAMING_CLOSED,
        0,
        SEQUENCE_COMPARE_FAILED,
    ]
