"""`CHATOPS_REDIS_CLUSTER`, `CHATOPS_REDIS_SENTINELS` and `CHATOPS_REDIS_WAIT_REPLICAS`.

The settings become a `RedisTopology` and the number of replicas the ingress waits for; what
start-up refuses is refused with the variable's name. The clients themselves are driven against
real servers in tests/process_level/test_cluster.py and test_sentinel.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from redis.asyncio.sentinel import SentinelManagedConnection, SentinelManagedSSLConnection

from bot.process.redis_pool import pooled_redis
from bot.redis_topology import RedisTopology
from bot.settings import Settings


def settings(**env: str) -> Settings:
    found: Any = Settings  # the variables are aliases, which the signature does not list
    built: Settings = found(_env_file=None, **env)
    return built


def test_the_default_is_one_address_and_no_wait() -> None:
    found = settings()
    assert found.redis_topology == RedisTopology()
    assert found.redis_wait_replicas == 0


def test_a_cluster_is_named_by_its_flag() -> None:
    found = settings(CHATOPS_REDIS_CLUSTER="true")
    assert found.redis_topology == RedisTopology(cluster=True)
    assert found.redis_wait_replicas == 0


def test_sentinels_are_parsed_and_the_ingress_then_waits_for_one_replica() -> None:
    found = settings(
        CHATOPS_REDIS_SENTINELS=" 10.0.0.1:26379, sentinel-b:26380 ,",
        CHATOPS_REDIS_SENTINEL_PRIMARY="payments",
    )
    assert found.redis_topology == RedisTopology(
        sentinels=(("10.0.0.1", 26379), ("sentinel-b", 26380)), sentinel_primary="payments"
    )
    assert found.redis_wait_replicas == 1


def test_the_replicas_waited_for_can_be_set_either_way() -> None:
    assert (
        settings(
            CHATOPS_REDIS_SENTINELS="s:26379", CHATOPS_REDIS_WAIT_REPLICAS="0"
        ).redis_wait_replicas
        == 0
    )
    assert settings(CHATOPS_REDIS_WAIT_REPLICAS="2").redis_wait_replicas == 2


@pytest.mark.parametrize("value", ["sentinel", "sentinel:", ":26379", "s:0", "s:70000", "s:port"])
def test_a_sentinel_address_that_is_not_host_port_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match="CHATOPS_REDIS_SENTINELS"):
        settings(CHATOPS_REDIS_SENTINELS=value)


def test_a_cluster_and_sentinels_together_are_refused() -> None:
    with pytest.raises(ValidationError, match="not both"):
        settings(CHATOPS_REDIS_CLUSTER="true", CHATOPS_REDIS_SENTINELS="s:26379")


def test_waiting_for_replicas_on_a_cluster_is_refused() -> None:
    with pytest.raises(ValidationError, match="not supported with a Redis Cluster"):
        settings(CHATOPS_REDIS_CLUSTER="true", CHATOPS_REDIS_WAIT_REPLICAS="1")


SENTINELS = RedisTopology(sentinels=(("127.0.0.1", 26379),))


async def test_a_tls_url_gives_tls_connections_to_the_primary_the_sentinels_name() -> None:
    """`rediss://` keeps its TLS, on the connections Sentinel's pool makes (not the URL's class)."""
    client = pooled_redis("rediss://user:secret@ignored:6380/2", topology=SENTINELS)
    try:
        pool = client.connection_pool
        assert pool.connection_class is SentinelManagedSSLConnection
        assert pool.connection_kwargs["db"] == 2
        assert pool.connection_kwargs["username"] == "user"
        assert "host" not in pool.connection_kwargs
    finally:
        await client.aclose()


async def test_a_plain_url_gives_plain_connections_through_the_sentinels() -> None:
    client = pooled_redis("redis://ignored:6379/0", topology=SENTINELS)
    try:
        assert client.connection_pool.connection_class is SentinelManagedConnection
    finally:
        await client.aclose()


def test_a_unix_socket_with_sentinels_is_refused() -> None:
    with pytest.raises(ValueError, match="unix socket"):
        pooled_redis("unix:///run/redis.sock", topology=SENTINELS)
