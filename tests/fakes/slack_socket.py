"""A Socket Mode Slack on a loopback port: ``apps.connections.open`` and the WebSocket it hands out.

Why a second fake: :class:`tests.fakes.slack_api.FakeSlackAPI` serves the Web API from uvicorn on
a thread without websockets and accepts only the bot token. Socket Mode needs an app-level token
and a WebSocket the test can drive, so this fake is a small aiohttp app in the test's own event
loop (``async with FakeSocketModeSlack() as fake``, one per test). Point the receiver's web
client at :attr:`FakeSocketModeSlack.base_url`; slack_sdk's Socket Mode client accepts the
``ws://`` URL it gets back (the SDK's own tests connect to ``ws://`` too).

Protocol (docs.slack.dev "Using Socket Mode"; frames shaped like those in slack_sdk's test server):

* ``POST /api/apps.connections.open`` with the app-level token (``Authorization: Bearer xapp-…``
  or a ``token`` form field) answers ``{"ok": true, "url": "ws://127.0.0.1:PORT/link/?ticket=…"}``.
  No token is ``not_authed``, a bot token (``xoxb-``) ``not_allowed_token_type``, any other
  ``invalid_auth``. A ticket is good for one connection.
* On connect the server sends ``hello``; then the test sends frames: :func:`events_api` and
  :func:`interactive` envelopes, or :func:`disconnect` (Slack asking the client to reconnect).
* The client acknowledges an envelope with ``{"envelope_id": …}``. Every text frame a client sends
  is recorded on its :class:`SocketConnection`, and waiting is event-driven
  (:meth:`FakeSocketModeSlack.wait_for_ack`, :meth:`FakeSocketModeSlack.wait_for_connection`).

Example:
    >>> conn = await slack_socket.wait_for_connection()
    >>> envelope_id = await conn.send(events_api(slack_app_mention()))
    >>> await slack_socket.wait_for_ack(envelope_id)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import WSMsgType, web

from tests.fakes.signing import SLACK_API_APP_ID

__all__ = [
    "APP_TOKEN",
    "FakeSocketModeSlack",
    "SocketConnection",
    "disconnect",
    "events_api",
    "hello",
    "interactive",
]

APP_TOKEN = "xapp-1-A0FAKEAPP-1000000000000-fakeapptoken"
"""The only app-level token the fake accepts."""

_WAIT_S = 5.0


def events_api(
    payload: Mapping[str, Any],
    *,
    envelope_id: str | None = None,
    retry_attempt: int = 0,
    retry_reason: str = "",
) -> dict[str, Any]:
    """An ``events_api`` envelope around an ``event_callback`` payload.

    Args:
        payload: e.g. :func:`tests.fakes.signing.slack_app_mention`.
        envelope_id: Random by default; what the client must acknowledge.
        retry_attempt: 0 on first delivery, 1..3 on Slack's retries.
        retry_reason: ``""`` first, ``"timeout"`` when the previous delivery was not acked.

    Returns:
        The frame.
    """
    return {
        "envelope_id": envelope_id or str(uuid.uuid4()),
        "payload": dict(payload),
        "type": "events_api",
        "accepts_response_payload": False,
        "retry_attempt": retry_attempt,
        "retry_reason": retry_reason,
    }


def interactive(payload: Mapping[str, Any], *, envelope_id: str | None = None) -> dict[str, Any]:
    """An ``interactive`` envelope, e.g. around :func:`tests.fakes.signing.slack_block_actions`."""
    return {
        "envelope_id": envelope_id or str(uuid.uuid4()),
        "payload": dict(payload),
        "type": "interactive",
        "accepts_response_payload": False,
    }


def hello(app_id: str = SLACK_API_APP_ID, num_connections: int = 1) -> dict[str, Any]:
    """The ``hello`` frame Slack sends first on every connection."""
    return {
        "type": "hello",
        "num_connections": num_connections,
        "debug_info": {
            "host": "applink-fake-0",
            "build_number": 1,
            "approximate_connection_time": 18060,
        },
        "connection_info": {"app_id": app_id},
    }


def disconnect(reason: str = "refresh_requested") -> dict[str, Any]:
    """Slack asking the client to move to a new connection (``refresh_requested``, ``warning``)."""
    return {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake-0"}}


@dataclass(eq=False)
class SocketConnection:
    """One client connection, as the server sees it."""

    ws: web.WebSocketResponse
    received: list[dict[str, Any]] = field(default_factory=list)
    """Text frames the client sent, parsed, in arrival order."""
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once the connection is over (the client's close frames were read)."""

    async def send(self, frame: Mapping[str, Any]) -> str:
        """Send one frame; return its ``envelope_id`` (``""`` for frames without one)."""
        # ASCII escapes, valid JSON either way: text UTF-8 cannot carry (a lone surrogate) can
        # only arrive escaped.
        await self.ws.send_str(json.dumps(frame))
        return str(frame.get("envelope_id", ""))

    def acks(self) -> list[str]:
        """The envelope ids this connection acknowledged, in order."""
        return [str(f["envelope_id"]) for f in self.received if "envelope_id" in f]


class FakeSocketModeSlack:
    """``apps.connections.open`` and the Socket Mode WebSocket, served on 127.0.0.1."""

    def __init__(self, *, app_token: str = APP_TOKEN, app_id: str = SLACK_API_APP_ID) -> None:
        self.app_token = app_token
        """The only app-level token accepted."""
        self.app_id = app_id
        """``connection_info.app_id`` in ``hello``."""
        self.opened: list[str | None] = []
        """The token presented to each ``apps.connections.open`` call."""
        self.connections: list[SocketConnection] = []
        """Every connection so far, in order."""
        self.on_frame: Callable[[dict[str, Any]], Awaitable[None]] | None = None
        """Awaited for each client frame before it is recorded (to look at state at that moment)."""
        self._tickets: set[str] = set()
        self._changed = asyncio.Condition()
        app = web.Application()
        app.router.add_post("/api/apps.connections.open", self._open)
        app.router.add_get("/link/", self._link)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        self._port: int | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/api/`` for ``AsyncWebClient(base_url=...)``."""
        if self._port is None:
            raise RuntimeError("FakeSocketModeSlack is not started")
        return f"http://127.0.0.1:{self._port}/api/"

    async def start(self) -> None:
        """Serve on an ephemeral loopback port."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        """Close open connections from the server side and stop serving."""
        for conn in self.connections:
            if not conn.ws.closed:
                await conn.ws.close()
        await self._runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- waiting (event-driven)

    async def _wait(self, reached: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(_WAIT_S), self._changed:
                await self._changed.wait_for(reached)
        except TimeoutError:
            seen = [c.received for c in self.connections]
            raise TimeoutError(f"waited {_WAIT_S}s for {what}; clients sent {seen}") from None

    async def wait_for_connection(self, count: int = 1) -> SocketConnection:
        """Wait until ``count`` connections were made (``hello`` sent); return the last of them."""
        await self._wait(lambda: len(self.connections) >= count, f"connection {count}")
        return self.connections[count - 1]

    async def wait_for_ack(self, envelope_id: str) -> dict[str, Any]:
        """Wait for the client's acknowledgement of ``envelope_id``; return the frame."""

        def frame() -> dict[str, Any] | None:
            for conn in self.connections:
                for received in conn.received:
                    if received.get("envelope_id") == envelope_id:
                        return received
            return None

        await self._wait(lambda: frame() is not None, f"the ack of {envelope_id}")
        found = frame()
        assert found is not None
        return found

    def acked(self, envelope_id: str) -> bool:
        """Whether any connection acknowledged ``envelope_id`` so far."""
        return any(envelope_id in conn.acks() for conn in self.connections)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # -- server side

    async def _open(self, request: web.Request) -> web.Response:
        form = await request.post()
        authorization = request.headers.get("Authorization", "")
        token = authorization.removeprefix("Bearer ") if authorization else form.get("token")
        presented = str(token) if token else None
        self.opened.append(presented)
        if presented is None:
            return web.json_response({"ok": False, "error": "not_authed"})
        if presented.startswith("xoxb-"):
            return web.json_response({"ok": False, "error": "not_allowed_token_type"})
        if presented != self.app_token:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        ticket = str(uuid.uuid4())
        self._tickets.add(ticket)
        url = f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}&app_id={self.app_id}"
        return web.json_response({"ok": True, "url": url})

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._tickets:
            return web.json_response({"ok": False, "error": "invalid_ticket"}, status=401)
        self._tickets.discard(ticket)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        conn = SocketConnection(ws)
        open_now = sum(not c.closed.is_set() for c in self.connections) + 1
        await conn.send(hello(self.app_id, open_now))
        self.connections.append(conn)
        await self._notify()
        try:
            async for message in ws:
                if message.type is WSMsgType.TEXT:
                    frame = json.loads(message.data)
                    if self.on_frame is not None:
                        await self.on_frame(frame)
                    conn.received.append(frame)
                    await self._notify()
        finally:
            conn.closed.set()
            await self._notify()
        return ws
