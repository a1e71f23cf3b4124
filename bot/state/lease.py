"""The session lease: one live turn per session, held by one worker, fenced by a token.

A worker takes a session's lease before it runs a turn of it and keeps it alive with heartbeats;
the lease expires `ttl` after the last one, so a worker that died (SIGKILL, a lost node) frees the
session on its own. Every lease taken gets a larger fencing token from a per-session counter, and
every durable write a worker makes for the session (settle, card state) carries its token and is
refused once the lease has moved on: Redis's own `XACK` checks no owner (docs/design.md §Platform
facts), so the fence is ours.

The lease key doubles as the ingress's "a turn is live" marker (`BotKeys.live_turn`), and every
lease is indexed by expiry in one sorted set, so the reaper finds expired ones without scanning.
The scripts are `bot/state/lua/lease_*.lua`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis.asyncio as aioredis

from agent_core import (
    WATCH_BLOCK_S,
    BellHub,
    StoreError,
    checkpoint,
    map_redis_errors,
    register_lua,
)
from bot.errors import LeaseLost
from bot.keys import BotKeys
from bot.process.redis_pool import replicated_call

__all__ = ["Lease", "LeaseLost", "Leases"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Lease:
    """A held lease."""

    session_id: str
    token: int
    """The fencing token: larger than every earlier holder's."""
    worker: str


class Leases:
    """Takes, renews and releases session leases."""

    def __init__(
        self, redis: aioredis.Redis, keys: BotKeys, *, ttl_s: float, replicas: int = 0
    ) -> None:
        """`replicas`: how many replicas must hold a lease taken before the turn goes on.

        A lease whose taking a failover lost would let the next holder get the same fencing
        token as the worker still running on it; waiting once per lease (`WAIT`, through
        `bot.process.redis_pool.replicated_call`) closes that window while the replica keeps up
        (docs/reliability.md Q20).
        """
        self._redis = redis
        self._keys = keys
        self.ttl_s = ttl_s
        self._replicas = replicas
        self._acquire = register_lua(redis, "bot.state", "lease_acquire")
        self._renew = register_lua(redis, "bot.state", "lease_renew")
        self._release = register_lua(redis, "bot.state", "lease_release")
        self._forget = register_lua(redis, "bot.state", "lease_forget")

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.ttl_s * 1000))

    async def try_acquire(self, session_id: str, worker: str, turn_id: str) -> Lease | None:
        """Take the session's lease if nobody holds it."""
        k = self._keys
        keys = [k.live_turn(session_id), k.fence(session_id), k.leases, k.lease_starts]
        args: list[str | int] = [worker, turn_id, self._ttl_ms, session_id]
        with map_redis_errors("acquire lease"):
            if not self._replicas:
                taken, value = await self._acquire(keys=keys, args=args)
                return Lease(session_id, int(value), worker) if taken else None
            (taken, value), acknowledged = await replicated_call(
                self._redis, self._acquire, keys, args, self._replicas
            )
        if taken and acknowledged < self._replicas:
            log.warning(
                "lease of %s taken before %d replica(s) acknowledged it (%d did)",
                session_id,
                self._replicas,
                acknowledged,
            )
        return Lease(session_id, int(value), worker) if taken else None

    async def acquire(self, session_id: str, worker: str, turn_id: str) -> Lease:
        """Take the session's lease, waiting (woken by its release) while another holds it.

        The wait hears the release ring through the process's `BellHub` (no connection held
        per waiter); an expiry (a dead holder) rings nothing, so it is retried every
        `WATCH_BLOCK_S` in any case.
        """
        freed = asyncio.Event()
        hub = BellHub.of(self._redis, self._keys.session.prefix)
        async with hub.listening(self._keys.lease_free(session_id), lambda _note: freed.set()):
            while True:
                checkpoint()
                freed.clear()
                lease = await self.try_acquire(session_id, worker, turn_id)
                if lease is not None:
                    return lease
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WATCH_BLOCK_S):
                        await freed.wait()

    async def renew(self, lease: Lease, turn_id: str = "") -> None:
        """Extend the lease (and name the chain's current turn); `LeaseLost` when not ours."""
        k = self._keys
        with map_redis_errors("renew lease"):
            ok = await self._renew(
                keys=[k.live_turn(lease.session_id), k.leases],
                args=[lease.token, self._ttl_ms, lease.session_id, turn_id],
            )
        if not ok:
            raise LeaseLost(f"lease (token {lease.token}) is gone", session_id=lease.session_id)

    async def release(self, lease: Lease) -> bool:
        """Give the lease up if it is still ours; idempotent. True when it was released."""
        k = self._keys
        with map_redis_errors("release lease"):
            released = await self._release(
                keys=[
                    k.live_turn(lease.session_id),
                    k.leases,
                    k.lease_free(lease.session_id),
                    k.lease_starts,
                ],
                args=[lease.token, lease.session_id],
            )
        return bool(released)

    async def heartbeat(self, lease: Lease, current_turn: Callable[[], str]) -> None:
        """Renew every third of the TTL until cancelled; raises `LeaseLost` when taken over.

        `current_turn` is asked at each beat, so a chain of turns keeps the lease naming the
        one that runs. A Redis error is not a loss: the lease is still ours until its TTL runs
        out, so beats are retried until then (a blip must not fail an analysis).
        """
        interval = self.ttl_s / 3
        renewed = time.monotonic()
        while True:
            checkpoint()  # redis-py on 3.11 can swallow a cancel (see `checkpoint`)
            await asyncio.sleep(max(0.0, renewed + interval - time.monotonic()))
            try:
                await self.renew(lease, current_turn())
                renewed = time.monotonic()
            except StoreError as exc:
                if time.monotonic() - renewed >= self.ttl_s:
                    raise LeaseLost(
                        f"lease not renewed: {exc}", session_id=lease.session_id
                    ) from exc
                log.warning("lease renewal failed (%s); retrying", exc)
                await asyncio.sleep(min(interval, 0.2))

    async def expired(self, now_ms: int, limit: int = 100) -> list[str]:
        """Sessions whose lease expired before `now_ms` (the reaper's work list)."""
        with map_redis_errors("read leases"):
            raw = await self._redis.zrangebyscore(self._keys.leases, 0, now_ms, 0, limit)
        return [item.decode() if isinstance(item, bytes) else str(item) for item in raw]

    async def forget(self, session_id: str) -> None:
        """Drop an expired lease from the index (once the reaper has dealt with it)."""
        k = self._keys
        with map_redis_errors("forget lease"):
            await self._forget(
                keys=[k.live_turn(session_id), k.leases, k.lease_starts], args=[session_id]
            )
