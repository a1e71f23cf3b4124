"""Shared fixtures: a real redis-server on a loopback port, and the fake model provider.

Redis is never faked: the queue, the signal probes and the history store depend on its real
semantics (Lua scripts, MULTI, blocking pops). One server runs per test session; every test
gets a clean database.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from tests.fakes.feishu_api import _feishu_api_server, feishu_api  # noqa: F401
from tests.fakes.openai_provider import _fake_llm_server, fake_llm  # noqa: F401
from tests.fakes.service import slow_service  # noqa: F401
from tests.fakes.slack_api import _slack_api_server, slack_api  # noqa: F401


def free_port() -> int:
    """Return a TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server is not installed: run `make test`, which installs it")
    for _ in range(5):
        port = free_port()
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
                "--loglevel",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port, socket_connect_timeout=0.2)
        try:
            for _ in range(100):
                try:
                    if client.ping():
                        return proc, port
                except redis.ConnectionError:
                    if proc.poll() is not None:
                        break  # the port was taken after all: try another
                    time.sleep(0.02)
        finally:
            client.close()
        proc.kill()
        proc.wait()
    pytest.fail("could not start redis-server")


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server for the whole test session; yields its URL."""
    proc, port = _start_redis(tmp_path_factory.mktemp("redis"))
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
async def redis_client(redis_server: str) -> AsyncIterator[aioredis.Redis]:
    """An async client on a freshly flushed database."""
    client = aioredis.Redis.from_url(redis_server)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture(autouse=True)
def _no_real_model_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Point any client built from the environment at a closed local port, never a real API."""
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "test-only")
