"""`chatops serve` as operators run it: a real uvicorn process, configured by the environment.

Why this way: the in-process tests cover the app; this one covers what they cannot — the console
script, settings read from the environment, the bot's Slack identity fetched at start-up from the
Web API at `SLACK_API_URL`, a signed request over real HTTP, and a clean exit on SIGTERM. It is
marked slow (process start-up) and runs in CI with everything else. The body deadline (X13) is
checked over a raw socket, since only uvicorn itself can show that the connection is closed:
the tests read until the server's end of file, under a socket timeout far above the deadline,
and assert the status and the close, not how long it took.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis

from bot.keys import BotKeys
from tests.conftest import free_port
from tests.fakes import signing as sg
from tests.fakes.slack_api import FakeSlackAPI

SECRET = "serve-process-signing-secret"
BODY_DEADLINE_S = 1.0
"""Short, so the slow-body tests end soon; long enough for any body sent at once."""


@pytest.fixture
def served(redis_server: str, slack_api: FakeSlackAPI) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_server,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": slack_api.token,
        "SLACK_API_URL": slack_api.base_url,
        "CHATOPS_BODY_READ_TIMEOUT_S": str(BODY_DEADLINE_S),
    }
    exe = Path(sys.executable).with_name("chatops")
    proc = subprocess.Popen(
        [str(exe), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # up to 30 s for the process to import and bind
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if proc.poll() is not None:
                    break
            try:
                proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        yield base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            # uvicorn shuts down gracefully, then re-raises the signal it captured, so the
            # exit status is the signal's; the log says whether the shutdown was clean.
            assert proc.wait(timeout=15) in (0, -signal.SIGTERM)
            log = proc.stdout.read().decode() if proc.stdout else ""
            assert "Application shutdown complete" in log, log
        finally:
            if proc.poll() is None:
                proc.kill()
            if proc.stdout:
                proc.stdout.close()


@pytest.mark.slow
def test_serve_accepts_a_signed_mention_and_exits_cleanly(
    served: str, redis_server: str, slack_api: FakeSlackAPI
) -> None:
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    body, headers = sg.slack_request(sg.slack_app_mention(), secret=SECRET)
    response = httpx.post(f"{served}/slack/events", content=body, headers=headers, timeout=5)
    assert response.status_code == 200
    assert client.xlen(BotKeys().turns_stream) == 1
    assert len(slack_api.calls_to("auth.test")) == 1, "the identity is fetched once at start-up"
    bad = httpx.post(f"{served}/slack/events", content=body, headers={}, timeout=5)
    assert bad.status_code == 401
    client.close()


def test_serve_without_redis_url_explains_and_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    exe = Path(sys.executable).with_name("chatops")
    done = subprocess.run(
        [str(exe), "serve"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "REDIS_URL is not set" in done.stderr
    assert "Traceback" not in done.stderr


def _connect(base: str) -> socket.socket:
    address = urlsplit(base)
    sock = socket.create_connection((address.hostname, address.port), timeout=10)
    sock.settimeout(10 * BODY_DEADLINE_S + 10)  # a server that never closes fails the test
    return sock


def _head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (EOF, or a reset).

    A reset counts as closed: a server that closes its socket with client bytes still unread
    (a trickle's last byte, in flight as the 408 went out) sends RST instead of FIN (RFC 9293
    3.6, "data lost"); uvicorn does no lingering close.
    """
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


def _status_and_headers(response: bytes) -> tuple[int, bytes]:
    head, _, _ = response.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), head.lower()


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/slack/events", "/console/events"])
def test_x13_a_body_never_finished_is_408_and_the_connection_closed(served: str, path) -> None:
    """X13: headers and part of a body, then silence: 408, `Connection: close`, EOF."""
    with _connect(served) as sock:
        sock.sendall(_head(path, 500) + b'{"type":"event_callback","event":')
        response = _until_closed(sock)
    status, head = _status_and_headers(response)
    assert status == 408, response
    assert b"connection: close" in head
    # The server is unharmed: the next request is served.
    assert httpx.get(f"{served}/healthz", timeout=5).status_code == 200


@pytest.mark.slow
def test_x13_a_trickled_body_is_408_and_the_connection_closed(served: str) -> None:
    """X13: a byte at a time (each well inside keep-alive) still meets the whole-body deadline."""
    with _connect(served) as sock:
        sock.sendall(_head("/slack/events", 10_000))
        for _ in range(10_000):
            readable, _, _ = select.select([sock], [], [], BODY_DEADLINE_S / 10)
            if readable:
                break  # the answer came: send nothing more onto a closing connection
            sock.sendall(b" ")
        response = _until_closed(sock)
    status, head = _status_and_headers(response)
    assert status == 408, response
    assert b"connection: close" in head


@pytest.mark.slow
def test_x13_a_declared_oversized_body_is_413_and_the_connection_closed(served: str) -> None:
    """S16/X13: over the limit by Content-Length: refused before a byte of it is sent."""
    with _connect(served) as sock:
        sock.sendall(_head("/slack/events", 2_000_000))
        response = _until_closed(sock)
    status, head = _status_and_headers(response)
    assert status == 413, response
    assert b"connection: close" in head
