"""Requests into the bot, built, signed and (for Feishu) encrypted the way the platforms do it.

Slack (docs/design.md §Platform facts, docs/reliability.md §Harness (Signers)): the body is sent as
raw bytes, either Events API JSON or, for interactivity, ``application/x-www-form-urlencoded``
``payload=<urlencoded JSON>``; ``X-Slack-Signature`` is ``v0=`` + HMAC-SHA256 of
``v0:{timestamp}:{body}``, computed here with slack_sdk's own
``SignatureVerifier.generate_signature`` so the tests and the SDK cannot drift.

Feishu/Lark: the JSON payload is encrypted as ``{"encrypt": base64(iv + AES-256-CBC(PKCS7(json)))}``
with key ``sha256(encrypt_key)`` and a random 16-byte IV; ``X-Lark-Signature`` is the hex SHA-256
of ``timestamp + nonce + encrypt_key + body`` (the body bytes as sent). Both were checked against
lark-oapi 1.7.5 (``lark_oapi/core/utils/decryptor.py::AESCipher`` and
``lark_oapi/event/dispatcher_handler.py::_verify_sign``). Legacy card callbacks (docs/reliability.md
F14) are signed with SHA-1 over ``timestamp + nonce + verification_token + body``
(``lark_oapi/card/action_handler.py::_verify_sign``).

Payload builders return plain dicts shaped like the platforms' documented examples (Slack's
``docs.slack.dev/reference/events/*`` and interaction payloads; Feishu's ``im.message.receive_v1``
and ``card.action.trigger`` references and lark-oapi's model classes). The default identities
below are shared with the fake Slack and Feishu APIs, so an event "mentions" the same bot the
fake API says it is.

Example:
    >>> body, headers = slack_request(slack_app_mention(text="<@U0FAKEBOT> why?"), secret="s3")
    >>> body, headers = feishu_request(
    ...     feishu_message_receive(text="@_user_1 why?"), encrypt_key="k", verification_token="v"
    ... )
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import re
import secrets
import string
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from Crypto.Cipher import AES
from Crypto.Util.Padding import pad
from slack_sdk.signature import SignatureVerifier

__all__ = [
    "SLACK_API_APP_ID",
    "SLACK_BOT_ID",
    "SLACK_BOT_USER_ID",
    "SLACK_CHANNEL_ID",
    "SLACK_TEAM_ID",
    "SLACK_USER_ID",
    "FEISHU_APP_ID",
    "FEISHU_APP_SECRET",
    "FEISHU_BOT_OPEN_ID",
    "FEISHU_CHAT_ID",
    "FEISHU_TENANT_KEY",
    "FEISHU_USER_OPEN_ID",
    "feishu_card_action",
    "feishu_decrypt",
    "feishu_encrypt",
    "feishu_legacy_card_action",
    "feishu_legacy_card_request",
    "feishu_message_receive",
    "feishu_message_receive_v1",
    "feishu_request",
    "feishu_signature",
    "feishu_url_verification",
    "slack_app_mention",
    "slack_block_actions",
    "slack_bot_message",
    "slack_event_callback",
    "slack_interactivity",
    "slack_message",
    "slack_message_changed",
    "slack_message_deleted",
    "slack_own_message",
    "slack_request",
    "slack_signature",
    "slack_ssl_check",
    "slack_ts",
    "slack_url_verification",
]

# --- Shared identities -----------------------------------------------------------------------

SLACK_TEAM_ID = "T0FAKETEAM"
"""Workspace id in events and in the fake's ``auth.test``."""
SLACK_API_APP_ID = "A0FAKEAPP"
"""The app's id (``api_app_id``)."""
SLACK_BOT_USER_ID = "U0FAKEBOT"
"""The bot's user id: what ``<@...>`` mentions and ``auth.test`` ``user_id`` return."""
SLACK_BOT_ID = "B0FAKEBOT"
"""The bot's ``bot_id``, carried by the bot's own posts when Slack echoes them."""
SLACK_CHANNEL_ID = "C0INCIDENT"
"""The incident channel."""
SLACK_USER_ID = "U0HUMAN01"
"""A human in the channel."""

FEISHU_APP_ID = "cli_a1fake00000000f1"
"""Feishu app id (``header.app_id``; the fake API's only app)."""
FEISHU_APP_SECRET = "fake-app-secret-0000000000000000"
"""The app secret the fake API accepts for :data:`FEISHU_APP_ID`."""
FEISHU_TENANT_KEY = "2ed263bf32cf1651"
"""Tenant key in events."""
FEISHU_BOT_OPEN_ID = "ou_fakebot0000000000000000000000b0"
"""The bot's ``open_id`` (``GET /open-apis/bot/v3/info``)."""
FEISHU_USER_OPEN_ID = "ou_fakehuman000000000000000000000a1"
"""A human's ``open_id``."""
FEISHU_CHAT_ID = "oc_fakeincident0000000000000000000c1"
"""The incident group chat."""

_ALNUM_UPPER = string.ascii_uppercase + string.digits
_MENTION = re.compile(r"<@([UW][A-Z0-9]+)>")
_SLACK_UA = "Slackbot 1.0 (+https://api.slack.com/robots)"


def _rand(alphabet: str, n: int) -> str:
    return "".join(secrets.choice(alphabet) for _ in range(n))


class _TsClock:
    """Hands out strictly increasing microsecond timestamps, safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_us = 0

    def next_ts(self) -> str:
        with self._lock:
            self._last_us = max(time.time_ns() // 1000, self._last_us + 1)
            now_us = self._last_us
        return f"{now_us // 1_000_000}.{now_us % 1_000_000:06d}"


_ts_clock = _TsClock()


def slack_ts() -> str:
    """Return a fresh, strictly increasing Slack message ts (``"1712345678.123456"``)."""
    return _ts_clock.next_ts()


def _timestamp_str(timestamp: float | str | None) -> str:
    """Seconds as the platforms send them; a string is used verbatim (for malformed cases)."""
    if timestamp is None:
        return str(int(time.time()))
    if isinstance(timestamp, str):
        return timestamp
    return str(int(timestamp))


def _body_bytes(body: bytes | str | Mapping[str, Any]) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    # Slack sends compact JSON and escapes nothing it does not have to; the signature is over
    # these exact bytes, so a verifier must never re-serialise (docs/reliability.md S6).
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


# --- Slack: signing ---------------------------------------------------------------------------


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Return ``X-Slack-Signature`` for ``body``, computed by slack_sdk's own signer.

    Args:
        secret: The app's signing secret.
        timestamp: ``X-Slack-Request-Timestamp`` exactly as sent.
        body: The raw body bytes. slack_sdk decodes them as UTF-8 first, so they must be UTF-8.

    Returns:
        ``"v0=" + hex digest``.
    """
    signature = SignatureVerifier(secret).generate_signature(timestamp=timestamp, body=body)
    assert signature is not None  # only None when timestamp is None
    return signature


def slack_request(
    body: bytes | str | Mapping[str, Any],
    *,
    secret: str,
    timestamp: float | str | None = None,
    retry_num: int | None = None,
    retry_reason: str | None = None,
    content_type: str = "application/json",
) -> tuple[bytes, dict[str, str]]:
    """Build a signed Slack request (Events API JSON unless ``content_type`` says otherwise).

    Args:
        body: A payload dict (sent as compact UTF-8 JSON) or the exact bytes to send.
        secret: The signing secret.
        timestamp: Request time in seconds (default now); a string is sent verbatim, so
            ``"abc"`` or ``"1e3"`` can be signed for the malformed-timestamp cases (S5).
        retry_num: ``X-Slack-Retry-Num`` (1..3 on redeliveries), omitted when None.
        retry_reason: ``X-Slack-Retry-Reason`` (``http_timeout``, ``http_error``, ...).
        content_type: ``Content-Type`` of the body.

    Returns:
        ``(body bytes, headers)``; post them unchanged.
    """
    raw = _body_bytes(body)
    ts = _timestamp_str(timestamp)
    headers = {
        "Content-Type": content_type,
        "User-Agent": _SLACK_UA,
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": slack_signature(secret, ts, raw),
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
    if retry_reason is not None:
        headers["X-Slack-Retry-Reason"] = retry_reason
    return raw, headers


def slack_interactivity(
    payload: Mapping[str, Any],
    *,
    secret: str,
    timestamp: float | str | None = None,
    retry_num: int | None = None,
    retry_reason: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """Build a signed interactivity request: form-encoded ``payload=<urlencoded JSON>``.

    Args:
        payload: e.g. :func:`slack_block_actions`.
        secret: The signing secret.
        timestamp: As in :func:`slack_request`.
        retry_num: As in :func:`slack_request`.
        retry_reason: As in :func:`slack_request`.

    Returns:
        ``(body bytes, headers)``.
    """
    encoded = urlencode({"payload": json.dumps(payload, separators=(",", ":"))})
    return slack_request(
        encoded.encode(),
        secret=secret,
        timestamp=timestamp,
        retry_num=retry_num,
        retry_reason=retry_reason,
        content_type="application/x-www-form-urlencoded",
    )


def slack_ssl_check(token: str = "verification-token") -> bytes:
    """Return the form body of Slack's ``ssl_check`` probe (sign it with ``slack_request``)."""
    return urlencode({"ssl_check": "1", "token": token}).encode()


# --- Slack: payloads --------------------------------------------------------------------------


def slack_event_callback(
    event: Mapping[str, Any],
    *,
    event_id: str | None = None,
    event_time: int | None = None,
    team_id: str = SLACK_TEAM_ID,
    api_app_id: str = SLACK_API_APP_ID,
    bot_user_id: str = SLACK_BOT_USER_ID,
) -> dict[str, Any]:
    """Wrap an inner event in the Events API ``event_callback`` envelope.

    ``authorizations`` holds one installation (Slack truncated it to one in 2021).

    Args:
        event: The inner event.
        event_id: ``Ev...`` id, the dedup key; random by default.
        event_time: Seconds; now by default.
        team_id: Workspace id.
        api_app_id: App id.
        bot_user_id: The installation's bot user.

    Returns:
        The envelope.
    """
    return {
        "token": "verification-token",
        "team_id": team_id,
        "context_team_id": team_id,
        "context_enterprise_id": None,
        "api_app_id": api_app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id or "Ev" + _rand(_ALNUM_UPPER, 9),
        "event_time": int(time.time()) if event_time is None else event_time,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": "4-" + _rand(string.ascii_letters + string.digits, 40),
    }


def _rich_text(text: str) -> list[dict[str, Any]]:
    """The ``rich_text`` block Slack clients attach to a typed message (mentions as users)."""
    elements: list[dict[str, Any]] = []
    pos = 0
    for match in _MENTION.finditer(text):
        if match.start() > pos:
            elements.append({"type": "text", "text": text[pos : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        pos = match.end()
    if pos < len(text):
        elements.append({"type": "text", "text": text[pos:]})
    section = {"type": "rich_text_section", "elements": elements}
    return [
        {"type": "rich_text", "block_id": _rand(string.ascii_letters, 5), "elements": [section]}
    ]


def _user_message(
    kind: str,
    text: str,
    user: str,
    channel: str,
    ts: str | None,
    thread_ts: str | None,
    team_id: str,
) -> dict[str, Any]:
    ts = ts or slack_ts()
    event: dict[str, Any] = {
        "type": kind,
        "user": user,
        "text": text,
        "ts": ts,
        "client_msg_id": str(uuid.uuid4()),
        "team": team_id,
        "blocks": _rich_text(text),
        "channel": channel,
        "event_ts": ts,
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
        event["parent_user_id"] = user
    return event


def slack_app_mention(
    *,
    text: str = f"<@{SLACK_BOT_USER_ID}> why is checkout returning 500s?",
    user: str = SLACK_USER_ID,
    channel: str = SLACK_CHANNEL_ID,
    ts: str | None = None,
    thread_ts: str | None = None,
    event_id: str | None = None,
    event_time: int | None = None,
    team_id: str = SLACK_TEAM_ID,
    api_app_id: str = SLACK_API_APP_ID,
    bot_user_id: str = SLACK_BOT_USER_ID,
) -> dict[str, Any]:
    """An ``app_mention`` event callback (docs.slack.dev/reference/events/app_mention).

    Args:
        text: Message text; mentions are ``<@U...>``.
        user: Author.
        channel: Channel id.
        ts: Message ts (fresh by default). Pass the same ts to :func:`slack_message` for the
            twin ``message`` event Slack also delivers (S11).
        thread_ts: Set when the mention is a thread reply.
        event_id: Envelope ``event_id``.
        event_time: Envelope ``event_time``.
        team_id: Workspace id.
        api_app_id: App id.
        bot_user_id: The installation's bot user.

    Returns:
        The envelope.
    """
    event = _user_message("app_mention", text, user, channel, ts, thread_ts, team_id)
    return slack_event_callback(
        event,
        event_id=event_id,
        event_time=event_time,
        team_id=team_id,
        api_app_id=api_app_id,
        bot_user_id=bot_user_id,
    )


def slack_message(
    *,
    text: str = f"<@{SLACK_BOT_USER_ID}> why is checkout returning 500s?",
    user: str = SLACK_USER_ID,
    channel: str = SLACK_CHANNEL_ID,
    ts: str | None = None,
    thread_ts: str | None = None,
    event_id: str | None = None,
    event_time: int | None = None,
    team_id: str = SLACK_TEAM_ID,
) -> dict[str, Any]:
    """A plain ``message`` event (``channel_type: channel``), e.g. a human thread reply.

    Args:
        text: Message text.
        user: Author.
        channel: Channel id.
        ts: Message ts; reuse an ``app_mention``'s ts for the duplicate delivery (S11).
        thread_ts: Parent ts for a thread reply (a steer, or "stop").
        event_id: Envelope ``event_id``.
        event_time: Envelope ``event_time``.
        team_id: Workspace id.

    Returns:
        The envelope.
    """
    event = _user_message("message", text, user, channel, ts, thread_ts, team_id)
    event["channel_type"] = "channel"
    return slack_event_callback(event, event_id=event_id, event_time=event_time, team_id=team_id)


def slack_own_message(
    *,
    text: str = "Investigating…",
    channel: str = SLACK_CHANNEL_ID,
    ts: str | None = None,
    thread_ts: str | None = None,
    bot_id: str = SLACK_BOT_ID,
    bot_user_id: str = SLACK_BOT_USER_ID,
    api_app_id: str = SLACK_API_APP_ID,
    event_id: str | None = None,
) -> dict[str, Any]:
    """The echo of the bot's own ``chat.postMessage``: no subtype, but ``bot_id`` and ``app_id``.

    Args:
        text: Posted text.
        channel: Channel id.
        ts: Message ts.
        thread_ts: Parent ts when posted in a thread.
        bot_id: The bot's ``bot_id`` (S12: never input).
        bot_user_id: The bot's user id (the echo's ``user``).
        api_app_id: App id.
        event_id: Envelope ``event_id``.

    Returns:
        The envelope.
    """
    ts = ts or slack_ts()
    event: dict[str, Any] = {
        "type": "message",
        "user": bot_user_id,
        "bot_id": bot_id,
        "app_id": api_app_id,
        "text": text,
        "ts": ts,
        "team": SLACK_TEAM_ID,
        "bot_profile": {
            "id": bot_id,
            "app_id": api_app_id,
            "name": "chatops",
            "deleted": False,
            "team_id": SLACK_TEAM_ID,
        },
        "channel": channel,
        "event_ts": ts,
        "channel_type": "channel",
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return slack_event_callback(event, event_id=event_id, api_app_id=api_app_id)


def slack_bot_message(
    *,
    text: str = "Alert: checkout p99 > 2s",
    bot_id: str = "B0OTHERBOT",
    username: str = "alertmanager",
    channel: str = SLACK_CHANNEL_ID,
    ts: str | None = None,
    thread_ts: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """A ``message`` with ``subtype: bot_message`` (integrations and legacy bots).

    Args:
        text: Posted text.
        bot_id: The posting bot.
        username: Display name.
        channel: Channel id.
        ts: Message ts.
        thread_ts: Parent ts.
        event_id: Envelope ``event_id``.

    Returns:
        The envelope.
    """
    ts = ts or slack_ts()
    event: dict[str, Any] = {
        "type": "message",
        "subtype": "bot_message",
        "text": text,
        "ts": ts,
        "username": username,
        "bot_id": bot_id,
        "channel": channel,
        "event_ts": ts,
        "channel_type": "channel",
    }
    if thread_ts is not None:
        event["thread_ts"] = thread_ts
    return slack_event_callback(event, event_id=event_id)


def slack_message_changed(
    *,
    ts: str,
    text: str,
    previous_text: str = "",
    user: str = SLACK_USER_ID,
    channel: str = SLACK_CHANNEL_ID,
    thread_ts: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """A ``message_changed`` event: ``message`` is the edited message, keyed by its original ts.

    Args:
        ts: The edited message's ts.
        text: New text.
        previous_text: Old text.
        user: Author.
        channel: Channel id.
        thread_ts: Parent ts when the message is in a thread.
        event_id: Envelope ``event_id``.

    Returns:
        The envelope.
    """
    event_ts = slack_ts()
    base: dict[str, Any] = {"type": "message", "user": user, "ts": ts, "team": SLACK_TEAM_ID}
    if thread_ts is not None:
        base["thread_ts"] = thread_ts
    event = {
        "type": "message",
        "subtype": "message_changed",
        "hidden": True,
        "message": {
            **base,
            "text": text,
            "blocks": _rich_text(text),
            "edited": {"user": user, "ts": event_ts},
        },
        "previous_message": {**base, "text": previous_text, "blocks": _rich_text(previous_text)},
        "channel": channel,
        "ts": event_ts,
        "event_ts": event_ts,
        "channel_type": "channel",
    }
    return slack_event_callback(event, event_id=event_id)


def slack_message_deleted(
    *,
    deleted_ts: str,
    previous_text: str = "",
    user: str = SLACK_USER_ID,
    channel: str = SLACK_CHANNEL_ID,
    thread_ts: str | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """A ``message_deleted`` event (``deleted_ts`` is the removed message).

    Args:
        deleted_ts: The deleted message's ts.
        previous_text: Its text.
        user: Its author.
        channel: Channel id.
        thread_ts: Parent ts when the message was in a thread.
        event_id: Envelope ``event_id``.

    Returns:
        The envelope.
    """
    event_ts = slack_ts()
    previous: dict[str, Any] = {
        "type": "message",
        "user": user,
        "text": previous_text,
        "ts": deleted_ts,
        "team": SLACK_TEAM_ID,
    }
    if thread_ts is not None:
        previous["thread_ts"] = thread_ts
    event = {
        "type": "message",
        "subtype": "message_deleted",
        "hidden": True,
        "deleted_ts": deleted_ts,
        "previous_message": previous,
        "channel": channel,
        "ts": event_ts,
        "event_ts": event_ts,
        "channel_type": "channel",
    }
    return slack_event_callback(event, event_id=event_id)


def slack_url_verification(
    challenge: str | None = None, *, token: str = "verification-token"
) -> dict[str, Any]:
    """The Events API ``url_verification`` handshake (answer with the challenge)."""
    return {
        "token": token,
        "challenge": challenge or _rand(string.ascii_letters + string.digits, 48),
        "type": "url_verification",
    }


def _trigger_id() -> str:
    return f"{_rand(string.digits, 13)}.{_rand(string.digits, 13)}.{os.urandom(16).hex()}"


def slack_block_actions(
    *,
    action_id: str,
    value: str,
    block_id: str = "run_controls",
    message_ts: str,
    thread_ts: str | None = None,
    user: str = SLACK_USER_ID,
    username: str = "alice",
    channel: str = SLACK_CHANNEL_ID,
    message_text: str = "Investigating…",
    message_blocks: Sequence[Mapping[str, Any]] | None = None,
    button_text: str = "Stop",
    team_id: str = SLACK_TEAM_ID,
    api_app_id: str = SLACK_API_APP_ID,
    bot_id: str = SLACK_BOT_ID,
) -> dict[str, Any]:
    """A ``block_actions`` payload for a button click on the bot's message.

    Args:
        action_id: The button's ``action_id`` (≤255 chars on Slack).
        value: The button's ``value`` (≤2000 chars).
        block_id: The ``actions`` block's id.
        message_ts: ts of the message carrying the button.
        thread_ts: Its thread, when it was posted in one.
        user: Who clicked.
        username: Their name.
        channel: Channel id.
        message_text: The message's fallback text.
        message_blocks: The message's blocks (default: one actions block with the button).
        button_text: The button label.
        team_id: Workspace id.
        api_app_id: App id.
        bot_id: The bot that posted the message.

    Returns:
        The payload; send it with :func:`slack_interactivity`.
    """
    button = {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": button_text, "emoji": True},
        "value": value,
    }
    blocks = (
        [dict(b) for b in message_blocks]
        if message_blocks is not None
        else [{"type": "actions", "block_id": block_id, "elements": [button]}]
    )
    message: dict[str, Any] = {
        "type": "message",
        "subtype": "bot_message",
        "text": message_text,
        "ts": message_ts,
        "bot_id": bot_id,
        "blocks": blocks,
    }
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if thread_ts is not None:
        message["thread_ts"] = thread_ts
        container["thread_ts"] = thread_ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": username, "name": username, "team_id": team_id},
        "api_app_id": api_app_id,
        "token": "verification-token",
        "container": container,
        "trigger_id": _trigger_id(),
        "team": {"id": team_id, "domain": "fake-workspace"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": "incident"},
        "message": message,
        "state": {"values": {}},
        "response_url": (
            f"https://hooks.slack.com/actions/{team_id}/{_rand(string.digits, 13)}/"
            f"{_rand(string.ascii_letters + string.digits, 24)}"
        ),
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": button["text"],
                "value": value,
                "type": "button",
                "action_ts": f"{time.time():.6f}",
            }
        ],
    }


# --- Feishu: crypto and signing ----------------------------------------------------------------


def feishu_encrypt(plaintext: str | bytes, encrypt_key: str, *, iv: bytes | None = None) -> str:
    """Encrypt like Feishu: ``base64(iv + AES-256-CBC(PKCS7(plaintext)))``, key sha256(key).

    Args:
        plaintext: The JSON text.
        encrypt_key: The app's Encrypt Key.
        iv: 16 bytes; random by default (as Feishu does).

    Returns:
        The base64 text for the ``encrypt`` field.
    """
    data = plaintext.encode() if isinstance(plaintext, str) else plaintext
    iv = os.urandom(AES.block_size) if iv is None else iv
    key = hashlib.sha256(encrypt_key.encode()).digest()
    cipher = AES.new(key, AES.MODE_CBC, iv)
    return base64.b64encode(iv + cipher.encrypt(pad(data, AES.block_size))).decode()


def feishu_decrypt(encrypted: str, encrypt_key: str) -> str:
    """Invert :func:`feishu_encrypt` (for asserting on what a fake or the bot produced)."""
    raw = base64.b64decode(encrypted)
    key = hashlib.sha256(encrypt_key.encode()).digest()
    cipher = AES.new(key, AES.MODE_CBC, raw[: AES.block_size])
    padded = cipher.decrypt(raw[AES.block_size :])
    return padded[: -padded[-1]].decode()


def feishu_signature(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    """Return ``X-Lark-Signature``: hex sha256(timestamp + nonce + encrypt_key + body)."""
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


def _stamp_token(payload: Mapping[str, Any], token: str) -> dict[str, Any]:
    """Copy ``payload`` with its verification token set where its schema keeps it."""
    stamped = copy.deepcopy(dict(payload))
    if isinstance(stamped.get("header"), dict):
        stamped["header"]["token"] = token
    else:
        stamped["token"] = token
    return stamped


def feishu_request(
    payload: Mapping[str, Any],
    *,
    encrypt_key: str,
    verification_token: str | None = None,
    timestamp: float | str | None = None,
    nonce: str | None = None,
    encrypt: bool = True,
    sign: bool = True,
) -> tuple[bytes, dict[str, str]]:
    """Build a Feishu event or card-callback request: encrypted body plus signature headers.

    Args:
        payload: e.g. :func:`feishu_message_receive` or :func:`feishu_card_action`.
        encrypt_key: The app's Encrypt Key (also the signing key).
        verification_token: When given, written into the payload (``header.token`` for schema
            2.0, ``token`` otherwise) before encryption; a wrong one exercises F10.
        timestamp: Seconds (default now); a string is sent verbatim.
        nonce: ``X-Lark-Request-Nonce`` (random by default). Reuse one for replay tests (F6).
        encrypt: False sends the plaintext JSON (F3: plaintext while a key is configured).
        sign: False omits the three signature headers (F4).

    Returns:
        ``(body bytes, headers)``; post them unchanged.
    """
    if verification_token is not None:
        payload = _stamp_token(payload, verification_token)
    plaintext = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    body = (
        json.dumps({"encrypt": feishu_encrypt(plaintext, encrypt_key)}).encode()
        if encrypt
        else plaintext.encode()
    )
    headers = {"Content-Type": "application/json; charset=utf-8", "X-Request-Id": str(uuid.uuid4())}
    if sign:
        ts = _timestamp_str(timestamp)
        nonce = nonce if nonce is not None else _rand(string.ascii_letters + string.digits, 16)
        headers["X-Lark-Request-Timestamp"] = ts
        headers["X-Lark-Request-Nonce"] = nonce
        headers["X-Lark-Signature"] = feishu_signature(ts, nonce, encrypt_key, body)
    return body, headers


def feishu_legacy_card_request(
    payload: Mapping[str, Any],
    *,
    verification_token: str,
    encrypt_key: str | None = None,
    timestamp: float | str | None = None,
    nonce: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """Build a legacy (``card.action.trigger_v1``) card callback, signed with SHA-1 (F14).

    The signature is hex sha1(timestamp + nonce + verification_token + body); the body is
    encrypted only when ``encrypt_key`` is given.

    Args:
        payload: e.g. :func:`feishu_legacy_card_action`.
        verification_token: The app's Verification Token (the signing key here).
        encrypt_key: Encrypt the body with this key.
        timestamp: Seconds (default now); a string is sent verbatim.
        nonce: Random by default.

    Returns:
        ``(body bytes, headers)``.
    """
    plaintext = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    body = (
        json.dumps({"encrypt": feishu_encrypt(plaintext, encrypt_key)}).encode()
        if encrypt_key
        else plaintext.encode()
    )
    ts = _timestamp_str(timestamp)
    nonce = nonce if nonce is not None else _rand(string.ascii_letters + string.digits, 16)
    signature = hashlib.sha1((ts + nonce + verification_token).encode() + body).hexdigest()
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "X-Lark-Request-Timestamp": ts,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": signature,
    }
    return body, headers


# --- Feishu: payloads -------------------------------------------------------------------------


def _feishu_header(event_type: str, event_id: str | None, token: str) -> dict[str, Any]:
    return {
        "event_id": event_id or os.urandom(16).hex(),
        "token": token,
        "create_time": str(time.time_ns() // 1_000_000),
        "event_type": event_type,
        "tenant_key": FEISHU_TENANT_KEY,
        "app_id": FEISHU_APP_ID,
    }


def _message_id() -> str:
    return "om_" + os.urandom(16).hex()


def feishu_message_receive(
    *,
    text: str = "@_user_1 why is checkout returning 500s?",
    mentions: Sequence[Mapping[str, Any]] | None = None,
    sender_open_id: str = FEISHU_USER_OPEN_ID,
    sender_type: str = "user",
    chat_id: str = FEISHU_CHAT_ID,
    chat_type: str = "group",
    message_id: str | None = None,
    root_id: str | None = None,
    parent_id: str | None = None,
    event_id: str | None = None,
    token: str = "",
) -> dict[str, Any]:
    """A v2 (``schema: "2.0"``) ``im.message.receive_v1`` event with a text message.

    Mentions appear in the text as ``@_user_N`` placeholders resolved by ``message.mentions``;
    by default ``@_user_1`` is the bot (:data:`FEISHU_BOT_OPEN_ID`).

    Args:
        text: The text content (placed JSON-encoded in ``message.content``).
        mentions: ``message.mentions``; default one mention of the bot as ``@_user_1``.
        sender_open_id: Author ``open_id``.
        sender_type: ``"user"``, or ``"app"`` for a bot author.
        chat_id: ``oc_...`` chat id.
        chat_type: ``"group"`` or ``"p2p"``.
        message_id: ``om_...`` id (random by default).
        root_id: Thread root when the message is a reply.
        parent_id: Replied-to message.
        event_id: ``header.event_id`` (dedup key; random by default).
        token: ``header.token``; usually stamped by :func:`feishu_request`.

    Returns:
        The event.
    """
    if mentions is None:
        mentions = [
            {
                "key": "@_user_1",
                "id": {"open_id": FEISHU_BOT_OPEN_ID, "union_id": "", "user_id": ""},
                "name": "chatops",
                "tenant_key": FEISHU_TENANT_KEY,
            }
        ]
    now_ms = str(time.time_ns() // 1_000_000)
    message: dict[str, Any] = {
        "message_id": message_id or _message_id(),
        "root_id": root_id or "",
        "parent_id": parent_id or "",
        "create_time": now_ms,
        "update_time": now_ms,
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": "text",
        "content": json.dumps({"text": text}, ensure_ascii=False),
        "mentions": [dict(m) for m in mentions],
        "user_agent": "Mozilla/5.0 Lark/7.30.0",
    }
    if root_id:
        message["thread_id"] = "omt_" + os.urandom(8).hex()
    return {
        "schema": "2.0",
        "header": _feishu_header("im.message.receive_v1", event_id, token),
        "event": {
            "sender": {
                "sender_id": {
                    "open_id": sender_open_id,
                    "union_id": "on_" + hashlib.md5(sender_open_id.encode()).hexdigest(),
                    "user_id": "u" + sender_open_id[-6:],
                },
                "sender_type": sender_type,
                "tenant_key": FEISHU_TENANT_KEY,
            },
            "message": message,
        },
    }


def feishu_message_receive_v1(
    *,
    text: str = "why is checkout returning 500s?",
    sender_open_id: str = FEISHU_USER_OPEN_ID,
    chat_id: str = FEISHU_CHAT_ID,
    message_id: str | None = None,
    uuid_: str | None = None,
    token: str = "",
) -> dict[str, Any]:
    """A legacy v1 ``event_callback`` (``uuid``, ``ts``, ``token``; ``event.type: "message"``).

    Args:
        text: Text after the bot mention.
        sender_open_id: Author ``open_id``.
        chat_id: ``open_chat_id``.
        message_id: ``open_message_id``.
        uuid_: The v1 dedup key (random by default).
        token: Verification token; usually stamped by :func:`feishu_request`.

    Returns:
        The event.
    """
    return {
        "uuid": uuid_ or os.urandom(16).hex(),
        "token": token,
        "ts": f"{time.time():.7f}",
        "type": "event_callback",
        "event": {
            "type": "message",
            "app_id": FEISHU_APP_ID,
            "tenant_key": FEISHU_TENANT_KEY,
            "root_id": "",
            "parent_id": "",
            "open_chat_id": chat_id,
            "chat_type": "group",
            "msg_type": "text",
            "open_id": sender_open_id,
            "open_message_id": message_id or _message_id(),
            "is_mention": True,
            "text": f'<at open_id="{FEISHU_BOT_OPEN_ID}">@chatops</at> {text}',
            "text_without_at_bot": f" {text}",
        },
    }


def feishu_url_verification(challenge: str | None = None, *, token: str = "") -> dict[str, Any]:
    """The ``url_verification`` challenge (encrypt it with :func:`feishu_request` or not)."""
    return {
        "challenge": challenge or str(uuid.uuid4()),
        "token": token,
        "type": "url_verification",
    }


def feishu_card_action(
    *,
    value: Mapping[str, Any],
    open_message_id: str,
    open_chat_id: str = FEISHU_CHAT_ID,
    operator_open_id: str = FEISHU_USER_OPEN_ID,
    tag: str = "button",
    name: str | None = None,
    update_token: str | None = None,
    event_id: str | None = None,
    token: str = "",
) -> dict[str, Any]:
    """A ``card.action.trigger`` callback (schema 2.0; card JSON 2.0 button click).

    Args:
        value: The clicked component's ``value``.
        open_message_id: The card message.
        open_chat_id: Its chat.
        operator_open_id: Who clicked.
        tag: Component tag.
        name: Component ``name``, when it has one.
        update_token: ``event.token``, the delayed-update token (``c-...``; 30 min, 2 uses).
        event_id: ``header.event_id``.
        token: ``header.token`` (verification token); usually stamped by ``feishu_request``.

    Returns:
        The callback.
    """
    action: dict[str, Any] = {"value": dict(value), "tag": tag}
    if name is not None:
        action["name"] = name
    return {
        "schema": "2.0",
        "header": _feishu_header("card.action.trigger", event_id, token),
        "event": {
            "operator": {
                "tenant_key": FEISHU_TENANT_KEY,
                "user_id": "u" + operator_open_id[-6:],
                "open_id": operator_open_id,
                "union_id": "on_" + hashlib.md5(operator_open_id.encode()).hexdigest(),
            },
            "token": update_token or "c-" + os.urandom(20).hex(),
            "action": action,
            "host": "im_message",
            "context": {"open_message_id": open_message_id, "open_chat_id": open_chat_id},
        },
    }


def feishu_legacy_card_action(
    *,
    value: Mapping[str, Any],
    open_message_id: str,
    open_chat_id: str = FEISHU_CHAT_ID,
    open_id: str = FEISHU_USER_OPEN_ID,
    tag: str = "button",
    update_token: str | None = None,
) -> dict[str, Any]:
    """A legacy (``card.action.trigger_v1``) flat card callback (sign with the SHA-1 builder)."""
    return {
        "open_id": open_id,
        "user_id": "u" + open_id[-6:],
        "tenant_key": FEISHU_TENANT_KEY,
        "open_message_id": open_message_id,
        "open_chat_id": open_chat_id,
        "token": update_token or "c-" + os.urandom(20).hex(),
        "action": {"value": dict(value), "tag": tag},
    }
