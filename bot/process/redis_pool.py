"""A process's Redis client over a bounded pool that waits for a free connection.

redis-py's default pool holds at most 2**31 connections in name and raises "Too many
connections" the moment a configured `max_connections` is reached; the ingress and the worker
would then fail a request or a turn for want of a socket while every connection is busy for a
few milliseconds. `WaitingConnectionPool` waits instead, for `wait_s` at most, and raises
`ConnectionError("No connection available.")` (a `RedisError`, so every caller's handling of an
unreachable Redis applies) when none came free. Sizing (docs/reliability.md Q16): the signal
path holds one connection per process whatever the number of live turns (`agent_core.BellHub`),
each blocking stream read one more, and everything else is a short command, so 64 connections
carry a thousand live analyses.

The deployment's Redis is one of three topologies (`RedisTopology`, from the settings):

- A single Redis, or a managed endpoint that fails over behind one address: the pool above.
- A Redis Cluster (`CHATOPS_REDIS_CLUSTER`): redis-py's `RedisCluster`, given any node's URL:
  it learns the slot map from that node and follows MOVED and ASK. Every key of a deployment is
  in one slot (`bot.keys`), so its commands, scripts and transactions all go to the one master
  that serves it. That client keeps a pool per node and, unlike `BlockingConnectionPool`, raises
  `MaxConnectionsError` (a `ConnectionError`, so again handled as Redis being unavailable)
  instead of waiting when `max_connections` are busy on a node: redis-py has no pool to give
  a cluster, and the limit is what bounds the process's connections.
- A primary watched by Sentinels (`CHATOPS_REDIS_SENTINELS`): redis-py's `Sentinel` names the
  primary, and every new connection asks the Sentinels where it is now, so after a failover the
  pool's connections to the old primary fail once and the next ones reach the promoted replica.
  The pool is the same waiting, bounded one (`SentinelWaitingConnectionPool`: redis-py has the
  two behaviours in separate classes). `REDIS_URL` still gives the database, the user and the
  password; its host and port are not used. What a failover can lose: docs/reliability.md Q20.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection, UnixDomainSocketConnection, parse_url
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, MaxConnectionsError

from bot.redis_topology import SINGLE, RedisTopology

__all__ = [
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_WAIT_S",
    "REPLICA_WAIT_MS",
    "SentinelWaitingConnectionPool",
    "WaitingConnectionPool",
    "pooled_redis",
    "replicated_call",
]

DEFAULT_MAX_CONNECTIONS = 64
"""`CHATOPS_REDIS_MAX_CONNECTIONS`'s default: connections one process opens at most."""
REPLICA_WAIT_MS = 200
"""How long a write waits for its replicas in `replicated_call`: well inside the platforms' 3 s
acknowledgment budget (docs/reliability.md Q20)."""
SENTINEL_TIMEOUT_S = 5.0
"""How long asking a Sentinel where the primary is may take (each Sentinel, in turn)."""
DEFAULT_WAIT_S = 10.0
"""`CHATOPS_REDIS_POOL_TIMEOUT_S`'s default: how long a command waits for a free connection."""


class WaitingConnectionPool(aioredis.ConnectionPool):
    """`ConnectionPool` that, with all `max_connections` in use, waits `timeout` s for one to free.

    Why not redis-py's `BlockingConnectionPool`, which behaves so: every checkout of it takes a
    `Condition`, a timer and a lock and every release the `Condition` again, even when connections
    are free, a cost on every webhook's Redis call (it is part of what moved `bench/ingress.py`'s
    ratios in the commit that made this pool). Here a checkout is `ConnectionPool`'s own; only a
    caller that finds the pool full waits, woken by a release.
    The wait is first come, first woken, but not a queue: a caller arriving as a connection frees
    may take it before the woken one, who then waits again within the same deadline.
    """

    def __init__(self, *, timeout: float | None = DEFAULT_WAIT_S, **kwargs: Any) -> None:
        """`timeout`: seconds a checkout waits for a free connection (None: for ever)."""
        super().__init__(**kwargs)
        self.timeout = timeout
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def get_connection(
        self, command_name: object = None, *keys: object, **options: object
    ) -> Any:
        """A connected connection; waits while all are in use (`ConnectionError` past the wait).

        The arguments are redis-py's deprecated ones, accepted and not used.
        """
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        woken = False  # a release's wake-up this checkout holds and has not used yet
        try:
            while True:
                try:
                    return await super().get_connection()  # type: ignore[no-untyped-call, unused-ignore]
                except MaxConnectionsError:
                    woken = False  # full again: the wake-up went to a caller arriving first
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append(waiter)
                try:
                    async with asyncio.timeout_at(deadline):
                        await waiter
                except TimeoutError:
                    raise ConnectionError("No connection available.") from None
                finally:
                    if not waiter.done():
                        self._waiters.remove(waiter)
                    elif not waiter.cancelled():
                        woken = True
        except BaseException:
            if woken:
                self._wake_one()  # woken, and leaving without it: the wake-up is the next one's
            raise

    async def release(self, connection: Any) -> None:
        """Give a connection back, and wake the longest waiting checkout."""
        try:
            await super().release(connection)
        finally:
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


class SentinelWaitingConnectionPool(SentinelConnectionPool, WaitingConnectionPool):
    """Sentinel's pool (connections to wherever the primary is) that waits for a free connection.

    The method order puts Sentinel's address lookup first and `WaitingConnectionPool`'s bounded
    wait under it; both keep `ConnectionPool`'s interface.
    """


def pooled_redis(
    url: str,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    wait_s: float = DEFAULT_WAIT_S,
    topology: RedisTopology = SINGLE,
    **options: Any,
) -> aioredis.Redis:
    """A client of `url` over a pool of at most `max_connections` that waits `wait_s` for one.

    `options` are the connections' (timeouts, keepalive); what the URL's query string sets
    wins, as with `Redis.from_url`. The client owns its pool: `aclose()` disconnects it.
    `topology`: a cluster's or the Sentinels' client instead (see above).
    """
    if topology.sentinels:
        return _sentinel_redis(url, topology, max_connections, wait_s, options)
    if topology.cluster:
        client = RedisCluster.from_url(url, max_connections=max_connections, **options)
        # The cluster client answers the commands, pipelines, scripts and Pub/Sub this code
        # uses as `Redis` does (the cluster process tests drive them all); it is no subclass.
        return cast(aioredis.Redis, client)
    pool = WaitingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=wait_s, **options
    )
    return aioredis.Redis.from_pool(pool)


class _SentinelRedis(aioredis.Redis):
    """The primary's client; closing it closes the connections to the Sentinels too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        pool = self.connection_pool
        await super().aclose(close_connection_pool)
        if isinstance(pool, SentinelConnectionPool):
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()


def _sentinel_redis(
    url: str, topology: RedisTopology, max_connections: int, wait_s: float, options: dict[str, Any]
) -> aioredis.Redis:
    parsed: dict[str, Any] = dict(parse_url(url))
    connection_class = parsed.pop("connection_class", None)
    if connection_class is not None and issubclass(connection_class, UnixDomainSocketConnection):
        raise ValueError("REDIS_URL: a unix socket has no primary for Sentinels to name")
    if connection_class is not None and issubclass(connection_class, SSLConnection):
        parsed["ssl"] = True  # the Sentinel pool then makes its own TLS connections
    from_url = {k: v for k, v in parsed.items() if k not in ("host", "port", "path")}
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(topology.sentinels),
        sentinel_kwargs={
            "socket_connect_timeout": SENTINEL_TIMEOUT_S,
            "socket_timeout": SENTINEL_TIMEOUT_S,
        },
    )
    client: aioredis.Redis = sentinel.master_for(
        topology.sentinel_primary,
        redis_class=_SentinelRedis,
        connection_pool_class=SentinelWaitingConnectionPool,
        max_connections=max_connections,
        timeout=wait_s,
        **{**options, **from_url},
    )
    return client


async def replicated_call(
    redis: aioredis.Redis,
    script: AsyncScript,
    keys: list[str],
    args: list[str | int],
    replicas: int,
) -> tuple[Any, int]:
    """Run `script`, then `WAIT replicas REPLICA_WAIT_MS` on its connection.

    `WAIT` waits for the writes of the connection it is sent on, so both go in one pipeline
    (which holds one connection, and loads the script first). Returns the script's reply and
    how many replicas acknowledged it in time (at most `REPLICA_WAIT_MS` later).
    """
    async with redis.pipeline(transaction=False) as pipe:
        await script(keys=keys, args=args, client=pipe)
        pipe.wait(replicas, REPLICA_WAIT_MS)
        reply, acknowledged = await pipe.execute()
    return reply, int(acknowledged)
