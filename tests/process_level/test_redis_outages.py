"""Redis crashing, pausing or not persisting; the ingress stopping mid-request (Q1, Q2, Q11, W7).

Why this way: these rows are about a real Redis process (killed with SIGKILL and restarted on
its AOF, or paused with SIGSTOP) under the real `chatops` processes, so each test starts a
redis-server of its own (the shared one must not die) and reads the result where it shows:
the stream after the restart, the settles book, the thread's card, the tool's record.

Redis 7.0 (Debian's) has no `WAITAOF`, so Q1 is parametrized over `appendfsync` instead:
`always` answers a write only once it is on disk; `everysec` may lose what was written in the
last second or two before a crash of the machine (a killed process loses nothing its kernel
already has, and the test asserts only the documented bound).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from bot.keys import BotKeys
from bot.state.turn_jobs import TurnJob
from tests.deployment import SECRET, Deployment, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.loopback import spawn_redis, stop_process
from tests.processes import Chatops
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = pytest.mark.slow

KEYS = BotKeys()
MENTIONS = 10
FSYNC_WINDOW_S = 3.0
"""Longer than `everysec`'s worst case (a write postponed up to 2 s behind a slow fsync)."""
OUTAGE_S = 10.0


class OwnRedis:
    """A redis-server of one test's own, to kill, pause and restart over its data."""

    def __init__(self, workdir: Path, *config: str) -> None:
        self.workdir, self.config = workdir, config
        self.proc, self.port = spawn_redis(workdir, *config)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def crash_and_restart(self) -> None:
        """SIGKILL (no shutdown save), then start again on the same port and directory."""
        self.proc.kill()
        self.proc.wait()
        self.proc, _ = spawn_redis(self.workdir, *self.config, port=self.port)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)


@pytest.fixture
def own_redis(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[OwnRedis]:
    config: tuple[str, ...] = getattr(request, "param", ())
    server = OwnRedis(tmp_path, *config)
    yield server
    server.signal(signal.SIGCONT)
    stop_process(server.proc)


@pytest.fixture
async def on_own_redis(deploy_env, own_redis: OwnRedis) -> AsyncIterator[Deployment]:
    """The deployment of `tests.deployment`, on the test's own Redis."""
    client = aioredis.Redis.from_url(own_redis.url, socket_timeout=None)
    running = Deployment({**deploy_env, "REDIS_URL": own_redis.url}, client)
    yield running
    await running.close()
    await client.aclose()


@pytest.mark.parametrize(
    "own_redis",
    [
        ("--appendonly", "yes", "--appendfsync", "always"),
        ("--appendonly", "yes", "--appendfsync", "everysec"),
    ],
    indirect=True,
    ids=["always", "everysec"],
)
async def test_q1_mentions_answered_200_survive_a_redis_crash(
    own_redis: OwnRedis, on_own_redis: Deployment
) -> None:
    await on_own_redis.start(workers=0)
    threads = [sg.slack_ts() for _ in range(2 * MENTIONS)]
    for thread in threads[:MENTIONS]:
        await on_own_redis.slack(sg.slack_app_mention(ts=thread))
    await asyncio.sleep(FSYNC_WINDOW_S)  # the fsync window of `everysec` passes
    for thread in threads[MENTIONS:]:
        await on_own_redis.slack(sg.slack_app_mention(ts=thread))
    own_redis.crash_and_restart()

    entries: Any = await on_own_redis.redis.xrange(KEYS.turns_stream)
    kept = {TurnJob.model_validate_json(fields[b"job"]).event.thread for _, fields in entries}
    assert set(threads[:MENTIONS]) <= kept  # older than the fsync window: never lost
    if "always" in own_redis.config:
        assert kept == set(threads)  # `always`: every 200 was on disk before it was sent


async def test_q11_a_redis_paused_for_ten_seconds_mid_analysis_is_ridden_out(
    own_redis: OwnRedis, on_own_redis: Deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("Redis came back; the database is fine."),
    )
    on_own_redis.env["CHATOPS_LEASE_TTL_S"] = "30"  # an outage shorter than the lease
    await on_own_redis.start(workers=1)
    thread = sg.slack_ts()
    await on_own_redis.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    own_redis.signal(signal.SIGSTOP)
    slow_service.release("db")  # the tool's result arrives while Redis is away
    await asyncio.sleep(OUTAGE_S)
    own_redis.signal(signal.SIGCONT)

    settled = await on_own_redis.next_settle(timeout_s=60)
    assert settled.reason == "completed", (settled.error, on_own_redis.worker.log)
    await on_own_redis.released(slack_session(thread))
    worker = on_own_redis.worker
    assert worker.proc.poll() is None  # ridden out: no crash, no restart
    assert len(slow_service.hits) == 1  # the side effect ran once
    assert [r.status for r in fake_llm.requests] == [200, 200]
    assert len(cards_in(slack_api, thread)) == 1
    final = final_card(slack_api, thread)
    assert "Redis came back" in card_text(final) and not stop_buttons(final)


async def test_w7_a_webhook_in_flight_when_the_ingress_stops_is_answered_truthfully(
    own_redis: OwnRedis, on_own_redis: Deployment
) -> None:
    await on_own_redis.start(workers=0)
    thread = sg.slack_ts()
    body, headers = sg.slack_request(sg.slack_app_mention(ts=thread), secret=SECRET)
    own_redis.signal(signal.SIGSTOP)  # the webhook's write waits on Redis
    async with httpx.AsyncClient(timeout=30) as client:
        request = asyncio.create_task(
            client.post(f"{on_own_redis.base}/slack/events", content=body, headers=headers)
        )
        await asyncio.sleep(0.5)  # in flight
        on_own_redis.serve.signal(signal.SIGTERM)
        own_redis.signal(signal.SIGCONT)
        response = await request
    # uvicorn re-raises the signal once its graceful shutdown is over (exit status -15)
    assert await asyncio.to_thread(on_own_redis.serve.proc.wait, 20) in (0, -signal.SIGTERM)
    assert "Finished server process" in on_own_redis.serve.log, on_own_redis.serve.log
    stored = await on_own_redis.redis.xlen(KEYS.turns_stream)
    assert response.status_code in (200, 503), response.text
    if response.status_code == 200:
        assert stored == 1  # never a 200 for an event that was not written


@pytest.mark.parametrize(
    "own_redis", [("--appendonly", "yes", "--appendfsync", "everysec")], indirect=True
)
async def test_q2_a_production_worker_refuses_a_redis_without_aof(
    deploy_env, own_redis: OwnRedis
) -> None:
    production = {**deploy_env, "CHATOPS_PRODUCTION": "true"}
    refused = Chatops(["worker"], production)  # the shared test Redis runs without AOF
    assert await asyncio.to_thread(refused.proc.wait, 20) == 2
    assert "appendonly" in refused.log and "Traceback" not in refused.log

    durable = await Chatops.worker({**production, "REDIS_URL": own_redis.url})
    assert await durable.stop() == 0


@pytest.mark.parametrize(
    "own_redis", [("--appendonly", "yes", "--appendfsync", "always")], indirect=True
)
async def test_q11_a_redis_restarted_mid_analysis_is_ridden_out(
    own_redis: OwnRedis, on_own_redis: Deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("Redis restarted; the database is fine."),
    )
    await on_own_redis.start(workers=1)
    thread = sg.slack_ts()
    await on_own_redis.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    own_redis.crash_and_restart()  # every connection the worker had is gone
    # idle pooled connections are found dead when next taken (redis-py reconnects them)
    slow_service.release("db")

    settled = await on_own_redis.next_settle(timeout_s=60)
    assert settled.reason == "completed", (settled.error, on_own_redis.worker.log)
    await on_own_redis.released(slack_session(thread))
    assert on_own_redis.worker.proc.poll() is None
    assert [r.status for r in fake_llm.requests] == [200, 200]
    assert len(cards_in(slack_api, thread)) == 1
    final = final_card(slack_api, thread)
    assert "Redis restarted" in card_text(final) and not stop_buttons(final)
