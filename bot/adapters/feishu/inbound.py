"""Feishu/Lark: decryption, verification and normalization of events and card callbacks.

The only module (with the Feishu client) that imports `lark_oapi`, and only when Feishu is
configured: `import lark_oapi` costs 1.6–3 s and about 170 MB. We use the SDK's `AESCipher` to
decrypt, and do the checks the SDK leaves out ourselves (docs/design.md §Platform facts): its
dispatcher checks no time window and no nonce, compares signatures non-constant-time, and surfaces a
missing header or a wrong token as a 500. Here every such failure is a 401 and every undecodable
body a 400, with a generic body (docs/reliability.md F3–F10).

Feishu does not sign the `url_verification` challenge (the SDK accepts it on the token alone),
so an unsigned request is accepted only when it decrypts to a challenge with the right token.

An authentic request that names another app or tenant (docs/reliability.md A9: an Encrypt Key shared
between apps, or a second app pointed at this URL) opens to nothing: the ingress acknowledges it,
so Feishu does not deliver it again, and acts on nothing.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import logging
import math
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lark_oapi.core.utils import AESCipher

from bot.adapters import untrusted_json
from bot.errors import MalformedRequest, NotAuthentic
from bot.events import AuthorKind, ChatEvent, EventKind, Platform

__all__ = [
    "FEISHU_WINDOW_S",
    "FeishuIdentity",
    "FeishuInbound",
    "FeishuVerifier",
    "normalize_event",
]

FEISHU_WINDOW_S = 300
"""Requests whose timestamp is further than this from now are refused (the SDK checks none)."""

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
_LEGACY_SIGNATURE = re.compile(r"[0-9a-f]{40}")

log = logging.getLogger(__name__)

NonceGuard = Callable[[str], Awaitable[bool]]
"""Records a nonce; returns False when it was already seen (a replay)."""


@dataclass(frozen=True, slots=True)
class FeishuIdentity:
    """Who the bot is on Feishu (from `/open-apis/bot/v3/info` at start-up)."""

    open_id: str
    app_id: str = ""
    """Our app (`FEISHU_APP_ID`); requests naming another app are dropped. Empty: not checked."""
    tenant_key: str = ""
    """Our tenant (`FEISHU_TENANT_KEY`; Feishu's bot info does not say it); requests naming
    another tenant are dropped. Empty: not checked."""


@dataclass(frozen=True, slots=True)
class FeishuInbound:
    """A verified Feishu request: a challenge to echo, an event, a replay, or nothing."""

    challenge: str | None = None
    event: ChatEvent | None = None
    replay: bool = False


@dataclass(frozen=True)
class FeishuVerifier:
    """Checks and opens Feishu requests for one app."""

    encrypt_key: str
    verification_token: str
    identity: FeishuIdentity

    async def open(
        self,
        body: bytes,
        headers: Mapping[str, str],
        *,
        now: float,
        nonce_guard: NonceGuard,
        card: bool = False,
    ) -> FeishuInbound:
        """Verify, decrypt and normalize one request (an event, or a card callback)."""
        scheme = self._check_signature(body, headers, now, card=card)
        if scheme == "legacy":  # signed with the verification token itself; maybe plaintext
            payload = (
                self._decrypt(body)
                if body.lstrip().startswith(b'{"encrypt"')
                else (_json_object(body))
            )
            if _foreign(payload, self.identity):
                return FeishuInbound()
            if not await nonce_guard(headers["x-lark-request-nonce"]):
                return FeishuInbound(replay=True)
            return FeishuInbound(event=_guarded(_legacy_card_action, payload))
        signed = scheme == "v2"
        payload = self._decrypt(body)
        self._check_token(payload)
        if payload.get("type") == "url_verification":
            return FeishuInbound(challenge=str(payload.get("challenge") or ""))
        if not signed:
            raise NotAuthentic("unsigned request that is not a challenge")
        if _foreign(payload, self.identity):
            return FeishuInbound()
        if not await nonce_guard(headers["x-lark-request-nonce"]):
            return FeishuInbound(replay=True)
        return FeishuInbound(event=_normalized(payload, self.identity, card=card))

    def _check_signature(
        self, body: bytes, headers: Mapping[str, str], now: float, *, card: bool
    ) -> str:
        """Return `v2`, `legacy` (a SHA-1 card callback, F14) or `` (unsigned)."""
        names = ("x-lark-request-timestamp", "x-lark-request-nonce", "x-lark-signature")
        timestamp, nonce, signature = (headers.get(name, "") for name in names)
        if not (timestamp or nonce or signature):
            return ""  # only a challenge may come unsigned; decided after decryption
        legacy = card and _LEGACY_SIGNATURE.fullmatch(signature) is not None
        if not _TIMESTAMP.fullmatch(timestamp) or not nonce:
            raise NotAuthentic("missing or malformed signature headers")
        if not legacy and not _SIGNATURE.fullmatch(signature):
            raise NotAuthentic("missing or malformed signature headers")
        if abs(now - int(timestamp)) > FEISHU_WINDOW_S:
            raise NotAuthentic("timestamp outside the 5-minute window")
        if legacy:  # old card callbacks: sha1(timestamp + nonce + verification token + body)
            key, digest = self.verification_token, hashlib.sha1
        else:
            key, digest = self.encrypt_key, hashlib.sha256
        expected = digest((timestamp + nonce + key).encode() + body).hexdigest()
        if not hmac.compare_digest(expected, signature):
            raise NotAuthentic("signature mismatch")
        return "legacy" if legacy else "v2"

    def _decrypt(self, body: bytes) -> dict[str, Any]:
        outer = _json_object(body)
        encrypted = outer.get("encrypt")
        if not isinstance(encrypted, str):
            raise MalformedRequest("plaintext body while an encrypt key is configured")
        try:
            plaintext = AESCipher(self.encrypt_key).decrypt_str(encrypted)
        except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
            raise MalformedRequest("body does not decrypt") from exc
        return _json_object(plaintext.encode())

    def _check_token(self, payload: Mapping[str, Any]) -> None:
        header = payload.get("header")
        token = header.get("token") if isinstance(header, dict) else payload.get("token")
        if not isinstance(token, str) or not hmac.compare_digest(
            token.encode(), self.verification_token.encode()
        ):
            raise NotAuthentic("verification token mismatch")


def _foreign(payload: Mapping[str, Any], identity: FeishuIdentity) -> bool:
    """Whether an authentic payload names another app or tenant (docs/reliability.md A9); logs it.

    Schema 2.0 events and card callbacks name both in `header`; v1 events in `event`; legacy
    card callbacks name only the tenant, at the top level. The card operator's own
    `tenant_key` counts only when the envelope names no tenant: in a chat shared with another
    organization it is that organization's, while the callback is still ours. A name that is
    absent is not compared: the signature and token already proved the request is for us.
    """
    header, event = payload.get("header"), payload.get("event")
    envelope: Mapping[str, Any] = (
        header if isinstance(header, dict) else event if isinstance(event, dict) else payload
    )
    app_id = _text(envelope.get("app_id"))
    tenant = _text(envelope.get("tenant_key")) or _operator_tenant(event)
    if identity.app_id and app_id and app_id != identity.app_id:
        whose = f"app {app_id}"
    elif identity.tenant_key and tenant and tenant != identity.tenant_key:
        whose = f"tenant {tenant}"
    else:
        return False
    event_id = _text(envelope.get("event_id")) or _text(payload.get("uuid"))
    log.info("feishu event %s from %s dropped: not ours", event_id or "(no id)", whose)
    return True


def _operator_tenant(event: Any) -> str:
    operator = event.get("operator") if isinstance(event, dict) else None
    return _text(operator.get("tenant_key")) if isinstance(operator, dict) else ""


def _text(value: Any) -> str:
    """A payload field as text; anything but a non-empty string counts as absent."""
    return value if isinstance(value, str) else ""


def _normalized(
    payload: Mapping[str, Any], identity: FeishuIdentity, *, card: bool
) -> ChatEvent | None:
    if card:
        return _guarded(_card_action, payload)
    return _guarded(lambda p: normalize_event(p, identity), payload)


def _guarded(
    normalize: Callable[[Mapping[str, Any]], ChatEvent | None], payload: Mapping[str, Any]
) -> ChatEvent | None:
    """Normalize an authentic payload; a field of an unexpected type is a 400, never a 500."""
    try:
        return normalize(payload)
    except (TypeError, AttributeError, ValueError, ArithmeticError, RecursionError) as exc:
        # pydantic's ValidationError is a ValueError
        raise MalformedRequest(f"unexpected payload shape: {type(exc).__name__}") from exc


def _json_object(raw: bytes) -> dict[str, Any]:
    # Bad UTF-8 or JSON, absurd nesting or a lone surrogate escape: a 400 (X14)
    value = untrusted_json.loads(raw)
    if not isinstance(value, dict):
        raise MalformedRequest("body is not a JSON object")
    return value


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedRequest(f"missing {what}")
    return value


def _event_envelope(payload: Mapping[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """Return (event id, event type, tenant key, event) for v2 and v1 payloads."""
    event = _dict(payload.get("event"), "event")
    header = payload.get("header")
    if isinstance(header, dict):  # schema 2.0
        return (
            str(header.get("event_id") or ""),
            str(header.get("event_type") or ""),
            str(header.get("tenant_key") or ""),
            event,
        )
    return (  # v1: the delivery id is `uuid`
        str(payload.get("uuid") or ""),
        str(event.get("type") or ""),
        str(event.get("tenant_key") or ""),
        event,
    )


def normalize_event(payload: Mapping[str, Any], identity: FeishuIdentity) -> ChatEvent | None:
    """Normalize a decrypted event payload (v2 or v1); None for events we do not act on."""
    event_id, event_type, tenant, event = _event_envelope(payload)
    if not event_id:
        raise MalformedRequest("event without an id")
    if event_type == "message" and "header" not in payload:
        return _v1_message_event(event_id, tenant, event)
    if event_type != "im.message.receive_v1":
        return None  # subscribed to more than we act on: acknowledged and dropped
    message = _dict(event.get("message"), "message")
    sender = _dict(event.get("sender"), "sender")
    sender_id = sender.get("sender_id") or {}
    message_id = str(message.get("message_id") or "")
    text, mentioned = _text_of(message, identity)
    return ChatEvent(
        platform=Platform.FEISHU,
        event_id=event_id,
        workspace=tenant or str(sender.get("tenant_key") or ""),
        channel=str(message.get("chat_id") or ""),
        thread=str(message.get("root_id") or message_id),
        message_id=message_id,
        author=str(sender_id.get("open_id") or ""),
        author_kind=_author_kind(sender, identity),
        text=text,
        mentioned=mentioned or message.get("chat_type") == "p2p",
        sent_at=_millis(message.get("create_time")),
    )


def _v1_message_event(event_id: str, tenant: str, event: Mapping[str, Any]) -> ChatEvent:
    """A legacy (v1) `message` event: flat fields, the mention already stripped for us."""
    message_id = str(event.get("open_message_id") or "")
    kind = AuthorKind.HUMAN if event.get("open_id") else AuthorKind.OTHER_BOT
    return ChatEvent(
        platform=Platform.FEISHU,
        event_id=event_id,
        workspace=tenant,
        channel=str(event.get("open_chat_id") or ""),
        thread=str(event.get("root_id") or message_id),
        message_id=message_id,
        author=str(event.get("open_id") or event.get("app_id") or ""),
        author_kind=kind,
        text=" ".join(str(event.get("text_without_at_bot") or "").split()),
        mentioned=bool(event.get("is_mention")) or event.get("chat_type") == "private",
    )


def _millis(value: Any) -> float:
    """Feishu's millisecond timestamps (strings) as epoch seconds; 0 when absent."""
    try:
        seconds = int(str(value)) / 1000
    except (ValueError, OverflowError):
        return 0.0
    return seconds if math.isfinite(seconds) else 0.0


def _text_of(message: Mapping[str, Any], identity: FeishuIdentity) -> tuple[str, bool]:
    if message.get("message_type") != "text":
        return "", False
    # The content is JSON inside the JSON: its escapes are decoded only here (X14).
    content = untrusted_json.loads(str(message.get("content") or "{}"), what="message content")
    if not isinstance(content, dict):
        raise MalformedRequest("message content is not a JSON object")
    text = str(content.get("text") or "")
    mentioned = False
    for mention in message.get("mentions") or []:
        if (mention.get("id") or {}).get("open_id") == identity.open_id:
            mentioned = True
            text = text.replace(str(mention.get("key") or "\x00"), " ")
    return " ".join(text.split()), mentioned


def _author_kind(sender: Mapping[str, Any], identity: FeishuIdentity) -> AuthorKind:
    if sender.get("sender_type") == "user":
        return AuthorKind.HUMAN
    if (sender.get("sender_id") or {}).get("open_id") == identity.open_id:
        return AuthorKind.SELF
    return AuthorKind.OTHER_BOT if sender.get("sender_type") == "app" else AuthorKind.SYSTEM


def _card_action(payload: Mapping[str, Any]) -> ChatEvent:
    """A `card.action.trigger` callback (schema 2.0)."""
    event_id, _, tenant, event = _event_envelope(payload)
    operator = _dict(event.get("operator"), "operator")
    context = _dict(event.get("context"), "context")
    message_id = str(context.get("open_message_id") or "")
    return _button_press(
        event.get("action"),
        event_id=event_id or f"card-{message_id}-{event.get('token')}",
        workspace=tenant or str(operator.get("tenant_key") or ""),
        channel=str(context.get("open_chat_id") or ""),
        message_id=message_id,
        author=str(operator.get("open_id") or ""),
    )


def _legacy_card_action(payload: Mapping[str, Any]) -> ChatEvent:
    """A legacy (flat) card callback: `open_id`, `open_message_id`, `action.value`."""
    message_id = str(payload.get("open_message_id") or "")
    return _button_press(
        payload.get("action"),
        event_id=f"card-{message_id}-{payload.get('token')}",
        workspace=str(payload.get("tenant_key") or ""),
        channel=str(payload.get("open_chat_id") or ""),
        message_id=message_id,
        author=str(payload.get("open_id") or ""),
    )


def _button_press(
    action: Any, *, event_id: str, workspace: str, channel: str, message_id: str, author: str
) -> ChatEvent:
    """The `ChatEvent` of a card button press, whichever callback format carried it."""
    value = _dict(action, "action").get("value")
    if not isinstance(value, dict) or not isinstance(value.get("action"), str):
        raise MalformedRequest("card action without a value")
    return ChatEvent(
        platform=Platform.FEISHU,
        event_id=event_id,
        kind=EventKind.ACTION,
        workspace=workspace,
        channel=channel,
        thread=str(value.get("thread") or message_id),
        message_id="",
        author=author,
        author_kind=AuthorKind.HUMAN,
        action=value["action"],
        action_value=str(value.get("turn") or value.get("call") or ""),
    )
