"""A worker's Redis connections are bounded by `CHATOPS_REDIS_MAX_CONNECTIONS`, not by its turns.

Why this way: the promise is about the worker built from the settings as `chatops worker` builds
it, so the worker opens its own client from `REDIS_URL` (named through the URL, so that the real
redis-server's CLIENT LIST tells its connections apart from the test's and the ingress's), and
thirty analyses hold an `http_get` open at once against a pool of six. Before, every live turn
held a connection of its own in a blocking read, and an exhausted pool failed the command at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError

from bot.process.redis_pool import pooled_redis
from bot.settings import Settings
from bot.worker.assembly import open_worker
from bot.worker.process import WorkerOptions
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.fakes.slack_api import FakeSlackAPI
from tests.inprocess_bot import open_bot
from tests.slack_view import card_text, final_card

ANALYSES = 30
POOL = 6
NAME = "pooled-worker"


async def worker_connections(redis: aioredis.Redis) -> int:
    """The connections the worker's client holds open, as the server lists them."""
    clients: Any = await redis.client_list()
    return sum(1 for c in clients if c.get("name") == NAME)


def holding(service: SlowService) -> fp.Responder:
    """Each analysis calls `http_get` on the held path once, then answers."""

    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        if any(m["role"] == "tool" for m in messages):
            return fp.TextReply("The upstream pool is exhausted.")
        return fp.ToolCallsReply([fp.ToolCall("http_get", {"url": service.url("/hold/all")})])

    return reply


async def test_thirty_live_analyses_share_a_pool_of_six(
    bot_settings: Settings,
    redis_client: aioredis.Redis,
    fake_llm: fp.FakeProvider,
    slow_service: SlowService,
    slack_api: FakeSlackAPI,
) -> None:
    """Every analysis completes on its card; the worker never holds more than six connections."""
    settings = bot_settings.model_copy(
        update={
            "redis_url": f"{bot_settings.redis_url}?client_name={NAME}",
            "redis_max_connections": POOL,
        }
    )
    fake_llm.respond_with(holding(slow_service))
    threads = [sg.slack_ts() for _ in range(ANALYSES)]
    async with open_bot(bot_settings, redis_client) as bot:
        options = WorkerOptions(concurrency=ANALYSES)
        async with open_worker(settings, options=options, metrics_port=0) as worker:
            running = asyncio.get_running_loop().create_task(worker.run())
            await asyncio.gather(*(bot.post(sg.slack_app_mention(ts=ts)) for ts in threads))
            await slow_service.wait_for_hits(ANALYSES)  # all thirty live, each in its tool call
            during = await worker_connections(redis_client)
            slow_service.release("all")
            await worker.wait_finished(ANALYSES)
            after = await worker_connections(redis_client)
            worker.stop()
            await asyncio.wait_for(running, 15)
    assert 1 <= during <= POOL, during
    assert after <= POOL, after
    for ts in threads:
        assert "The upstream pool is exhausted." in card_text(final_card(slack_api, ts)), ts


async def test_a_command_waits_for_a_connection_instead_of_failing(redis_server: str) -> None:
    """With the pool's only connection busy in a blocking read, a second command waits for it."""
    redis = pooled_redis(redis_server, max_connections=1, wait_s=5.0, socket_timeout=None)
    try:

        async def read() -> Any:
            return await redis.blpop(["pool:nothing"], timeout=1)

        blocked = asyncio.get_running_loop().create_task(read())
        await asyncio.sleep(0)  # the read takes the one connection first
        assert await redis.ping() is True  # answered once the read gave the connection back
        assert await blocked is None
    finally:
        await redis.aclose()


async def ping(redis: aioredis.Redis) -> bool:
    return bool(await redis.ping())


async def test_a_full_pool_refuses_past_its_wait_and_the_next_caller_gets_the_freed_one(
    redis_server: str,
) -> None:
    """Past `wait_s` a checkout is a `ConnectionError`; a release wakes the caller still waiting."""
    redis = pooled_redis(redis_server, max_connections=1, wait_s=0.2, socket_timeout=None)
    try:
        held = await redis.connection_pool.get_connection()
        with pytest.raises(ConnectionError, match="No connection available"):
            await redis.ping()
        waiting = asyncio.get_running_loop().create_task(ping(redis))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await redis.connection_pool.release(held)
        assert await waiting is True
    finally:
        await redis.aclose()


async def test_a_cancelled_waiter_passes_its_wake_up_on(redis_server: str) -> None:
    """Two callers wait; the first is woken and cancelled at once: the second still runs."""
    redis = pooled_redis(redis_server, max_connections=1, wait_s=5.0, socket_timeout=None)
    try:
        pool = redis.connection_pool
        held = await pool.get_connection()
        first = asyncio.get_running_loop().create_task(ping(redis))
        await asyncio.sleep(0.05)
        second = asyncio.get_running_loop().create_task(ping(redis))
        await asyncio.sleep(0.05)
        await pool.release(held)  # wakes the first ...
        first.cancel()  # ... which leaves before it runs again
        assert await asyncio.wait_for(second, 2) is True
        with pytest.raises(asyncio.CancelledError):
            await first
    finally:
        await redis.aclose()


async def test_a_waiter_woken_as_its_deadline_passes_gives_the_connection_to_the_next(
    redis_server: str,
) -> None:
    """A release wakes the first waiter in a turn that ends past its deadline: the second gets it.

    The first gives up; the second, woken in its place, gets the connection at once.
    """
    redis = pooled_redis(redis_server, max_connections=1, wait_s=0.5, socket_timeout=None)
    loop = asyncio.get_running_loop()
    try:
        pool = redis.connection_pool
        held = await pool.get_connection()
        first = loop.create_task(ping(redis))
        await asyncio.sleep(0)
        first_deadline = loop.time() + 0.5
        await asyncio.sleep(0.1)
        second = loop.create_task(ping(redis))
        await asyncio.sleep(0.01)

        releasing: list[asyncio.Task[None]] = []

        def slow_turn() -> None:  # the release, in a turn a slow handler stretches past it
            releasing.append(loop.create_task(pool.release(held)))
            time.sleep(0.05)

        loop.call_at(first_deadline - 0.01, slow_turn)
        with pytest.raises(ConnectionError):
            await first
        released = loop.time()
        assert await second is True
        assert loop.time() - released < 0.05  # not at its own deadline, 0.1 s later
        await asyncio.gather(*releasing)
    finally:
        await redis.aclose()
