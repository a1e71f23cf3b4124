"""A runtime wired to the fake OpenAI provider, a real Redis and the slow service (fixture).

`make_runtime(*extra_tools, **loop_limits)` builds one; its OpenAI clients are closed after the
test. Shared by the runtime tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import pytest
import redis.asyncio as aioredis

from agent_core import HostAllowlist, LoopLimits, OpenAIChatModel, Runtime, Tool, Toolset
from agent_core.tools import http_get_tool
from tests.fakes import openai_provider as fp
from tests.fakes.service import SlowService

__all__ = ["http", "make_runtime"]


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


@pytest.fixture
async def make_runtime(
    fake_llm: fp.FakeProvider,
    redis_client: aioredis.Redis,
    slow_service: SlowService,
    http: httpx.AsyncClient,
) -> AsyncIterator[Callable[..., Runtime]]:
    clients: list[openai.AsyncOpenAI] = []

    def build(*extra: Tool, max_retries: int = 0, **limits: Any) -> Runtime:
        client = openai.AsyncOpenAI(
            base_url=fake_llm.base_url, api_key="test", max_retries=max_retries
        )
        clients.append(client)
        allow = HostAllowlist.parse(f"127.0.0.1:{slow_service.port}")
        toolset = Toolset.of([http_get_tool(allow, http), *extra])
        return Runtime(
            model=OpenAIChatModel(client, "test-model"),
            redis=redis_client,
            toolset=toolset,
            instructions="You are an SRE assistant.",
            limits=LoopLimits(**limits),
        )

    yield build
    for client in clients:
        await client.close()
