"""Shared fixtures: a real redis-server on a loopback port, and the fake model provider.

Redis is never faked: the queue, the signal probes and the history store depend on its real
semantics (Lua scripts, MULTI, blocking pops). One server runs per test session; every test
gets a clean database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from tests.deployment import deploy_env, deployment  # noqa: F401
from tests.fakes.feishu_api import _feishu_api_server, feishu_api  # noqa: F401
from tests.fakes.openai_provider import _fake_llm_server, fake_llm  # noqa: F401
from tests.fakes.service import slow_service  # noqa: F401
from tests.fakes.slack_api import _slack_api_server, slack_api  # noqa: F401
from tests.inprocess_bot import bot, bot_settings  # noqa: F401
from tests.loopback import free_port, spawn_redis, stop_process
from tests.runtime_fixtures import http, make_runtime  # noqa: F401

__all__ = ["free_port"]

pytest_plugins = ("tests.task_watchdog",)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server for the whole test session; yields its URL."""
    try:
        proc, port = spawn_redis(tmp_path_factory.mktemp("redis"))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield f"redis://127.0.0.1:{port}/0"
    stop_process(proc)


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
