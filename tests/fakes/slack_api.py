"""A protocol-faithful Slack Web API on a loopback port, for the real ``AsyncWebClient``.

Tests point ``slack_sdk.web.async_client.AsyncWebClient(token=..., base_url=fake.base_url)`` at
a Starlette app served by uvicorn on a daemon thread, so request building, aiohttp, response
parsing and ``SlackApiError`` all run the SDK's own code (neither Slack SDK takes an
httpx transport). ``base_url`` ends with ``/api/`` like ``https://slack.com/api/``: slack_sdk
``urljoin``s the method name onto it, so a base URL without the trailing slash would lose its
last segment.

Contract:

* Every method needs ``Authorization: Bearer <token>`` (or a ``token`` form field): none is
  ``not_authed``, a wrong one ``invalid_auth``. Arguments are read the way Slack reads them:
  query string, form body and JSON body merged (slack_sdk sends ``chat.postMessage`` as JSON,
  ``chat.delete`` as query parameters on an empty form POST, ``users.info`` as a GET).
* Implemented: ``auth.test``, ``chat.postMessage``, ``chat.update``, ``chat.delete``,
  ``chat.getPermalink`` (``{"ok": true, "channel", "permalink"}``, a reply's with
  ``?thread_ts=…&cid=…``; an unknown ts ``message_not_found``),
  ``assistant.threads.setStatus``, ``conversations.replies`` (the parent first, then the replies
  oldest first; ``limit``, ``cursor``, ``latest``, ``oldest``, ``inclusive``, ``has_more`` and
  ``response_metadata.next_cursor`` as Slack pages them; a message's ``metadata`` only with
  ``include_all_metadata``), ``users.info``. A post's ``metadata`` must be an ``event_type``
  and an ``event_payload`` object (else ``invalid_metadata_format``). Messages are kept
  per ``(channel, ts)``: updating or deleting an unknown (or deleted) ts is ``message_not_found``;
  touching a human's message is ``cant_update_message`` / ``cant_delete_message``. Blocks are
  checked against Slack's limits (≤50 blocks, ``action_id`` ≤255, button ``value`` ≤2000,
  section text ≤3000): a violation is ``invalid_blocks``. Other methods: ``unknown_method``.
* Errors are HTTP 200 with ``{"ok": false, "error": ...}``, as Slack does; rate limiting is
  HTTP 429 with ``Retry-After`` and ``{"ok": false, "error": "ratelimited"}``.
* Faults are scripted per method and consumed FIFO, one per call (:meth:`LoopbackAPI.script`):
  a :class:`Fault` with a body replaces the answer (nothing is changed); one without a body
  (:func:`slow`) lets the call take effect and then holds the answer for ``delay`` seconds, like
  a server that did the work but answered late.
* Every call is recorded (:class:`RecordedCall`) with its merged arguments, token, arrival time,
  status and response.

:class:`LoopbackAPI`, :class:`Fault` and :class:`RecordedCall` are shared with the Feishu fake.

Example:
    >>> slack_api.script("chat.update", ratelimited(3), slack_error("message_not_found"))
    >>> client = AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url)
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tests.fakes.loopback_server import LoopbackServer
from tests.fakes.signing import (
    SLACK_API_APP_ID,
    SLACK_BOT_ID,
    SLACK_BOT_USER_ID,
    SLACK_TEAM_ID,
    SLACK_USER_ID,
    slack_ts,
)

__all__ = [
    "MAX_ACTION_ID",
    "MAX_BLOCKS",
    "MAX_BUTTON_VALUE",
    "MAX_SECTION_TEXT",
    "FakeSlackAPI",
    "Fault",
    "LoopbackAPI",
    "RecordedCall",
    "ratelimited",
    "slack_api",
    "slack_error",
    "slow",
]

MAX_BLOCKS = 50
"""Blocks per message."""
MAX_ACTION_ID = 255
"""Characters in an ``action_id``."""
MAX_BUTTON_VALUE = 2000
"""Characters in a button ``value``."""
MAX_SECTION_TEXT = 3000
"""Characters in a section block's ``text``."""

_POLL_S = 0.005
_REPLIES_LIMIT = 1000
"""``conversations.replies``' default and largest ``limit`` (internal apps; Tier 3)."""
_WAIT_S = 5.0
_CHANNEL_ID = re.compile(r"^[CDG][A-Z0-9]{2,}$")


# --- Shared machinery (also used by tests/fakes/feishu_api.py) -------------------------------


@dataclass(frozen=True, kw_only=True)
class Fault:
    """A scripted answer for one call.

    With a ``body`` it replaces the simulated answer and the call has no effect; without one
    the call takes effect normally and only ``headers`` and ``delay`` apply.
    """

    status: int = 200
    """HTTP status (used only with a ``body``)."""
    body: Mapping[str, Any] | None = None
    """JSON body to answer instead of the simulated one."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. ``{"Retry-After": "3"}``."""
    delay: float = 0.0
    """Seconds to hold the answer after the call was processed and recorded."""


def slow(seconds: float) -> Fault:
    """Process the call normally, then answer ``seconds`` late."""
    return Fault(delay=seconds)


@dataclass(frozen=True)
class RecordedCall:
    """One API call as the fake saw it."""

    operation: str
    """Slack method (``chat.update``) or Feishu operation (``im.v1.message.patch``)."""
    http_method: str
    """``GET``, ``POST``, ``PATCH`` or ``PUT``."""
    path: str
    """URL path."""
    params: dict[str, Any]
    """Slack: query, form and JSON arguments merged; Feishu: the JSON body."""
    token: str | None
    """Bearer token (or Slack ``token`` argument) presented, if any."""
    headers: dict[str, str]
    """Request headers, lower-cased names."""
    arrived_at: float
    """``time.monotonic()`` at arrival."""
    status: int
    """HTTP status served."""
    response: dict[str, Any]
    """JSON body served."""
    path_params: dict[str, str] = field(default_factory=dict)
    """Feishu path parameters (``message_id``, ``card_id``, ...)."""
    query: dict[str, str] = field(default_factory=dict)
    """Query string."""
    client_port: int = 0
    """The caller's TCP port: calls over one kept-alive connection share it."""


Simulated = tuple[int, dict[str, Any]]
"""An HTTP status and JSON body produced by a platform's simulation."""


class LoopbackAPI(LoopbackServer):
    """A scripted, recording HTTP API on a loopback port, served on a daemon thread.

    Subclasses add routes and a simulation. All public methods are safe to call from the
    test's thread while the server thread serves; state is guarded by one lock.
    """

    _thread_name = "fake-api"
    _operations: frozenset[str] | None = None
    """Operation names :meth:`script` accepts (None: any), so a typo fails loudly."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self._state = threading.RLock()  # a waiter's predicate may read the records
        self._waiters: list[
            tuple[Callable[[], bool], asyncio.AbstractEventLoop, asyncio.Event]
        ] = []
        self._scripts: dict[str, deque[Fault]] = {}
        self._calls: list[RecordedCall] = []
        self._generation = 0
        self._closing = False
        super().__init__(Starlette(routes=list(routes)))

    # -- lifecycle

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    # -- scripting and inspection

    def script(self, operation: str, *faults: Fault) -> None:
        """Append faults for ``operation``, consumed FIFO one per call to it.

        Raises:
            ValueError: ``operation`` is not one this API serves.
        """
        if self._operations is not None and operation not in self._operations:
            raise ValueError(f"unknown operation {operation!r}; one of {sorted(self._operations)}")
        with self._state:
            self._scripts.setdefault(operation, deque()).extend(faults)

    def remaining(self, operation: str | None = None) -> int:
        """How many scripted faults are not consumed yet (for one operation, or all)."""
        with self._state:
            if operation is not None:
                return len(self._scripts.get(operation, ()))
            return sum(len(q) for q in self._scripts.values())

    def reset(self) -> None:
        """Clear scripts, records and simulated state; release held answers."""
        with self._state:
            self._scripts.clear()
            self._calls.clear()
            self._generation += 1
            self._reset_state()

    def _reset_state(self) -> None:
        """Restore the platform's simulated state; the caller holds the lock."""

    @property
    def calls(self) -> list[RecordedCall]:
        """A snapshot of every call so far, in arrival order."""
        with self._state:
            return list(self._calls)

    def calls_to(self, operation: str) -> list[RecordedCall]:
        """The calls to one operation, in arrival order."""
        return [c for c in self.calls if c.operation == operation]

    async def wait_until(self, predicate: Callable[[], bool], timeout_s: float = 20.0) -> None:
        """Wait until `predicate()` holds, checked as each call is recorded.

        Raises:
            TimeoutError: It did not hold within `timeout_s`.
        """
        done = asyncio.Event()
        waiter = (predicate, asyncio.get_running_loop(), done)
        with self._state:
            if predicate():
                return
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await done.wait()
        finally:
            with self._state:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def wait_for_calls(self, count: int = 1, operation: str | None = None) -> None:
        """Wait until at least ``count`` calls (to ``operation``, if given) were recorded.

        Raises:
            TimeoutError: The count was not reached within 5 seconds.
        """

        def reached() -> bool:
            return sum(operation in (None, c.operation) for c in self._calls) >= count

        done = asyncio.Event()
        waiter = (reached, asyncio.get_running_loop(), done)
        with self._state:
            if reached():
                return
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(_WAIT_S):
                await done.wait()
        except TimeoutError:
            seen = [c.operation for c in self.calls]
            raise TimeoutError(
                f"wanted {count} calls to {operation or 'any'}; saw {seen}"
            ) from None
        finally:
            with self._state:
                self._waiters.remove(waiter)

    # -- server side (runs on the server thread)

    async def _serve_call(
        self,
        request: Request,
        operation: str,
        params: dict[str, Any],
        token: str | None,
        simulate: Callable[[], Simulated],
        *,
        path_params: Mapping[str, str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> Response:
        """Take a fault or simulate, record, wait out any delay, answer."""
        arrived = time.monotonic()
        with self._state:
            queue = self._scripts.get(operation)
            fault = queue.popleft() if queue else None
            generation = self._generation
            if fault is not None and fault.body is not None:
                status, body = fault.status, dict(fault.body)
            else:
                status, body = simulate()
            # A deep copy: the simulated body may share dicts with live state, and neither
            # the record nor the answer may change when that state changes later.
            body = json.loads(json.dumps(body))
            call = RecordedCall(
                operation=operation,
                http_method=request.method,
                path=request.url.path,
                params=params,
                token=token,
                headers={k.lower(): v for k, v in request.headers.items()},
                arrived_at=arrived,
                status=status,
                response=body,
                path_params=dict(path_params or {}),
                query=dict(request.query_params),
                client_port=request.client.port if request.client else 0,
            )
            self._calls.append(call)
            for predicate, loop, done in self._waiters:
                if predicate():
                    loop.call_soon_threadsafe(done.set)
        if fault is not None and fault.delay > 0:
            await self._pause(fault.delay, generation)
        headers = {**(extra_headers or {}), **(fault.headers if fault is not None else {})}
        return JSONResponse(body, status_code=status, headers=headers)

    def _release_held(self) -> None:
        with self._state:
            self._closing = True

    async def _pause(self, seconds: float, generation: int) -> None:
        # Short polls, so reset() and stop() release a held answer at once and nothing
        # outlives its test (a threading.Event cannot be awaited).
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            with self._state:
                if self._closing or self._generation != generation:
                    return
            await anyio.sleep(min(_POLL_S, left))


# --- Slack -------------------------------------------------------------------------------------


def slack_error(error: str, *, status: int = 200, **extra: Any) -> Fault:
    """A Slack error answer: ``{"ok": false, "error": error, **extra}`` (HTTP 200 by default)."""
    return Fault(status=status, body={"ok": False, "error": error, **extra})


def ratelimited(retry_after: int = 1) -> Fault:
    """Slack's rate limit: HTTP 429, ``Retry-After: <seconds>``, ``error: ratelimited``."""
    return Fault(
        status=429,
        body={"ok": False, "error": "ratelimited"},
        headers={"Retry-After": str(retry_after)},
    )


def _ok(**fields: Any) -> Simulated:
    return 200, {"ok": True, **fields}


def _err(error: str, **fields: Any) -> Simulated:
    return 200, {"ok": False, "error": error, **fields}


def _json_arg(value: Any) -> Any:
    """Form-encoded calls carry ``blocks`` as a JSON string; JSON calls carry a list."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _valid_metadata(metadata: Any) -> bool:
    """Slack's message metadata: an ``event_type`` string and an ``event_payload`` object."""
    return (
        isinstance(metadata, dict)
        and isinstance(metadata.get("event_type"), str)
        and bool(metadata["event_type"])
        and isinstance(metadata.get("event_payload"), dict)
    )


def _too_long(value: Any, limit: int, pointer: str) -> str | None:
    if len(str(value)) > limit:
        return f"must be less than {limit + 1} characters [json-pointer:{pointer}]"
    return None


def _block_violation(blocks: Any) -> str | None:
    """Why Slack would reject these blocks, or None (the wording is ours, not Slack's)."""
    if not isinstance(blocks, list):
        return "blocks must be a JSON array"
    if len(blocks) > MAX_BLOCKS:
        return f"must provide an array of {MAX_BLOCKS} or fewer items [json-pointer:/blocks]"
    for i, block in enumerate(blocks):
        if not isinstance(block, dict):
            return f"expected an object [json-pointer:/blocks/{i}]"
        problems = []
        text = block.get("text")
        if block.get("type") == "section" and isinstance(text, dict):
            problems.append(_too_long(text.get("text", ""), MAX_SECTION_TEXT, f"/blocks/{i}/text"))
        elements = list(block.get("elements") or []) if block.get("type") == "actions" else []
        if isinstance(block.get("accessory"), dict):
            elements.append(block["accessory"])
        for element in elements:
            problems.append(_too_long(element.get("action_id", ""), MAX_ACTION_ID, f"/blocks/{i}"))
            problems.append(_too_long(element.get("value", ""), MAX_BUTTON_VALUE, f"/blocks/{i}"))
        found = next((p for p in problems if p is not None), None)
        if found is not None:
            return found
    return None


class FakeSlackAPI(LoopbackAPI):
    """The Slack Web API methods the bot uses, with Slack's state rules and error shapes."""

    _thread_name = "fake-slack"

    def __init__(
        self,
        *,
        token: str = "xoxb-fake-bot-token",
        team_id: str = SLACK_TEAM_ID,
        bot_user_id: str = SLACK_BOT_USER_ID,
        bot_id: str = SLACK_BOT_ID,
        app_id: str = SLACK_API_APP_ID,
    ) -> None:
        super().__init__([Route("/api/{method}", self._handle, methods=["GET", "POST"])])
        self.token = token
        """The only bot token accepted."""
        self.team_id = team_id
        """``auth.test`` ``team_id``."""
        self.bot_user_id = bot_user_id
        """``auth.test`` ``user_id``: the author of the bot's posts."""
        self.bot_id = bot_id
        """``auth.test`` ``bot_id``."""
        self.app_id = app_id
        """``app_id`` on the bot's posts."""
        self._messages: dict[tuple[str, str], dict[str, Any]] = {}
        self._users: dict[str, dict[str, Any]] = {}
        self._status: dict[tuple[str, str], str] = {}
        self._metadata: dict[tuple[str, str], dict[str, Any]] = {}
        self._methods: dict[str, Callable[[dict[str, Any]], Simulated]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "chat.update": self._update,
            "chat.delete": self._delete,
            "chat.getPermalink": self._permalink,
            "assistant.threads.setStatus": self._set_status,
            "conversations.replies": self._replies,
            "users.info": self._users_info,
        }
        self._reset_state()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/api/`` for ``AsyncWebClient(base_url=...)``."""
        return f"{self.origin}/api/"

    # -- state and inspection

    def _reset_state(self) -> None:
        self._messages.clear()
        self._status.clear()
        self._metadata.clear()
        self._users.clear()
        self._users[SLACK_USER_ID] = self._user_record(SLACK_USER_ID, "alice", "Alice Oncall")
        self._users[self.bot_user_id] = self._user_record(
            self.bot_user_id, "chatops", "chatops", is_bot=True
        )

    def _user_record(
        self, user_id: str, name: str, real_name: str, *, is_bot: bool = False
    ) -> dict[str, Any]:
        profile = {"real_name": real_name, "display_name": name, "team": self.team_id}
        if is_bot:
            profile["bot_id"] = self.bot_id
        return {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "deleted": False,
            "real_name": real_name,
            "tz": "Etc/UTC",
            "is_bot": is_bot,
            "is_app_user": False,
            "profile": profile,
        }

    def add_user(self, user_id: str, name: str, real_name: str | None = None) -> None:
        """Make ``users.info`` know a user (``alice``/:data:`SLACK_USER_ID` and the bot exist)."""
        with self._state:
            self._users[user_id] = self._user_record(user_id, name, real_name or name)

    def add_message(
        self,
        channel: str,
        ts: str,
        text: str,
        *,
        user: str = SLACK_USER_ID,
        thread_ts: str | None = None,
        **fields: Any,
    ) -> None:
        """Seed a human's message (e.g. the mention a thread hangs off) for replies lookups.

        ``fields`` are added as they are (``attachments``, ``blocks``, ``subtype``).
        """
        message: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": ts}
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
        message.update(fields)
        with self._state:
            self._messages[(channel, ts)] = message

    def add_app_message(
        self,
        channel: str,
        ts: str,
        *,
        bot_id: str,
        name: str,
        text: str = "",
        thread_ts: str | None = None,
        **fields: Any,
    ) -> None:
        """Seed another app's message (an alert) as Slack stores it.

        ``subtype: bot_message``, its ``bot_id``, ``username`` and ``bot_profile``, no ``user``;
        ``fields`` as they are (``attachments``, ``blocks``).
        """
        message: dict[str, Any] = {
            "type": "message",
            "subtype": "bot_message",
            "text": text,
            "ts": ts,
            "bot_id": bot_id,
            "username": name,
            "bot_profile": {"id": bot_id, "name": name, "deleted": False, "team_id": self.team_id},
            **fields,
        }
        if thread_ts is not None:
            message["thread_ts"] = thread_ts
        with self._state:
            self._messages[(channel, ts)] = message

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        """The current message at ``(channel, ts)``, or None if unknown or deleted."""
        with self._state:
            found = self._messages.get((channel, ts))
            return json.loads(json.dumps(found)) if found is not None else None

    def posts(self, channel: str | None = None) -> list[dict[str, Any]]:
        """The bot's live messages (posted and not deleted), oldest first, as last updated."""
        with self._state:
            found = [
                json.loads(json.dumps(dict(m, channel=c)))
                for (c, _), m in self._messages.items()
                if m.get("bot_id") == self.bot_id and channel in (None, c)
            ]
        return sorted(found, key=lambda m: m["ts"])

    def thread_status(self, channel: str, thread_ts: str) -> str | None:
        """The last ``assistant.threads.setStatus`` status for a thread (``""`` = cleared)."""
        with self._state:
            return self._status.get((channel, thread_ts))

    # -- server side

    async def _handle(self, request: Request) -> Response:
        method = request.path_params["method"]
        params = await self._arguments(request)
        token = self._token(request, params)
        simulator = self._methods.get(method)

        def simulate() -> Simulated:
            if token is None:
                return _err("not_authed")
            if token != self.token:
                return _err("invalid_auth")
            if simulator is None:
                return _err("unknown_method", req_method=method)
            return simulator(params)

        request_id = uuid.uuid4().hex
        return await self._serve_call(
            request, method, params, token, simulate, extra_headers={"x-slack-req-id": request_id}
        )

    @staticmethod
    async def _arguments(request: Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query_params)
        raw = await request.body()
        content_type = request.headers.get("content-type", "")
        if raw and content_type.startswith("application/json"):
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if isinstance(body, dict):
                params.update(body)
        elif raw and content_type.startswith("application/x-www-form-urlencoded"):
            params.update(parse_qsl(raw.decode(), keep_blank_values=True))
        return params

    @staticmethod
    def _token(request: Request, params: dict[str, Any]) -> str | None:
        authorization = request.headers.get("authorization", "")
        if authorization.startswith("Bearer "):
            return authorization.removeprefix("Bearer ")
        token = params.pop("token", None)
        return str(token) if token else None

    def _auth_test(self, params: dict[str, Any]) -> Simulated:
        return _ok(
            url="https://fake-workspace.slack.com/",
            team="Fake Workspace",
            user="chatops",
            team_id=self.team_id,
            user_id=self.bot_user_id,
            bot_id=self.bot_id,
            is_enterprise_install=False,
        )

    def _content(self, params: dict[str, Any]) -> tuple[dict[str, Any], Simulated | None]:
        """The text/blocks of a post or update, or the error Slack would answer."""
        content: dict[str, Any] = {}
        if params.get("text") is not None:
            content["text"] = str(params["text"])
        if params.get("blocks") is not None:
            blocks = _json_arg(params["blocks"])
            violation = _block_violation(blocks)
            if violation is not None:
                return content, _err(
                    "invalid_blocks",
                    errors=[violation],
                    response_metadata={"messages": [f"[ERROR] {violation}"]},
                )
            content["blocks"] = blocks
        return content, None

    def _bot_message(self, ts: str, content: dict[str, Any]) -> dict[str, Any]:
        return {
            "user": self.bot_user_id,
            "type": "message",
            "ts": ts,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "text": content.get("text", ""),
            "team": self.team_id,
            "bot_profile": {
                "id": self.bot_id,
                "app_id": self.app_id,
                "name": "chatops",
                "deleted": False,
                "team_id": self.team_id,
            },
            "blocks": content.get("blocks", []),
        }

    def _post_message(self, params: dict[str, Any]) -> Simulated:
        channel = str(params.get("channel", ""))
        if not _CHANNEL_ID.match(channel):
            return _err("channel_not_found")
        content, error = self._content(params)
        if error is not None:
            return error
        if not content.get("text") and not content.get("blocks"):
            return _err("no_text")
        metadata = _json_arg(params["metadata"]) if params.get("metadata") is not None else None
        if metadata is not None and not _valid_metadata(metadata):
            return _err("invalid_metadata_format")
        ts = slack_ts()
        message = self._bot_message(ts, content)
        if params.get("thread_ts"):
            message["thread_ts"] = str(params["thread_ts"])
        self._messages[(channel, ts)] = message
        if metadata is not None:
            self._metadata[(channel, ts)] = metadata
        return _ok(channel=channel, ts=ts, message=message)

    def _update(self, params: dict[str, Any]) -> Simulated:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        if not _CHANNEL_ID.match(channel):
            return _err("channel_not_found")
        message = self._messages.get((channel, ts))
        if message is None:
            return _err("message_not_found")
        if message.get("bot_id") != self.bot_id:
            return _err("cant_update_message")
        content, error = self._content(params)
        if error is not None:
            return error
        message.update(content)
        message["edited"] = {"user": self.bot_user_id, "ts": slack_ts()}
        return _ok(channel=channel, ts=ts, text=message.get("text", ""), message=message)

    def _delete(self, params: dict[str, Any]) -> Simulated:
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        if not _CHANNEL_ID.match(channel):
            return _err("channel_not_found")
        message = self._messages.get((channel, ts))
        if message is None:
            return _err("message_not_found")
        if message.get("bot_id") != self.bot_id:
            return _err("cant_delete_message")
        del self._messages[(channel, ts)]
        return _ok(channel=channel, ts=ts)

    def _permalink(self, params: dict[str, Any]) -> Simulated:
        """``chat.getPermalink``: Slack's ``/archives/<channel>/p<ts without its dot>``."""
        channel, ts = str(params.get("channel", "")), str(params.get("message_ts", ""))
        if not _CHANNEL_ID.match(channel):
            return _err("channel_not_found")
        message = self._messages.get((channel, ts))
        if message is None:
            return _err("message_not_found")
        link = f"https://fake-workspace.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        thread_ts = message.get("thread_ts")
        if thread_ts and thread_ts != ts:
            link += f"?thread_ts={thread_ts}&cid={channel}"
        return _ok(channel=channel, permalink=link)

    def _set_status(self, params: dict[str, Any]) -> Simulated:
        channel = str(params.get("channel_id", ""))
        thread_ts = str(params.get("thread_ts", ""))
        if not channel or not thread_ts or "status" not in params:
            return _err("invalid_arguments")
        if not _CHANNEL_ID.match(channel):
            return _err("channel_not_found")
        self._status[(channel, thread_ts)] = str(params["status"])
        return _ok()

    def _replies(self, params: dict[str, Any]) -> Simulated:
        """``conversations.replies``: the parent first, then its replies oldest first.

        A page holds ``limit`` messages (1..1000, default 1000); ``latest``/``oldest`` bound
        the replies (``inclusive`` keeps the bounds themselves); ``cursor`` continues a page.
        """
        channel, ts = str(params.get("channel", "")), str(params.get("ts", ""))
        if not channel or not ts:
            return _err("invalid_arguments")
        if (channel, ts) not in self._messages:
            return _err("thread_not_found")
        try:
            limit = int(params.get("limit") or _REPLIES_LIMIT)
        except ValueError:
            return _err("invalid_limit")
        replies = self._thread_replies(channel, ts, params)
        start = 0
        cursor = str(params.get("cursor") or "")
        if cursor:
            try:
                start = int(base64.b64decode(cursor).decode().removeprefix("offset:"))
            except ValueError:
                return _err("invalid_cursor")
        parent = [self._messages[(channel, ts)]] if start == 0 else []
        page_size = max(1, min(limit, _REPLIES_LIMIT)) - len(parent)
        page = replies[start : start + page_size]
        end = start + len(page)
        more = end < len(replies)
        next_cursor = base64.b64encode(f"offset:{end}".encode()).decode() if more else ""
        messages = [*parent, *page]
        if str(params.get("include_all_metadata", "")).lower() in ("1", "true"):
            messages = [self._with_metadata(channel, m) for m in messages]
        return _ok(
            messages=messages,
            has_more=more,
            response_metadata={"next_cursor": next_cursor},
        )

    def _with_metadata(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        metadata = self._metadata.get((channel, str(message.get("ts"))))
        return message if metadata is None else {**message, "metadata": metadata}

    def _thread_replies(
        self, channel: str, ts: str, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The replies of a thread within ``latest``/``oldest``, oldest first."""
        inclusive = str(params.get("inclusive", "")).lower() in ("1", "true")
        latest, oldest = params.get("latest"), params.get("oldest")

        def within(m_ts: str) -> bool:
            key = float(m_ts)
            if latest and (key > float(latest) or (key == float(latest) and not inclusive)):
                return False
            return not (
                oldest and (key < float(oldest) or (key == float(oldest) and not inclusive))
            )

        found = [
            m
            for (c, m_ts), m in self._messages.items()
            if c == channel and m_ts != ts and m.get("thread_ts") == ts and within(m_ts)
        ]
        return sorted(found, key=lambda m: m["ts"])

    def _users_info(self, params: dict[str, Any]) -> Simulated:
        user = self._users.get(str(params.get("user", "")))
        return _ok(user=user) if user is not None else _err("user_not_found")


# --- pytest fixtures ---------------------------------------------------------------------------


# Names are pinned so an aliased import in conftest still registers the real names.
@pytest.fixture(scope="session", name="_slack_api_server")
def _slack_api_server() -> Iterator[FakeSlackAPI]:
    """One fake Slack API for the whole session."""
    api = FakeSlackAPI()
    api.start()
    yield api
    api.stop()


@pytest.fixture(name="slack_api")
def slack_api(_slack_api_server: FakeSlackAPI) -> Iterator[FakeSlackAPI]:
    """A started :class:`FakeSlackAPI` with no scripts, records or messages."""
    _slack_api_server.reset()
    yield _slack_api_server
    _slack_api_server.reset()
