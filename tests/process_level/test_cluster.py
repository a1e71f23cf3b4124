"""The same process-level tests, with the deployment on a real three-master Redis Cluster.

Why this way: a cluster refuses what a single Redis allows (a script or a transaction whose keys
span slots, a command sent to a node that does not serve its key), so the tests that matter most
are run again on one, unchanged: the steers and stops end to end (Slack and Feishu), a drain,
and two takeovers (a killed worker's turn resumed by another, and a drain whose grace ran out).
The module swaps the fixtures they stand on: `redis_server` is a cluster started by
`tests.redis_cluster` (three `redis-server --cluster-enabled yes`, joined by `redis-cli
--cluster create`), `redis_client` a cluster client, and every process gets
`CHATOPS_REDIS_CLUSTER=true` and the URL of a node that does not serve the deployment's slot, so
its first command is redirected. Marked slow: processes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.process.redis_pool import pooled_redis
from bot.redis_topology import RedisTopology
from tests.deployment import KEYS
from tests.process_level.test_drain import (
    test_w3_sigterm_mid_tool_hands_the_turn_over_at_its_next_cut,
    test_w4_a_turn_whose_cut_misses_the_grace_is_taken_over_from_its_journal,
)
from tests.process_level.test_turn_processes import (
    test_c4_a_killed_workers_turn_resumes_on_another_worker_on_the_same_card,
    test_feishu_mention_steer_then_answer_and_stop_from_the_card,
    test_slack_mention_steer_mid_batch_then_answer,
    test_slack_stop_button_mid_batch,
)
from tests.redis_cluster import RedisClusterNodes, start_cluster

pytestmark = pytest.mark.slow

__all__ = [
    "test_c4_a_killed_workers_turn_resumes_on_another_worker_on_the_same_card",
    "test_feishu_mention_steer_then_answer_and_stop_from_the_card",
    "test_slack_mention_steer_mid_batch_then_answer",
    "test_slack_stop_button_mid_batch",
    "test_w3_sigterm_mid_tool_hands_the_turn_over_at_its_next_cut",
    "test_w4_a_turn_whose_cut_misses_the_grace_is_taken_over_from_its_journal",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    try:
        nodes = start_cluster(tmp_path_factory.mktemp("cluster"))
    except RuntimeError as exc:
        pytest.fail(str(exc))
    yield nodes
    nodes.stop()


@pytest.fixture(scope="module")
def redis_server(cluster: RedisClusterNodes) -> str:
    """A node that does not serve the deployment's slot: every client is redirected once."""
    owner = cluster.owner_of(KEYS.turns_stream)
    port = next(port for port in cluster.ports if port != owner)
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture
async def redis_client(
    cluster: RedisClusterNodes, redis_server: str
) -> AsyncIterator[aioredis.Redis]:
    cluster.flush()
    client = pooled_redis(redis_server, topology=RedisTopology(cluster=True))
    yield client
    await client.aclose()


@pytest.fixture
def deploy_env(deploy_env: dict[str, str]) -> dict[str, str]:
    return {**deploy_env, "CHATOPS_REDIS_CLUSTER": "true"}


def test_the_deployment_slot_is_served_by_another_node_than_the_url(
    cluster: RedisClusterNodes, redis_server: str
) -> None:
    """The check that makes the tests above meaningful: their URL is not the owner's."""
    assert len(cluster.ports) == 3
    assert not redis_server.endswith(f":{cluster.owner_of(KEYS.turns_stream)}/0")


async def test_the_operator_commands_reach_the_cluster(deploy_env, redis_client) -> None:
    """`chatops killswitch` and `chatops status` use the cluster client too (and are redirected)."""
    exe = Path(sys.executable).with_name("chatops")
    env = {**os.environ, **deploy_env}

    def chatops(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(exe), *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )

    switched = await asyncio.to_thread(chatops, "killswitch", "on", "--by", "ops")
    assert switched.returncode == 0, switched.stderr
    assert "kill switch on" in switched.stdout
    assert await redis_client.exists(KEYS.killswitch)
    status = await asyncio.to_thread(chatops, "killswitch", "status")
    assert status.returncode == 0 and "by ops" in status.stdout, status.stderr
    released = await asyncio.to_thread(chatops, "killswitch", "off")
    assert released.stdout.strip() == "kill switch off", released.stderr
    unknown = await asyncio.to_thread(chatops, "status", "slack-00000000000000000000")
    assert unknown.returncode == 1 and "no session" in unknown.stderr
