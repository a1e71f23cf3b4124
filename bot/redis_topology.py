"""`RedisTopology`: how the deployment's Redis is reached, as the settings describe it.

Its own module, below the settings that build it and the pool that uses it
(`bot.process.redis_pool`).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SINGLE", "RedisTopology"]


@dataclass(frozen=True, slots=True)
class RedisTopology:
    """How the deployment's Redis is reached: one address, a cluster, or Sentinels."""

    cluster: bool = False
    sentinels: tuple[tuple[str, int], ...] = ()
    """`(host, port)` of each Sentinel; empty: no Sentinel."""
    sentinel_primary: str = "mymaster"
    """The name the Sentinels monitor the primary under."""


SINGLE = RedisTopology()
"""One address: a single Redis, or an endpoint that fails over behind it."""
