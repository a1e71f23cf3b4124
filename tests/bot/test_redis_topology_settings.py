"""`CHATOPS_REDIS_CLUSTER`, `CHATOPS_REDIS_SENTINELS` and `CHATOPS_REDIS_WAIT_REPLICAS`.

The settings become a `RedisTopology` and the number of replicas the ingress waits for; what
start-up refuses is refused with the variable's name. The clients themselves are driven against
real servers in tests/process_level/test_cluster.py and test_sentinel.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

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
