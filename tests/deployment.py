"""A deployment in processes: `chatops serve`, workers and a scheduler, for process-level tests.

They share one real Redis and reach the fake OpenAI provider, the fake Slack and Feishu APIs and
the slow service over loopback; requests reach the ingress over HTTP, signed (and for Feishu
encrypted) as the platforms do. Waits are blocking Redis reads (the settles book, the lease-free
ring), never sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from agent_core import SettleRecord
from bot.events import session_id_for
from bot.keys import BotKeys
from bot.state.settle import Book
from tests.fakes import signing as sg
from tests.fakes.openai_provider import FakeProvider
from tests.fakes.service import SlowService
from tests.fakes.slack_api import FakeSlackAPI
from tests.processes import Chatops

__all__ = ["Deployment", "deploy_env", "deployment", "slack_session"]

SECRET = "process-signing-secret-0000000000"
ENCRYPT_KEY = "process-encrypt-key-0123456789"
TOKEN = "process-verification-token"
KEYS = BotKeys()
BLOCK_MS = 2000


def slack_env(
    redis_url: str, llm: FakeProvider, slack: FakeSlackAPI, service: SlowService
) -> dict[str, str]:
    """The environment of a Slack-only deployment on the fakes (the benches' processes)."""
    return {
        "REDIS_URL": redis_url,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "bench",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_API_URL": slack.base_url,
        "CHATOPS_HTTP_ALLOWLIST": f"127.0.0.1:{service.port}",
    }


@pytest.fixture
def deploy_env(redis_server, fake_llm, slack_api, feishu_api, slow_service) -> dict[str, str]:
    return {
        "REDIS_URL": redis_server,
        "OPENAI_BASE_URL": fake_llm.base_url,
        "OPENAI_API_KEY": "test",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": slack_api.token,
        "SLACK_API_URL": slack_api.base_url,
        "FEISHU_APP_ID": sg.FEISHU_APP_ID,
        "FEISHU_APP_SECRET": sg.FEISHU_APP_SECRET,
        "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_VERIFICATION_TOKEN": TOKEN,
        "FEISHU_DOMAIN": feishu_api.base_url,
        "CHATOPS_HTTP_ALLOWLIST": f"127.0.0.1:{slow_service.port}",
        "CHATOPS_LEASE_TTL_S": "1.5",
        # The scripts count model requests; the intent check after a redirect is one more
        # (it is tested through the bot in tests/bot/control/test_intent_check_e2e.py).
        "CHATOPS_INTENT_CHECK": "off",
    }


class Deployment:
    """The processes of one test, and an HTTP client for the ingress."""

    def __init__(self, env: dict[str, str], redis: aioredis.Redis) -> None:
        self.env, self.redis = env, redis
        self.processes: list[Chatops] = []
        self.workers: list[Chatops] = []
        self.base = ""
        self.http = httpx.AsyncClient(timeout=10)
        self._seen = "0-0"

    async def start(
        self,
        *,
        scheduler_interval: float | None = None,
        workers: int = 1,
        first_worker_env: dict[str, str] | None = None,
        first_worker_args: tuple[str, ...] = (),
    ) -> None:
        serve, self.base = await Chatops.serve(self.env)
        self.serve = serve
        self.processes.append(serve)
        for n in range(workers):
            env = {**self.env, **(first_worker_env or {})} if n == 0 else self.env
            self.workers.append(await Chatops.worker(env, *(first_worker_args if n == 0 else ())))
        self.processes.extend(self.workers)
        if scheduler_interval is not None:
            self.processes.append(await Chatops.scheduler(self.env, scheduler_interval))

    @property
    def worker(self) -> Chatops:
        """The first worker started."""
        return self.workers[0]

    async def add_worker(self, extra_env: dict[str, str] | None = None, *args: str) -> Chatops:
        """Start one more worker (with `extra_env`, e.g. a failpoint, on top of the common)."""
        worker = await Chatops.worker({**self.env, **(extra_env or {})}, *args)
        self.workers.append(worker)
        self.processes.append(worker)
        return worker

    async def slack(self, payload: dict[str, Any]) -> None:
        body, headers = sg.slack_request(payload, secret=SECRET)
        response = await self.http.post(f"{self.base}/slack/events", content=body, headers=headers)
        assert response.status_code == 200, response.text

    async def slack_press(self, payload: dict[str, Any]) -> None:
        body, headers = sg.slack_interactivity(payload, secret=SECRET)
        response = await self.http.post(f"{self.base}/slack/events", content=body, headers=headers)
        assert response.status_code == 200, response.text

    async def feishu(self, payload: dict[str, Any], path: str = "/feishu/events") -> None:
        body, headers = sg.feishu_request(
            payload, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN
        )
        response = await self.http.post(f"{self.base}{path}", content=body, headers=headers)
        assert response.status_code == 200, response.text

    async def next_settle(self, timeout_s: float = 30.0) -> SettleRecord:
        """The next settle written to the book (blocking reads, no polling)."""
        async with asyncio.timeout(timeout_s):
            while True:  # each read blocks under redis-py's 5 s socket timeout
                reply: Any = await self.redis.xread(
                    {KEYS.book(Book.SETTLES): self._seen}, count=1, block=BLOCK_MS
                )
                if reply:
                    break
        entry_id, fields = reply[0][1][0]
        self._seen = entry_id.decode()
        return SettleRecord.model_validate_json(fields[b"record"])

    async def released(self, session: str, timeout_s: float = 30.0) -> None:
        """Wait until the session's lease is free and its card's final state was delivered.

        Read from the records (a lease-free ring is heard only by a subscriber listening then).
        """
        lease, card = KEYS.live_turn(session), KEYS.card(session)
        async with asyncio.timeout(timeout_s):
            while True:
                async with self.redis.pipeline(transaction=False) as pipe:
                    pipe.exists(lease)
                    pipe.hmget(card, ["final", "delivered"])
                    held, (final, delivered) = await pipe.execute()
                if not held and final == b"1" and delivered == b"1":
                    return
                await asyncio.sleep(0.05)

    async def holder(self, session: str) -> Chatops:
        """The worker process holding the session's lease (its name is in its log)."""
        held: Any = await self.redis.get(KEYS.live_turn(session))
        assert held is not None, f"no worker holds {session}"
        worker_name = held.decode().split("|")[1]
        return next(w for w in self.workers if worker_name in w.log)

    async def close(self) -> None:
        await self.http.aclose()
        for proc in reversed(self.processes):
            await proc.stop()


@pytest.fixture
async def deployment(deploy_env, redis_client) -> AsyncIterator[Deployment]:
    running = Deployment(deploy_env, redis_client)
    yield running
    await running.close()


def slack_session(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)
