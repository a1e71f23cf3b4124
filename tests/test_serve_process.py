"""`chatops serve` as operators run it: a real uvicorn process, configured by the environment.

Why this way: the in-process tests cover the app; this one covers what they cannot — the console
script, settings read from the environment, the bot's Slack identity fetched at start-up from the
Web API at `SLACK_API_URL`, a signed request over real HTTP, and a clean exit on SIGTERM. It is
marked slow (process start-up) and runs in CI with everything else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from bot.keys import BotKeys
from tests.conftest import free_port
from tests.fakes import signing as sg
from tests.fakes.slack_api import FakeSlackAPI

SECRET = "serve-process-signing-secret"


@pytest.fixture
def served(redis_server: str, slack_api: FakeSlackAPI) -> Iterator[str]:
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_server,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": slack_api.token,
        "SLACK_API_URL": slack_api.base_url,
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
