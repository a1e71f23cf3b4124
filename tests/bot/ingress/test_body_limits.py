"""Fault matrix X13 (and S16) in process: every route reads its body under a deadline and a limit.

Why this way: a slow or endless body is about what the server hands the app over time, which an
HTTP client cannot stage precisely; so the real ingress app (lifespan run, a real Redis) is
called as the ASGI server calls it, with a `receive` that sends part of a body and then waits
for ever (or streams more than the limit, or reports a disconnect), and a `send` that records
the answer. The deadline is set short through the settings; the tests assert the status, the
`Connection: close` header, how much was read and that nothing was written to Redis or passed
to a route (an unsigned slow body is a 408, not a 401: no signature work happened), never a
duration. `tests/process_level/test_serve_process.py` checks the same over a raw socket against a
real `chatops serve`, including that uvicorn then closes the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI

from bot.adapters.slack.inbound import SlackIdentity
from bot.ingress.app import MAX_BODY_BYTES, create_app
from bot.keys import BotKeys
from bot.settings import Settings
from tests.fakes import signing as sg
from tests.fakes.feishu_api import FakeFeishuAPI

KEYS = BotKeys()
SLACK_SECRET = "limits-signing-secret-000000000000"
ROUTES = ["/slack/events", "/feishu/events", "/feishu/card", "/console/events"]
CHUNK = 64 * 1024


@pytest.fixture
async def app(feishu_api: FakeFeishuAPI, redis_client: aioredis.Redis) -> AsyncIterator[FastAPI]:
    settings = Settings(
        _env_file=None,
        SLACK_SIGNING_SECRET=SLACK_SECRET,
        SLACK_BOT_TOKEN="xoxb-test",
        FEISHU_APP_ID=sg.FEISHU_APP_ID,
        FEISHU_APP_SECRET=sg.FEISHU_APP_SECRET,
        FEISHU_ENCRYPT_KEY="limits-encrypt-key",
        FEISHU_VERIFICATION_TOKEN="limits-token",
        FEISHU_DOMAIN=feishu_api.base_url,
        CHATOPS_CONSOLE_TOKEN="limits-console-token",
        CHATOPS_BODY_READ_TIMEOUT_S=0.2,
    )
    identity = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)
    application = create_app(settings, redis=redis_client, slack=identity)
    async with application.router.lifespan_context(application):
        yield application


class Client:
    """One request as the server drives it: scripted `receive` messages, recorded `send`s."""

    def __init__(self, messages: list[dict[str, Any]], *, then_wait: bool) -> None:
        self.script = list(messages)
        self.then_wait = then_wait
        self.received = 0
        self.sent: list[dict[str, Any]] = []
        self.never = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        self.received += 1
        if self.script:
            return self.script.pop(0)
        assert self.then_wait, "the app read past the scripted body"
        await self.never.wait()  # headers in, the rest of the body never comes
        raise AssertionError("unreachable")

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None

    @property
    def headers(self) -> dict[bytes, bytes]:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return {name.lower(): value for name, value in start["headers"]}


def scope(path: str, headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }


def part(body: bytes, *, more: bool) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


async def rejected(app: FastAPI, platform: str, status: int) -> float:
    text, _ = app.state.ingress.metrics.render()
    needle = f'chatops_ingress_rejected_total{{platform="{platform}",status="{status}"}} '
    for line in text.decode().splitlines():
        if line.startswith(needle):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.parametrize("path", ROUTES)
async def test_x13_a_body_never_finished_is_408_with_connection_close(
    app, redis_client, path
) -> None:
    """X13: headers and half a body, then nothing: 408 and Connection: close, no route runs."""
    client = Client([part(b'{"type":"event_callback",', more=True)], then_wait=True)
    headers = {"content-type": "application/json", "content-length": "400"}  # unsigned
    await app(scope(path, headers), client.receive, client.send)
    assert client.status == 408
    assert client.headers[b"connection"] == b"close"
    assert client.received == 2  # the half, then the wait the deadline ended
    assert await redis_client.xlen(KEYS.turns_stream) == 0
    assert await rejected(app, path.split("/")[1], 408) == 1


async def test_x13_a_trickling_body_is_408_however_steadily_it_trickles(app) -> None:
    """X13: the deadline covers the whole body, not each chunk."""
    client = Client([], then_wait=False)

    async def trickle() -> dict[str, Any]:
        client.received += 1
        await asyncio.sleep(0.05)  # each byte well inside any per-chunk timeout
        return part(b" ", more=True)

    await app(scope("/slack/events", {"content-length": "100000"}), trickle, client.send)
    assert client.status == 408
    assert client.headers[b"connection"] == b"close"
    assert client.received < 100_000


async def test_x13_a_declared_oversized_body_is_413_before_any_read(app, redis_client) -> None:
    """S16/X13: Content-Length over the limit is refused up front, the body never read."""
    client = Client([], then_wait=False)
    headers = {"content-length": str(MAX_BODY_BYTES + 1)}
    await app(scope("/slack/events", headers), client.receive, client.send)
    assert client.status == 413
    assert client.headers[b"connection"] == b"close"
    assert client.received == 0
    assert await rejected(app, "slack", 413) == 1


@pytest.mark.parametrize("path", ROUTES)
async def test_x13_a_streamed_oversized_body_is_413_as_soon_as_it_passes_the_limit(
    app, path
) -> None:
    """S16/X13: no Content-Length (chunked): counted as it streams, refused at the limit."""
    chunks = MAX_BODY_BYTES // CHUNK + 1  # the chunk that passes the limit
    client = Client([part(b"x" * CHUNK, more=True)] * (chunks + 10), then_wait=False)
    await app(scope(path, {"transfer-encoding": "chunked"}), client.receive, client.send)
    assert client.status == 413
    assert client.headers[b"connection"] == b"close"
    assert client.received == chunks  # nothing read past the chunk that crossed the limit


async def test_x13_a_client_that_leaves_mid_body_gets_no_answer(app, redis_client) -> None:
    """X13: a disconnect mid-body ends the request; no route runs, nothing is sent."""
    client = Client([part(b'{"type":', more=True), {"type": "http.disconnect"}], then_wait=False)
    await app(scope("/slack/events", {}), client.receive, client.send)
    assert client.sent == []
    assert await redis_client.xlen(KEYS.turns_stream) == 0


async def test_x13_a_body_in_chunks_within_the_limits_reaches_the_route(app, redis_client) -> None:
    """X13: a signed body that arrives in pieces in time is verified and accepted as usual."""
    body, headers = sg.slack_request(sg.slack_app_mention(ts=sg.slack_ts()), secret=SLACK_SECRET)
    pieces = [body[i : i + 50] for i in range(0, len(body), 50)]
    messages = [part(p, more=True) for p in pieces[:-1]] + [part(pieces[-1], more=False)]
    client = Client(messages, then_wait=True)  # after the body: the server's own messages
    headers = {**headers, "content-length": str(len(body))}
    await app(scope("/slack/events", headers), client.receive, client.send)
    assert client.status == 200
    assert await redis_client.xlen(KEYS.turns_stream) == 1


async def test_x13_requests_without_a_body_are_served_as_before(app) -> None:
    """X13: a GET (health) passes through the limits untouched."""
    client = Client([part(b"", more=False)], then_wait=True)
    get = {**scope("/healthz", {}), "method": "GET"}
    await app(get, client.receive, client.send)
    assert client.status == 200
