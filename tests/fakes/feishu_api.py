"""A protocol-faithful Feishu/Lark Open API on a loopback port, for the real lark-oapi client.

Tests build ``lark.Client.builder().app_id(FEISHU_APP_ID).app_secret(FEISHU_APP_SECRET)
.domain(fake.base_url).build()`` and call it; token fetching, request building and response
parsing all run lark-oapi's own code. lark-oapi 1.7.5 accepts only an origin as ``domain``
(``https://host[:port]``, or ``http://`` for 127.0.0.1/localhost; no path), so
:attr:`FakeFeishuAPI.base_url` is ``http://127.0.0.1:PORT``.

Contract (codes and messages from open.feishu.cn / open.larkoffice.com docs unless noted):

* ``POST /open-apis/auth/v3/tenant_access_token/internal`` answers
  ``{"code": 0, "msg": "ok", "tenant_access_token": "t-...", "expire": 7200}`` (top level, no
  ``data``). The token is derived from the app id and secret, so it stays valid across
  :meth:`~tests.fakes.slack_api.LoopbackAPI.reset`: lark-oapi caches it process-wide, keyed by
  app id, for ``expire - 600`` seconds, and never refetches on a token error.
* Every other route needs ``Authorization: Bearer <that token>``: none is 99991661, another is
  99991663 ("Invalid access token for authorization. ..."), both HTTP 400.
* ``GET /open-apis/bot/v3/info`` answers ``{"code": 0, "msg": "ok", "bot": {...}}`` (top-level
  ``bot``, not ``data``).
* ``im/v1/messages`` create, reply and PATCH answer ``{"code": 0, "msg": "success", "data": ...}``
  with Feishu's message object. Replying to or patching a recalled message is 230011; patching
  an unknown id is 230001 ``ext=invalid message_id``; more than :attr:`patch_qps_limit` PATCHes
  of one message within a second is 230020; content over 30 KB (cards) / 150 KB (text) is
  230025. All are HTTP 400. A repeated ``uuid`` returns the first message (Feishu's idempotency).
* ``GET /open-apis/im/v1/messages/{message_id}`` answers ``data.items`` with the one message;
  ``GET /open-apis/im/v1/messages`` lists a chat (``container_id_type=chat``) or a topic
  (``thread``, every message of the topic, root included) a page at a time: ``data.items``,
  ``has_more``, ``page_token``; ``body.content`` is a JSON string; ``sender.sender_type`` is
  ``user`` or ``app`` (``id_type`` ``open_id`` or ``app_id``), ``sender_name`` when
  ``with_sender_name=true``. Seed messages with :meth:`FakeFeishuAPI.add_message`.
* CardKit: create a card entity (card JSON 2.0 only), update it (``PUT``), change its settings,
  stream an element's text. ``sequence`` is per card and must strictly increase across all of
  these (the first update needs ≥1): otherwise 300317 "sequence number compare failed". Element
  streaming needs ``config.streaming_mode: true`` (else 300309 "streaming mode is closed") and
  an existing ``element_id`` (else 300313). 300317/300309/300313 are confirmed from public issue
  threads quoting real responses; their HTTP status (400 here) is not.
* Errors carry ``{"code", "msg", "error": {"log_id"}}``; every answer has ``X-Tt-Logid``.
* Faults are scripted per operation (names follow lark-oapi: ``im.v1.message.patch``,
  ``cardkit.v1.card.update``, ...), exactly as for the Slack fake; :func:`frequency_limited`
  is Feishu's gateway rate limit (HTTP 429, code 99991400, ``x-ogw-ratelimit-reset``).

Not confirmed anywhere public, so chosen and marked here: 10003/10014 for a wrong app id /
secret (codes seen quoted, messages are ours), 99992402 "field validation failed" for other
invalid requests, and the wording after ``ext=`` for our own 230001 cases.

Example:
    >>> feishu_api.script("im.v1.message.patch", frequency_limited(), feishu_error(230011, "..."))
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.signing import (
    FEISHU_APP_ID,
    FEISHU_APP_SECRET,
    FEISHU_BOT_OPEN_ID,
    FEISHU_CHAT_ID,
    FEISHU_TENANT_KEY,
)
from tests.fakes.slack_api import Fault, LoopbackAPI, RecordedCall, Simulated, slow

__all__ = [
    "CARD_NOT_FOUND",
    "CONTENT_TOO_LONG",
    "ELEMENT_NOT_FOUND",
    "FIELD_VALIDATION_FAILED",
    "INVALID_APP_ID",
    "INVALID_APP_SECRET",
    "INVALID_PARAMETER",
    "MESSAGE_RATE_LIMITED",
    "MESSAGE_RECALLED",
    "RATE_LIMITED",
    "SCOPE_MISSING",
    "SEQUENCE_COMPARE_FAILED",
    "STREAMING_CLOSED",
    "TOKEN_INVALID",
    "TOKEN_MISSING",
    "FakeFeishuAPI",
    "Fault",
    "RecordedCall",
    "close_lark_import_loop",
    "feishu_api",
    "feishu_error",
    "frequency_limited",
    "slow",
]

RATE_LIMITED = 99991400
"""Gateway rate limit: "request trigger frequency limit" (HTTP 429; 400 on older APIs)."""
TOKEN_MISSING = 99991661
"""No access token on the request."""
TOKEN_INVALID = 99991663
"""Expired or unknown tenant_access_token (HTTP 400)."""
INVALID_PARAMETER = 230001
"""IM: "Your request contains an invalid request parameter, ext=..."."""
MESSAGE_RECALLED = 230011
"""IM: "The message is recalled."."""
MESSAGE_RATE_LIMITED = 230020
"""IM: "This operation triggers the frequency limit." (e.g. >5 PATCH/s on one message)."""
CONTENT_TOO_LONG = 230025
"""IM: "The length of the message content reaches its limit."."""
SEQUENCE_COMPARE_FAILED = 300317
"""CardKit: "sequence number compare failed" (sequence not strictly increasing)."""
STREAMING_CLOSED = 300309
"""CardKit: "streaming mode is closed"."""
ELEMENT_NOT_FOUND = 300313
"""CardKit: "not find elementID"."""
FIELD_VALIDATION_FAILED = 99992402
"""Generic "field validation failed" (chosen for other invalid requests; unconfirmed)."""
CARD_NOT_FOUND = FIELD_VALIDATION_FAILED
"""Unknown ``card_id``: the real code is unconfirmed, so the generic one is used."""
INVALID_APP_ID = 10003
"""Token endpoint, unknown app id (code seen quoted; message ours)."""
INVALID_APP_SECRET = 10014
"""Token endpoint, wrong app secret (code seen quoted; message ours)."""
SCOPE_MISSING = 99991672
"""The app lacks the permission an API needs: "Access denied. One of the following scopes is
required: [...]" (code seen quoted; HTTP 400 here)."""

_TOKEN_TTL_S = 7200
_TEXT_LIMIT = 150 * 1024
_CARD_LIMIT = 30 * 1024
_MSG_TYPES = frozenset(
    {"text", "post", "image", "file", "audio", "media", "sticker", "interactive", "share_chat"}
    | {"share_user", "system"}
)
_RECEIVE_ID_TYPES = frozenset({"open_id", "union_id", "user_id", "email", "chat_id"})


def feishu_error(code: int, msg: str, *, status: int = 400) -> Fault:
    """A Feishu error answer ``{"code": code, "msg": msg}`` (HTTP 400 by default)."""
    return Fault(status=status, body={"code": code, "msg": msg, "error": {"log_id": _log_id()}})


def frequency_limited(reset_s: int = 1, *, limit: int = 50, status: int = 429) -> Fault:
    """Feishu's gateway rate limit: code 99991400 with ``x-ogw-ratelimit-*`` headers.

    Args:
        reset_s: ``x-ogw-ratelimit-reset``, seconds until the window reopens.
        limit: ``x-ogw-ratelimit-limit``.
        status: 429 (current APIs) or 400 (some older ones).

    Returns:
        The fault.
    """
    return Fault(
        status=status,
        body={"code": RATE_LIMITED, "msg": "request trigger frequency limit"},
        headers={"x-ogw-ratelimit-limit": str(limit), "x-ogw-ratelimit-reset": str(reset_s)},
    )


def _log_id() -> str:
    return time.strftime("%Y%m%d%H%M%S", time.gmtime()) + secrets.token_hex(11).upper()


def _ok(data: Any) -> Simulated:
    return 200, {"code": 0, "msg": "success", "data": data}


def _err(code: int, msg: str, status: int = 400) -> Simulated:
    return status, {"code": code, "msg": msg}


def _invalid(ext: str) -> Simulated:
    return _err(
        INVALID_PARAMETER, f"Your request contains an invalid request parameter, ext={ext}."
    )


def _now_ms() -> str:
    return str(time.time_ns() // 1_000_000)


def _find_element(node: Any, element_id: str) -> dict[str, Any] | None:
    """The component with this ``element_id`` anywhere in a card JSON 2.0 tree."""
    children: Iterable[Any]
    if isinstance(node, dict):
        if node.get("element_id") == element_id:
            return node
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_element(child, element_id)
        if found is not None:
            return found
    return None


class FakeFeishuAPI(LoopbackAPI):
    """The Feishu Open API routes the bot uses, with Feishu's envelopes and state rules."""

    _thread_name = "fake-feishu"

    def __init__(
        self,
        *,
        app_id: str = FEISHU_APP_ID,
        app_secret: str = FEISHU_APP_SECRET,
        bot_open_id: str = FEISHU_BOT_OPEN_ID,
        app_name: str = "chatops",
        tenant_key: str = FEISHU_TENANT_KEY,
    ) -> None:
        im = "/open-apis/im/v1/messages"
        cards = "/open-apis/cardkit/v1/cards"
        routes = [
            Route(
                "/open-apis/auth/v3/tenant_access_token/internal",
                self._token_route,
                methods=["POST"],
            ),
            Route("/open-apis/bot/v3/info", self._route("bot.v3.info"), methods=["GET"]),
            Route(im, self._route("im.v1.message.create"), methods=["POST"]),
            Route(im, self._route("im.v1.message.list"), methods=["GET"]),
            Route(im + "/{message_id}", self._route("im.v1.message.get"), methods=["GET"]),
            Route(im + "/{message_id}/reply", self._route("im.v1.message.reply"), methods=["POST"]),
            Route(im + "/{message_id}", self._route("im.v1.message.patch"), methods=["PATCH"]),
            Route(cards, self._route("cardkit.v1.card.create"), methods=["POST"]),
            Route(cards + "/{card_id}", self._route("cardkit.v1.card.update"), methods=["PUT"]),
            Route(
                cards + "/{card_id}/settings",
                self._route("cardkit.v1.card.settings"),
                methods=["PATCH"],
            ),
            Route(
                cards + "/{card_id}/elements/{element_id}/content",
                self._route("cardkit.v1.card_element.content"),
                methods=["PUT"],
            ),
        ]
        super().__init__(routes)
        self.app_id = app_id
        """The only app."""
        self.app_secret = app_secret
        """Its secret."""
        self.bot_open_id = bot_open_id
        """``bot.open_id`` from ``/bot/v3/info``."""
        self.app_name = app_name
        """``bot.app_name``."""
        self.tenant_key = tenant_key
        """Tenant of the bot's messages."""
        self.patch_qps_limit: int | None = 5
        """PATCHes allowed per message per second (Feishu: 5); None disables. Reset restores."""
        self._messages: dict[str, dict[str, Any]] = {}
        self._recalled: set[str] = set()
        self._uuids: dict[tuple[str, str], str] = {}
        self._patches: dict[str, deque[float]] = {}
        self._cards: dict[str, dict[str, Any]] = {}
        self._names: dict[str, str] = {}
        self._handlers: dict[
            str, Callable[[Mapping[str, str], dict[str, Any], dict[str, str]], Simulated]
        ] = {
            "bot.v3.info": self._bot_info,
            "im.v1.message.create": self._create,
            "im.v1.message.list": self._list,
            "im.v1.message.get": self._get,
            "im.v1.message.reply": self._reply,
            "im.v1.message.patch": self._patch,
            "cardkit.v1.card.create": self._card_create,
            "cardkit.v1.card.update": self._card_update,
            "cardkit.v1.card.settings": self._card_settings,
            "cardkit.v1.card_element.content": self._element_content,
        }
        self._operations = frozenset({*self._handlers, "auth.v3.tenant_access_token.internal"})

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` for ``lark.Client.builder().domain(...)``."""
        return self.origin

    @property
    def tenant_access_token(self) -> str:
        """The token this app is issued (stable for the app id and secret)."""
        digest = hashlib.sha256(f"{self.app_id}:{self.app_secret}".encode()).hexdigest()
        return "t-g1" + digest[:38]

    # -- state and inspection

    def _reset_state(self) -> None:
        self._messages.clear()
        self._recalled.clear()
        self._uuids.clear()
        self._patches.clear()
        self._cards.clear()
        self._names.clear()
        self.patch_qps_limit = 5

    def add_message(
        self,
        message_id: str,
        *,
        chat_id: str = FEISHU_CHAT_ID,
        text: str = "",
        root_id: str = "",
        msg_type: str = "text",
        content: Any = None,
        sender_id: str = "ou_human",
        sender_type: str = "user",
        sender_name: str = "",
        create_time_ms: int | None = None,
        thread_id: str = "",
    ) -> None:
        """Seed a message (replies to unknown ``om_`` ids are accepted anyway).

        A person's text message by default; ``msg_type`` with ``content`` (a dict, stored as
        its JSON string the way Feishu keeps ``body.content``) for a post or a card, and
        ``sender_type="app"`` with the app's ``cli_`` id as ``sender_id`` for an app's message.
        A reply with ``root_id`` joins the root's thread (created when the root has none), as
        a reply in a topic does.
        """
        body = content if content is not None else {"text": text}
        sender = {"id": sender_id, "id_type": "open_id", "sender_type": sender_type}
        if sender_type == "app":
            sender["id_type"] = "app_id"
        message: dict[str, Any] = {
            "message_id": message_id,
            "root_id": root_id,
            "msg_type": msg_type,
            "create_time": str(create_time_ms if create_time_ms is not None else _now_ms()),
            "deleted": False,
            "updated": False,
            "chat_id": chat_id,
            "sender": sender,
            "body": {"content": json.dumps(body, ensure_ascii=False)},
        }
        with self._state:
            if sender_name:
                self._names[sender_id] = sender_name
            root = self._messages.get(root_id) if root_id else None
            if root is not None:
                root.setdefault("thread_id", "omt_" + os.urandom(8).hex())
                message["thread_id"] = root["thread_id"]
                message["parent_id"] = root_id
            elif thread_id:
                message["thread_id"] = thread_id
            self._messages[message_id] = message

    def recall(self, message_id: str) -> None:
        """Mark a message recalled: replies and PATCHes to it now fail with 230011."""
        with self._state:
            self._recalled.add(message_id)

    def message(self, message_id: str) -> dict[str, Any] | None:
        """A known message as last created or patched (``body.content`` is the JSON string)."""
        with self._state:
            found = self._messages.get(message_id)
            return json.loads(json.dumps(found)) if found is not None else None

    def bot_messages(self, chat_id: str | None = None) -> list[dict[str, Any]]:
        """The bot's messages (created or replied), oldest first."""
        with self._state:
            found = [
                json.loads(json.dumps(m))
                for m in self._messages.values()
                if m["sender"].get("sender_type") == "app" and chat_id in (None, m["chat_id"])
            ]
        return sorted(found, key=lambda m: int(m["create_time"]))

    def card(self, card_id: str) -> dict[str, Any] | None:
        """A card entity: ``{"data": <card JSON dict>, "sequence": int}``, or None."""
        with self._state:
            found = self._cards.get(card_id)
            return json.loads(json.dumps(found)) if found is not None else None

    # -- server side

    async def _token_route(self, request: Request) -> Response:
        body = await self._json(request)

        def simulate() -> Simulated:
            if body.get("app_id") != self.app_id:
                return _err(INVALID_APP_ID, "invalid param: app_id")
            if body.get("app_secret") != self.app_secret:
                return _err(INVALID_APP_SECRET, "app secret invalid")
            return 200, {
                "code": 0,
                "msg": "ok",
                "tenant_access_token": self.tenant_access_token,
                "expire": _TOKEN_TTL_S,
            }

        return await self._answer(
            request, "auth.v3.tenant_access_token.internal", body, None, simulate
        )

    def _route(self, operation: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            body = await self._json(request)
            authorization = request.headers.get("authorization", "")
            token = authorization.removeprefix("Bearer ") if authorization else None
            handler = self._handlers[operation]
            path_params = {k: str(v) for k, v in request.path_params.items()}
            query = dict(request.query_params)

            def simulate() -> Simulated:
                if not token:
                    return _err(
                        TOKEN_MISSING,
                        "Missing access token for authorization. "
                        "Please make a request with token attached.",
                    )
                if token != self.tenant_access_token:
                    return _err(
                        TOKEN_INVALID,
                        "Invalid access token for authorization. "
                        "Please make a request with token attached.",
                    )
                return handler(path_params, body, query)

            return await self._answer(request, operation, body, token, simulate, path_params)

        return endpoint

    async def _answer(
        self,
        request: Request,
        operation: str,
        body: dict[str, Any],
        token: str | None,
        simulate: Callable[[], Simulated],
        path_params: Mapping[str, str] | None = None,
    ) -> Response:
        log_id = _log_id()

        def with_log_id() -> Simulated:
            status, answer = simulate()
            if answer.get("code") not in (0, None) and "error" not in answer:
                answer = {**answer, "error": {"log_id": log_id}}
            return status, answer

        return await self._serve_call(
            request,
            operation,
            body,
            token,
            with_log_id,
            path_params=path_params,
            extra_headers={"X-Tt-Logid": log_id},
        )

    @staticmethod
    async def _json(request: Request) -> dict[str, Any]:
        raw = await request.body()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        return parsed if isinstance(parsed, dict) else {}

    def _bot_info(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        bot = {
            "activate_status": 2,
            "app_name": self.app_name,
            "avatar_url": "https://s1-imfile.feishucdn.com/static-resource/v1/fake-avatar",
            "ip_white_list": [],
            "open_id": self.bot_open_id,
        }
        return 200, {"code": 0, "msg": "ok", "bot": bot}

    # -- im/v1/messages

    @staticmethod
    def _content_error(msg_type: Any, content: Any) -> Simulated | None:
        if msg_type not in _MSG_TYPES:
            return _invalid("invalid msg_type")
        if not isinstance(content, str):
            return _invalid("invalid content")
        try:
            parsed = json.loads(content)
        except ValueError:
            return _invalid("invalid content")
        if not isinstance(parsed, dict):
            return _invalid("invalid content")
        limit = _TEXT_LIMIT if msg_type == "text" else _CARD_LIMIT
        if len(content.encode()) > limit:
            return _err(CONTENT_TOO_LONG, "The length of the message content reaches its limit.")
        return None

    def _new_message(
        self, body: dict[str, Any], chat_id: str, root_id: str = "", parent_id: str = ""
    ) -> dict[str, Any]:
        now = _now_ms()
        message: dict[str, Any] = {
            "message_id": "om_" + os.urandom(16).hex(),
            "msg_type": body["msg_type"],
            "create_time": now,
            "update_time": now,
            "deleted": False,
            "updated": False,
            "chat_id": chat_id,
            "sender": {
                "id": self.app_id,
                "id_type": "app_id",
                "sender_type": "app",
                "tenant_key": self.tenant_key,
            },
            "body": {"content": body["content"]},
        }
        if root_id:
            message["root_id"] = root_id
            message["parent_id"] = parent_id
        self._messages[message["message_id"]] = message
        return message

    def _idempotent(self, operation: str, body: dict[str, Any]) -> Simulated | None:
        key = body.get("uuid")
        if key and (operation, str(key)) in self._uuids:
            return _ok(self._messages[self._uuids[(operation, str(key))]])
        return None

    def _remember(self, operation: str, body: dict[str, Any], message_id: str) -> None:
        if body.get("uuid"):
            self._uuids[(operation, str(body["uuid"]))] = message_id

    def _create(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        if query.get("receive_id_type") not in _RECEIVE_ID_TYPES:
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: receive_id_type")
        receive_id = body.get("receive_id")
        if not isinstance(receive_id, str) or not receive_id:
            return _invalid("invalid receive_id")
        if query["receive_id_type"] == "chat_id" and not receive_id.startswith("oc_"):
            return _invalid("invalid receive_id")
        error = self._content_error(body.get("msg_type"), body.get("content"))
        if error is not None:
            return error
        repeated = self._idempotent("create", body)
        if repeated is not None:
            return repeated
        chat_id = receive_id if query["receive_id_type"] == "chat_id" else "oc_p2p_" + receive_id
        message = self._new_message(body, chat_id)
        self._remember("create", body, message["message_id"])
        return _ok(message)

    def _reply(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        target_id = path["message_id"]
        if not target_id.startswith("om_"):
            return _invalid("invalid message_id")
        if target_id in self._recalled:
            return _err(MESSAGE_RECALLED, "The message is recalled.")
        error = self._content_error(body.get("msg_type"), body.get("content"))
        if error is not None:
            return error
        repeated = self._idempotent("reply", body)
        if repeated is not None:
            return repeated
        target = self._messages.get(target_id, {})
        root_id = target.get("root_id") or target_id
        message = self._new_message(body, target.get("chat_id", FEISHU_CHAT_ID), root_id, target_id)
        if body.get("reply_in_thread") or target.get("thread_id"):
            message["thread_id"] = target.get("thread_id") or "omt_" + os.urandom(8).hex()
            if target:
                target["thread_id"] = message["thread_id"]  # the root heads the new topic
        self._remember("reply", body, message["message_id"])
        return _ok(message)

    def _shown(self, message: dict[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
        """A message as the read APIs answer it (``sender_name`` when asked and known)."""
        shown: dict[str, Any] = json.loads(json.dumps(message))
        name = self._names.get(shown["sender"].get("id", ""))
        if query.get("with_sender_name") == "true" and name:
            shown["sender"]["sender_name"] = name
        return shown

    def _get(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        """``GET /im/v1/messages/{message_id}``: ``data.items`` holds the one message."""
        message_id = path["message_id"]
        if message_id in self._recalled:
            return _err(MESSAGE_RECALLED, "The message is recalled.")
        message = self._messages.get(message_id)
        if message is None:
            return _invalid("invalid message_id")
        return _ok({"items": [self._shown(message, query)]})

    def _list(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        """``GET /im/v1/messages``: a chat's or a thread's messages, a page at a time.

        ``container_id_type`` ``chat`` (the chat's messages outside topics, and the topics'
        roots) or ``thread`` (every message of the topic, its root included);
        ``sort_type`` ``ByCreateTimeAsc`` (default) or ``ByCreateTimeDesc``; ``page_size``
        1..50 (default 20); ``page_token`` continues; recalled messages are left out.
        """
        kind, container = query.get("container_id_type"), query.get("container_id", "")
        if kind not in ("chat", "thread") or not container:
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: container_id")
        order = query.get("sort_type", "ByCreateTimeAsc")
        try:
            size = int(query.get("page_size", "20"))
            start = int(query.get("page_token") or "0")
        except ValueError:
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: page_size")
        if order not in ("ByCreateTimeAsc", "ByCreateTimeDesc") or not 1 <= size <= 50:
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: page_size")
        order_of = {m_id: i for i, m_id in enumerate(self._messages)}  # ties: as sent
        found = sorted(
            (m for m in self._messages.values() if self._listed(m, kind, container)),
            key=lambda m: (int(m["create_time"]), order_of[m["message_id"]]),
            reverse=order == "ByCreateTimeDesc",
        )
        page = found[start : start + size]
        more = start + size < len(found)
        data = {
            "has_more": more,
            "page_token": str(start + size) if more else "",
            "items": [self._shown(m, query) for m in page],
        }
        return _ok(data)

    def _listed(self, message: dict[str, Any], kind: str, container: str) -> bool:
        """Whether a list shows `message` (never a recalled one).

        A topic's list shows all of the topic; a chat's, its messages outside topics and the
        topics' roots.
        """
        if message["message_id"] in self._recalled:
            return False
        if kind == "thread":
            return bool(message.get("thread_id") == container)
        in_chat = bool(message["chat_id"] == container)
        return in_chat and message["message_id"] == (
            message.get("root_id") or message["message_id"]
        )

    def _patch(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        message_id = path["message_id"]
        if message_id in self._recalled:
            return _err(MESSAGE_RECALLED, "The message is recalled.")
        message = self._messages.get(message_id)
        if message is None:
            return _invalid("invalid message_id")
        error = self._content_error("interactive", body.get("content"))
        if error is not None:
            return error
        if self._over_patch_limit(message_id):
            return _err(MESSAGE_RATE_LIMITED, "This operation triggers the frequency limit.")
        message["body"] = {"content": body["content"]}
        message["updated"] = True
        message["update_time"] = _now_ms()
        return _ok({})

    def _over_patch_limit(self, message_id: str) -> bool:
        if self.patch_qps_limit is None:
            return False
        now = time.monotonic()
        window = self._patches.setdefault(message_id, deque())
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) >= self.patch_qps_limit:
            return True
        window.append(now)
        return False

    # -- cardkit/v1

    @staticmethod
    def _card_json(card: Any) -> dict[str, Any] | Simulated:
        if not isinstance(card, dict) or card.get("type") != "card_json":
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: type")
        try:
            data = json.loads(card.get("data", ""))
        except (TypeError, ValueError):
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: data")
        if not isinstance(data, dict) or data.get("schema") != "2.0":
            # CardKit entities accept card JSON 2.0 only (open.larkoffice.com cardkit-v1 docs).
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: card schema must be 2.0")
        return data

    def _sequenced(self, card_id: str, body: dict[str, Any]) -> dict[str, Any] | Simulated:
        """The card, if it exists and ``sequence`` moves forward; else the error."""
        card = self._cards.get(card_id)
        if card is None:
            return _err(CARD_NOT_FOUND, f"field validation failed: card_id {card_id} not found")
        sequence = body.get("sequence")
        if not isinstance(sequence, int) or sequence <= card["sequence"]:
            return _err(SEQUENCE_COMPARE_FAILED, "sequence number compare failed")
        return card

    def _card_create(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        data = self._card_json(body)
        if isinstance(data, tuple):
            return data
        card_id = "7" + "".join(secrets.choice("0123456789") for _ in range(18))
        self._cards[card_id] = {"data": data, "sequence": 0}
        return _ok({"card_id": card_id})

    def _card_update(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        card = self._sequenced(path["card_id"], body)
        if isinstance(card, tuple):
            return card
        data = self._card_json(body.get("card"))
        if isinstance(data, tuple):
            return data
        card.update(data=data, sequence=body["sequence"])
        return _ok({})

    def _card_settings(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        card = self._sequenced(path["card_id"], body)
        if isinstance(card, tuple):
            return card
        try:
            settings = json.loads(body.get("settings", ""))
        except (TypeError, ValueError):
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: settings")
        if not isinstance(settings, dict):
            return _err(FIELD_VALIDATION_FAILED, "field validation failed: settings")
        card["data"].setdefault("config", {}).update(settings.get("config") or {})
        card["sequence"] = body["sequence"]
        return _ok({})

    def _element_content(
        self, path: Mapping[str, str], body: dict[str, Any], query: dict[str, str]
    ) -> Simulated:
        card = self._sequenced(path["card_id"], body)
        if isinstance(card, tuple):
            return card
        if not (card["data"].get("config") or {}).get("streaming_mode"):
            return _err(STREAMING_CLOSED, "streaming mode is closed")
        element = _find_element(card["data"].get("body"), path["element_id"])
        if element is None:
            return _err(ELEMENT_NOT_FOUND, f"ErrMsg: not find elementID : {path['element_id']}; ")
        element["content"] = str(body.get("content", ""))
        card["sequence"] = body["sequence"]
        return _ok({})


# --- pytest fixtures ---------------------------------------------------------------------------


# Names are pinned so an aliased import in conftest still registers the real names.
def close_lark_import_loop() -> None:
    """Close the event loop lark-oapi grabs when it is imported, if nothing runs it.

    ``lark_oapi/ws/client.py`` runs ``loop = asyncio.get_event_loop()`` (or creates one) at
    import time and keeps it in a module global, so whichever loop was current then is never
    closed and Python reports "unclosed event loop" at exit. Call this at session end.
    """
    module = sys.modules.get("lark_oapi.ws.client")
    loop = getattr(module, "loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_running():
        loop.close()


@pytest.fixture(scope="session", name="_feishu_api_server")
def _feishu_api_server() -> Iterator[FakeFeishuAPI]:
    """One fake Feishu Open API for the whole session."""
    api = FakeFeishuAPI()
    api.start()
    yield api
    api.stop()
    close_lark_import_loop()


@pytest.fixture(name="feishu_api")
def feishu_api(_feishu_api_server: FakeFeishuAPI) -> Iterator[FakeFeishuAPI]:
    """A started :class:`FakeFeishuAPI` with no scripts, records, messages or cards."""
    _feishu_api_server.reset()
    yield _feishu_api_server
    _feishu_api_server.reset()
