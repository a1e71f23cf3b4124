"""A process's Redis client over a bounded pool that waits for a free connection.

redis-py's default pool holds at most 2**31 connections in name and raises "Too many
connections" the moment a configured `max_connections` is reached; the ingress and the worker
would then fail a request or a turn for want of a socket while every connection is busy for a
few milliseconds. `BlockingConnectionPool` waits instead, for `wait_s` at most, and raises
`ConnectionError("No connection available.")` (a `RedisError`, so every caller's handling of an
unreachable Redis applies) when none came free. Sizing (docs/reliability.md Q16): the signal
path holds one connection per process whatever the number of live turns (`agent_core.BellHub`),
each blocking stream read one more, and everything else is a short command, so 64 connections
carry a thousand live analyses.

With `cluster` the client is redis-py's `RedisCluster`, given any node's URL: it learns the slot
map from that node and follows MOVED and ASK. Every key of a deployment is in one slot
(`bot.keys`), so its commands, scripts and transactions all go to the one master that serves it.
That client keeps a pool per node and, unlike `BlockingConnectionPool`, raises
`MaxConnectionsError` (a `ConnectionError`, so again handled as Redis being unavailable) instead
of waiting when `max_connections` are busy on a node: redis-py has no waiting pool for a
cluster, and the limit is what bounds the process's connections.
"""

from __future__ import annotations

from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

__all__ = ["DEFAULT_MAX_CONNECTIONS", "DEFAULT_WAIT_S", "pooled_redis"]

DEFAULT_MAX_CONNECTIONS = 64
"""`CHATOPS_REDIS_MAX_CONNECTIONS`'s default: connections one process opens at most."""
DEFAULT_WAIT_S = 10.0
"""`CHATOPS_REDIS_POOL_TIMEOUT_S`'s default: how long a command waits for a free connection."""


def pooled_redis(
    url: str,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    wait_s: float = DEFAULT_WAIT_S,
    cluster: bool = False,
    **options: Any,
) -> aioredis.Redis:
    """A client of `url` over a pool of at most `max_connections` that waits `wait_s` for one.

    `options` are the connections' (timeouts, keepalive); what the URL's query string sets
    wins, as with `Redis.from_url`. The client owns its pool: `aclose()` disconnects it.
    `cluster`: a Redis Cluster client instead, `max_connections` per node (see above).
    """
    if cluster:
        client = RedisCluster.from_url(url, max_connections=max_connections, **options)
        # The cluster client answers the commands, pipelines, scripts and Pub/Sub this code
        # uses as `Redis` does (the cluster process tests drive them all); it is no subclass.
        return cast(aioredis.Redis, client)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=wait_s, **options
    )
    return aioredis.Redis.from_pool(pool)
