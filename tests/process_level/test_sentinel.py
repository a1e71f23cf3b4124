"""A primary killed mid-analysis: the processes follow the Sentinel to the promoted replica.

Why this way: a failover is a process dying and another being promoted, so the test runs the
deployment (`chatops serve`, `chatops worker`) against a real primary, its replica and a real
Sentinel (`tests.redis_sentinel`), holds the analysis in a tool call, SIGKILLs the primary, and
once the Sentinel has promoted the replica lets the call finish. What must hold is what people
see: the analysis completes, on the one card it began on, with no Stop button left. The
processes are given the primary's old address in `REDIS_URL` (which a Sentinel deployment uses
for the database and credentials only): they could not reach the new primary without asking the
Sentinel. What an asynchronous replica can lose is docs/reliability.md Q20. Marked slow.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from bot.process.redis_pool import pooled_redis
from bot.redis_topology import RedisTopology
from bot.state.lease import Leases
from tests.deployment import KEYS, Deployment, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.redis_sentinel import PRIMARY_NAME, SentinelSet, start_sentinel_set
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = pytest.mark.slow


@pytest.fixture
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    try:
        found = start_sentinel_set(tmp_path_factory.mktemp("sentinel"))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield found
    found.stop()


def _topology(sentinels: SentinelSet) -> RedisTopology:
    return RedisTopology(
        sentinels=(("127.0.0.1", sentinels.sentinel_port),), sentinel_primary=PRIMARY_NAME
    )


@pytest.fixture
async def redis_client(sentinels: SentinelSet) -> AsyncIterator[aioredis.Redis]:
    url = f"redis://127.0.0.1:{sentinels.primary_port}/0"
    client = pooled_redis(url, topology=_topology(sentinels))
    yield client
    await client.aclose()


@pytest.fixture
def sentinel_env(deploy_env: dict[str, str], sentinels: SentinelSet) -> dict[str, str]:
    return {
        **deploy_env,
        "REDIS_URL": f"redis://127.0.0.1:{sentinels.primary_port}/0",
        "CHATOPS_REDIS_SENTINELS": f"127.0.0.1:{sentinels.sentinel_port}",
        "CHATOPS_REDIS_SENTINEL_PRIMARY": PRIMARY_NAME,
        # A lease outlives the failover (about a second to notice, less to promote), as the
        # 30 s default does; the tests' 1.5 s would be taken over mid-failover instead.
        "CHATOPS_LEASE_TTL_S": "10",
    }


async def test_a_primary_killed_mid_analysis_the_analysis_completes_on_its_card(
    sentinel_env, redis_client, sentinels, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("After the failover: the database is fine."),
    )
    deployment = Deployment(sentinel_env, redis_client)
    try:
        await deployment.start()
        thread = sg.slack_ts()
        await deployment.slack(sg.slack_app_mention(ts=thread))
        await slow_service.wait_for_hits(1)
        assert stop_buttons(cards_in(slack_api, thread)[0])

        sentinels.kill_primary()
        promoted = await asyncio.to_thread(sentinels.wait_for_failover)
        assert promoted == sentinels.replica_port
        slow_service.release("db")

        settled = await deployment.next_settle(timeout_s=60)
        assert settled.reason == "completed", settled
        await deployment.released(slack_session(thread), timeout_s=60)
        assert len(cards_in(slack_api, thread)) == 1
        final = final_card(slack_api, thread)
        assert "After the failover" in card_text(final) and not stop_buttons(final)
        assert len(slow_service.hits) == 1  # the call was not made again
        for worker in deployment.workers:
            assert worker.proc.poll() is None, worker.log  # it rode the failover out
    finally:
        await deployment.close()


async def test_an_event_is_acknowledged_once_the_replica_holds_it_or_is_counted(
    sentinel_env, redis_client, sentinels
) -> None:
    """With Sentinels the ingress waits for one replica (`WAIT`) before it answers 200.

    A replica that does not answer (stopped here) delays the acknowledgment by the wait's
    200 ms only: the event is accepted all the same and counted as unreplicated.
    """
    replica = aioredis.Redis(port=sentinels.replica_port)
    deployment = Deployment(sentinel_env, redis_client)
    try:
        await deployment.start(workers=0)
        await deployment.slack(sg.slack_app_mention(ts=sg.slack_ts()))
        assert await replica.xlen(KEYS.turns_stream) == 1  # there when the 200 came

        sentinels.procs["replica"].send_signal(signal.SIGSTOP)
        try:
            await deployment.slack(sg.slack_app_mention(ts=sg.slack_ts()))
        finally:
            sentinels.procs["replica"].send_signal(signal.SIGCONT)
        assert await redis_client.xlen(KEYS.turns_stream) == 2
        metrics = (await deployment.http.get(f"{deployment.base}/metrics")).text
        assert "chatops_ingress_unreplicated_total 1.0" in metrics
    finally:
        await replica.aclose()
        await deployment.close()


async def test_a_lease_is_taken_once_the_replica_holds_it_or_the_worker_says_so(
    redis_client, sentinels, caplog
) -> None:
    """Taking a lease waits for the replica: a failover then cannot hand its token out again."""
    leases = Leases(redis_client, KEYS, ttl_s=5, replicas=1)
    replica = aioredis.Redis(port=sentinels.replica_port)
    try:
        with caplog.at_level(logging.WARNING, logger="bot.state.lease"):
            first = await leases.try_acquire("slack-replicated", "w1", "turn-1")
            assert first is not None
            assert await replica.exists(KEYS.live_turn("slack-replicated"))  # there already
            assert not caplog.records

            sentinels.procs["replica"].send_signal(signal.SIGSTOP)
            try:
                second = await leases.try_acquire("slack-unreplicated", "w1", "turn-2")
            finally:
                sentinels.procs["replica"].send_signal(signal.SIGCONT)
        assert second is not None  # taken all the same: the primary has it
        assert [r.getMessage() for r in caplog.records] == [
            "lease of slack-unreplicated taken before 1 replica(s) acknowledged it (0 did)"
        ]
    finally:
        await replica.aclose()
