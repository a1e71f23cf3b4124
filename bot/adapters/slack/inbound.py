"""Slack: request verification and normalization of Events API and interactivity payloads.

The only module (with the Slack client) that imports `slack_sdk`. We use slack_sdk's
`SignatureVerifier` for the HMAC itself, and do not run slack-bolt's request pipeline on the
webhook path: bolt answers 500 on a non-numeric timestamp (docs/reliability.md S5) and its ack-only
path measured at about 0.38x a bare FastAPI endpoint on this machine kind, below the ingress goal.
Checks around the HMAC (headers present, a strictly numeric timestamp, the symmetric 5-minute
window) are ours, so every failure is a 401 and never a 500.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.signature import Clock, SignatureVerifier

from bot.adapters import untrusted_json
from bot.adapters.slack.form_body import form_value
from bot.errors import MalformedRequest, NotAuthentic
from bot.events import AuthorKind, ChatEvent, EventKind, Platform

__all__ = ["SLACK_WINDOW_S", "SlackIdentity", "SlackInbound", "parse_slack", "verify_slack"]

log = logging.getLogger(__name__)

SLACK_WINDOW_S = 300
"""Requests older or newer than this many seconds are refused (Slack's documented window)."""

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
# Message subtypes that are platform notices rather than conversation.
_NOTICE_SUBTYPES = frozenset({
    "channel_join", "channel_leave", "channel_topic", "channel_purpose", "channel_name",
    "channel_archive", "channel_unarchive", "group_join", "group_leave", "pinned_item",
    "unpinned_item", "reminder_add",
})  # fmt: skip


@dataclass(frozen=True, slots=True)
class SlackIdentity:
    """Who the bot is on Slack (from `auth.test` at start-up)."""

    user_id: str
    """The bot user id (`U…`): mentions look like `<@U…>`."""
    bot_id: str = ""
    """The bot id (`B…`) Slack puts on the bot's own posts."""
    team_id: str = ""


@dataclass(frozen=True, slots=True)
class SlackInbound:
    """A parsed Slack request: a challenge to echo, an event, or nothing to do."""

    challenge: str | None = None
    event: ChatEvent | None = None


class _Clock(Clock):
    """Adapter giving slack_sdk's verifier our clock."""

    def __init__(self, now: Callable[[], float]) -> None:
        super().__init__()
        self._now = now

    def now(self) -> float:
        return self._now()


@functools.lru_cache(maxsize=8)
def _verifier(secret: str, now: Callable[[], float]) -> SignatureVerifier:
    """One verifier per (secret, clock): it is stateless, and building one costs per request."""
    return SignatureVerifier(secret, clock=_Clock(now))


def verify_slack(
    body: bytes,
    headers: Mapping[str, str],
    secret: str,
    *,
    now: Callable[[], float] = time.time,
) -> None:
    """Check Slack's request signature over the raw body; raise `NotAuthentic` if it fails."""
    timestamp = headers.get("x-slack-request-timestamp", "")
    signature = headers.get("x-slack-signature", "")
    if not _TIMESTAMP.fullmatch(timestamp) or not _SIGNATURE.fullmatch(signature):
        raise NotAuthentic("missing or malformed signature headers")
    if abs(now() - int(timestamp)) > SLACK_WINDOW_S:
        raise NotAuthentic("timestamp outside the 5-minute window")
    verifier = _verifier(secret, now)
    try:  # slack_sdk decodes the body as UTF-8 and raises on bytes Slack would never send
        valid = verifier.is_valid(body=body, timestamp=timestamp, signature=signature)
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise NotAuthentic("body is not UTF-8") from exc
    if not valid:
        raise NotAuthentic("signature mismatch")


def parse_slack(body: bytes, content_type: str, identity: SlackIdentity) -> SlackInbound:
    """Parse a verified request body into a challenge, an event, or nothing.

    Raises:
        MalformedRequest: The body cannot be understood, including any field of an unexpected
            type: the body is authentic but untrusted input, and its shape is never a 500.
    """
    try:
        inbound = _parse(body, content_type, identity)
    except (TypeError, AttributeError, ValueError, ArithmeticError, RecursionError) as exc:
        # pydantic's ValidationError is a ValueError; absurd JSON nesting is a RecursionError
        raise MalformedRequest(f"unexpected payload shape: {type(exc).__name__}") from exc
    event = inbound.event
    if event is not None and identity.team_id and event.workspace not in ("", identity.team_id):
        # Another workspace's event (docs/reliability.md A9): acknowledged, never acted on.
        log.info("event %s from workspace %s dropped: not ours", event.event_id, event.workspace)
        return SlackInbound()
    return inbound


def _parse(body: bytes, content_type: str, identity: SlackIdentity) -> SlackInbound:
    if content_type.startswith("application/x-www-form-urlencoded"):
        if body.startswith(b"ssl_check=1"):
            return SlackInbound()  # Slack's certificate probe: a signed 200 is all it needs
        return SlackInbound(event=_interaction(_form_payload(body), identity))
    payload = untrusted_json.loads(body)  # a lone surrogate escape is a 400 (X14)
    if not isinstance(payload, dict):
        raise MalformedRequest("body is not a JSON object")
    kind = payload.get("type")
    if kind == "url_verification":
        return SlackInbound(challenge=_str(payload, "challenge"))
    if kind == "event_callback":
        return SlackInbound(event=_event(payload, identity))
    raise MalformedRequest(f"unknown payload type {kind!r}")


def _form_payload(body: bytes) -> dict[str, Any]:
    try:
        raw = form_value(body, "payload")  # bad %-escapes become U+FFFD
    except (ValueError, KeyError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedRequest("interactivity body without a JSON payload") from exc
    payload = untrusted_json.loads(raw, what="interactivity payload")
    if not isinstance(payload, dict):
        raise MalformedRequest("interactivity payload is not an object")
    return payload


def _str(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str) or not value:
        raise MalformedRequest(f"missing {key!r}")
    return value


def _optional_str(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    if value is not None and not isinstance(value, str):
        raise MalformedRequest(f"{key!r} is not a string")
    return value or ""


def _event(payload: Mapping[str, Any], identity: SlackIdentity) -> ChatEvent | None:
    event = payload.get("event")
    if not isinstance(event, dict):
        raise MalformedRequest("event_callback without an event")
    if event.get("type") not in ("app_mention", "message"):
        return None  # subscribed to more than we act on: acknowledged and dropped
    subtype = event.get("subtype")
    if subtype in ("message_changed", "message_deleted"):
        previous, current = event.get("previous_message") or {}, event.get("message") or {}
        if subtype == "message_changed" and previous.get("text") == current.get("text"):
            return None  # an unfurl or attachment change, not an edit a person made
        return _changed(payload, event, identity, subtype)
    text = _optional_str(event, "text")
    mention = f"<@{identity.user_id}>"
    ts = _str(event, "ts")
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=_str(payload, "event_id"),
        workspace=str(payload.get("team_id") or event.get("team") or ""),
        channel=_str(event, "channel"),
        thread=_optional_str(event, "thread_ts") or ts,
        message_id=ts,
        author=str(event.get("user") or event.get("bot_id") or ""),
        author_kind=_author_kind(event, identity),
        text=_strip_mention(text, mention),
        mentioned=event.get("type") == "app_mention" or mention in text,
        sent_at=_seconds(ts),
    )


def _changed(
    payload: Mapping[str, Any], event: Mapping[str, Any], identity: SlackIdentity, subtype: str
) -> ChatEvent:
    inner = (
        (event.get("message") if subtype == "message_changed" else None)
        or event.get("previous_message")
        or {}
    )
    if not isinstance(inner, dict):
        raise MalformedRequest("message change without the message")
    ts = str(inner.get("ts") or event.get("deleted_ts") or "")
    mention = f"<@{identity.user_id}>"
    text = str(inner.get("text") or "") if subtype == "message_changed" else ""
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=_str(payload, "event_id"),
        kind=EventKind.EDIT if subtype == "message_changed" else EventKind.DELETE,
        workspace=str(payload.get("team_id") or ""),
        channel=_str(event, "channel"),
        thread=str(inner.get("thread_ts") or ts),
        message_id=f"{ts}@{event.get('event_ts') or event.get('ts') or ''}",
        author=str(inner.get("user") or inner.get("bot_id") or ""),
        author_kind=_author_kind(inner, identity),
        text=_strip_mention(text, mention),
        mentioned=mention in text,
    )


def _author_kind(event: Mapping[str, Any], identity: SlackIdentity) -> AuthorKind:
    bot_id = event.get("bot_id")
    if (identity.bot_id and bot_id == identity.bot_id) or event.get("user") == identity.user_id:
        return AuthorKind.SELF
    if bot_id or event.get("subtype") == "bot_message":
        return AuthorKind.OTHER_BOT
    if event.get("subtype") in _NOTICE_SUBTYPES:
        return AuthorKind.SYSTEM
    return AuthorKind.HUMAN


def _seconds(ts: str) -> float:
    """A Slack `ts` (`"1700000000.000100"`) as epoch seconds; 0 when it is not one."""
    try:
        seconds = float(ts)
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0  # "nan" and "1e999" parse as floats


def _strip_mention(text: str, mention: str) -> str:
    return " ".join(text.replace(mention, " ").split())


def _interaction(payload: Mapping[str, Any], identity: SlackIdentity) -> ChatEvent | None:
    if payload.get("type") != "block_actions":
        return None
    actions = payload.get("actions")
    if not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        raise MalformedRequest("block_actions without actions")
    action = actions[0]
    user = payload.get("user") or {}
    channel = payload.get("channel") or {}
    message = payload.get("message") or {}
    container = payload.get("container") or {}
    team = payload.get("team") or {}
    ts = str(message.get("ts") or container.get("message_ts") or "")
    action_ts = _str(action, "action_ts") if "action_ts" in action else ""
    user_id = str(user.get("id") or "")
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=f"action-{ts}-{action.get('action_id')}-{user_id}-{action_ts}",
        kind=EventKind.ACTION,
        workspace=str(team.get("id") or user.get("team_id") or ""),
        channel=str(channel.get("id") or container.get("channel_id") or ""),
        thread=str(message.get("thread_ts") or ts),
        message_id="",
        author=user_id,
        author_name=str(user.get("name") or user.get("username") or ""),
        author_kind=AuthorKind.HUMAN,
        action=str(action.get("action_id") or ""),
        action_value=str(action.get("value") or ""),
        sent_at=_seconds(action_ts),
    )
