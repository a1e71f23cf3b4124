"""One bot in the test's process: the real ingress app (over ASGI) and a real worker.

Shared by the in-process end-to-end tests. The worker talks to the fake OpenAI provider and the
fake Slack Web API over HTTP through the real SDKs; everything shares one real Redis.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from bot.adapters.slack.inbound import SlackIdentity
from bot.analysis.actor import ActorOptions
from bot.ingress.app import create_app
from bot.publishing.card_publisher import PublisherOptions
from bot.settings import Settings
from bot.worker.assembly import open_worker
from bot.worker.process import Worker
from tests.fakes import signing as sg

__all__ = ["SECRET", "Bot", "bot", "bot_settings", "open_bot"]

SECRET = "e2e-signing-secret-000000000000000"


@pytest.fixture
def bot_settings(redis_server, fake_llm, slack_api, slow_service) -> Settings:
    return Settings(
        _env_file=None,
        REDIS_URL=redis_server,
        OPENAI_BASE_URL=fake_llm.base_url,
        OPENAI_API_KEY="test",
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_BOT_TOKEN=slack_api.token,
        SLACK_API_URL=slack_api.base_url,
        CHATOPS_HTTP_ALLOWLIST=f"127.0.0.1:{slow_service.port}",
        CHATOPS_LEASE_TTL_S=5,
        CHATOPS_PRICE_PROMPT_PER_MTOK=1.0,
        CHATOPS_PRICE_COMPLETION_PER_MTOK=2.0,
        # Scripts here count model requests; the intent check after a redirect is one more, so
        # it is off unless a test asks for it (tests/bot/control/test_intent_check_e2e.py).
        CHATOPS_INTENT_CHECK="off",
    )


class Bot:
    """The ingress (over ASGI) and one worker (started on demand) sharing one Redis."""

    def __init__(self, settings: Settings, redis: aioredis.Redis) -> None:
        self.settings, self.redis = settings, redis
        identity = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)
        self.app = create_app(settings, redis=redis, slack=identity)
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://bot"
        )
        self.worker: Worker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._worker_cm: Any = None

    async def post(self, payload: dict[str, Any]) -> httpx.Response:
        body, headers = sg.slack_request(payload, secret=SECRET)
        response = await self.http.post("/slack/events", content=body, headers=headers)
        assert response.status_code == 200, response.text
        return response

    async def press(self, payload: dict[str, Any]) -> httpx.Response:
        body, headers = sg.slack_interactivity(payload, secret=SECRET)
        response = await self.http.post("/slack/events", content=body, headers=headers)
        assert response.status_code == 200, response.text
        return response

    async def console(self, payload: dict[str, Any], *, token: str | None = None) -> httpx.Response:
        """POST a console event with the settings' token (or `token`); the answer, unchecked."""
        if token is None:
            assert self.settings.console_token is not None, "set CHATOPS_CONSOLE_TOKEN"
            token = self.settings.console_token.get_secret_value()
        headers = {"authorization": f"Bearer {token}"}
        return await self.http.post("/console/events", json=payload, headers=headers)

    async def start_worker(
        self, options: ActorOptions | None = None, *, metrics_port: int = 0
    ) -> Worker:
        """Start the worker; with `metrics_port`, it serves `GET /metrics` on 127.0.0.1."""
        options = options or ActorOptions(publisher=PublisherOptions(min_interval_s=0.05))
        self._worker_cm = open_worker(
            self.settings,
            redis=self.redis,
            actor_options=options,
            metrics_host="127.0.0.1",
            metrics_port=metrics_port,
        )
        self.worker = await self._worker_cm.__aenter__()
        self._worker_task = asyncio.get_running_loop().create_task(self.worker.run())
        return self.worker

    async def close(self) -> None:
        if self.worker is not None and self._worker_task is not None:
            self.worker.stop()
            await asyncio.wait_for(self._worker_task, 15)
            await self._worker_cm.__aexit__(None, None, None)
        await self.http.aclose()


@asynccontextmanager
async def open_bot(settings: Settings, redis: aioredis.Redis) -> AsyncIterator[Bot]:
    """A `Bot` with its ingress's lifespan run; its worker (if started) stopped at the end."""
    running = Bot(settings, redis)
    lifespan = running.app.router.lifespan_context(running.app)
    await lifespan.__aenter__()
    try:
        yield running
    finally:
        await running.close()
        await lifespan.__aexit__(None, None, None)


@pytest.fixture
async def bot(bot_settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Bot]:
    async with open_bot(bot_settings, redis_client) as running:
        yield running
