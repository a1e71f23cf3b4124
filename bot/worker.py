"""The worker: reads turn jobs from the turns stream and runs each under its session's lease.

Several workers may run at once (one consumer group, one consumer name each). A job is taken
with `XREADGROUP`, its session's lease is acquired (a second job of a busy session waits for
the release), the actor runs the analysis, and the entry is acknowledged (and deleted) once it
settled. Every task is owned by the worker's task group. `stop()` drains: live turns are handed
over at their next cut. An idle worker takes over entries left pending by a dead one once their
lease has expired, and sets aside (dead-letters) an entry that keeps killing its workers.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import RedisError

from agent_core import HostAllowlist, Runtime, StoreError, Toolset, http_get_tool
from agent_core.interrupts import checkpoint, until_set
from agent_core.store import map_redis_errors
from bot.actor import Actor, ActorOptions
from bot.errors import BotConfigError
from bot.events import Platform
from bot.failpoints import Failpoints
from bot.keys import BotKeys
from bot.lease import Lease, Leases
from bot.model import build_chat_model
from bot.platform import ChatPlatform
from bot.queue import Queue, TurnJob
from bot.settings import Settings
from bot.settle import Pricing, SettleWriter

__all__ = [
    "Worker",
    "WorkerOptions",
    "open_clients",
    "open_worker",
    "platforms_from",
    "pricing_from",
    "require_durable_redis",
]

log = logging.getLogger(__name__)

RELEASE_TIMEOUT_S = 5.0
MAX_DELIVERIES = 5
"""A job delivered more often than this (each time its worker died) goes to the dead letters."""
INSTRUCTIONS = (
    "You are chatops, an SRE assistant in an incident thread. Investigate with your tools, "
    "say what you checked, and end with a short, concrete answer. When a person corrects you, "
    "follow the correction while the original task still stands."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """How much one worker takes on."""

    concurrency: int = 8
    """Analyses run at once."""
    block_s: float = 2.0
    """One blocking stream read; under redis-py's 5 s socket timeout."""


class Worker:
    """Consumes the turns stream."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        actor: Actor,
        leases: Leases,
        keys: BotKeys | None = None,
        name: str | None = None,
        options: WorkerOptions | None = None,
        failpoints: Failpoints | None = None,
    ) -> None:
        self._redis = redis
        self._failpoints = failpoints or Failpoints()
        self._actor = actor
        self._leases = leases
        self._keys = keys or BotKeys()
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._options = options or WorkerOptions()
        self._stopping = asyncio.Event()
        self._slots = asyncio.Semaphore(self._options.concurrency)
        self._reclaimed_at = float("-inf")
        self.finished = 0
        """Jobs acknowledged, for tests and metrics."""
        self._progress = asyncio.Condition()

    async def wait_finished(self, count: int) -> None:
        """Wait until `count` jobs in all have been run and acknowledged."""
        async with self._progress:
            await self._progress.wait_for(lambda: self.finished >= count)

    @property
    def stopping(self) -> bool:
        """`stop()` was called."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Drain: stop reading; every live turn suspends at its next cut and is handed over.

        Idle, the worker returns at once (its blocking read is abandoned). Calling it again is
        harmless: two signals are handled like one.
        """
        self._stopping.set()
        self._actor.drain()

    async def run(self) -> None:
        """Read and run jobs until `stop()`."""
        await Queue(self._redis, self._keys).ensure_group()
        async with asyncio.TaskGroup() as group:
            while not self._stopping.is_set():
                checkpoint()  # redis-py on 3.11 can swallow a cancel (see `checkpoint`)
                await self._slots.acquire()
                try:
                    read = await until_set(self._stopping, self._read())
                    entries = read if isinstance(read, list) else []  # INTERRUPTED: stopping
                except StoreError as exc:
                    log.warning("cannot read the turns stream (%s); retrying", exc)
                    entries = []
                    await asyncio.sleep(self._options.block_s)
                except BaseException:
                    self._slots.release()
                    raise
                reclaimed = False
                if not entries:
                    entries, reclaimed = await self._reclaim(), True
                if not entries:
                    self._slots.release()
                    continue
                entry_id, fields = entries[0]
                group.create_task(self._handle(entry_id, fields, reclaimed=reclaimed))

    async def _reclaim(self) -> list[tuple[str, dict[bytes, bytes]]]:
        """Take over an entry another worker left pending longer than a lease lasts.

        Only while idle, and at most once per lease TTL. The entry's session lease decides
        whether it is really abandoned (see `_handle`); an entry of a live analysis goes back
        untouched, to be looked at again one TTL later.
        """
        now = time.monotonic()
        if now - self._reclaimed_at < self._leases.ttl_s:
            return []
        self._reclaimed_at = now
        k = self._keys
        try:
            with map_redis_errors("reclaim turns"):
                reply: Any = await self._redis.xautoclaim(
                    k.turns_stream,
                    k.turns_group,
                    self.name,
                    min_idle_time=int(self._leases.ttl_s * 1000),
                    start_id="0-0",
                    count=1,
                )
        except StoreError as exc:
            log.warning("cannot reclaim turns (%s)", exc)
            return []
        return [(_text(entry_id), dict(fields)) for entry_id, fields in reply[1] if fields]

    async def _read(self) -> list[tuple[str, dict[bytes, bytes]]]:
        k = self._keys
        with map_redis_errors("read turns"):
            reply: Any = await self._redis.xreadgroup(
                k.turns_group,
                self.name,
                {k.turns_stream: ">"},
                count=1,
                block=int(self._options.block_s * 1000),
            )
        entries: list[tuple[str, dict[bytes, bytes]]] = []
        for _stream, items in reply or []:  # RESP2: [[stream, [(id, fields), ...]]]
            entries.extend((_text(entry_id), dict(fields)) for entry_id, fields in items)
        return entries

    async def _handle(
        self, entry_id: str, fields: dict[bytes, bytes], *, reclaimed: bool = False
    ) -> None:
        try:
            job = _job_of(entry_id, fields)
            if job is None:
                await self._ack(entry_id)  # a poison entry: retrying cannot help
                return
            if reclaimed:
                lease = await self._leases.try_acquire(job.session_id, self.name, job.turn_id)
                deliveries = await self._deliveries(entry_id) if lease is not None else 0
                if lease is None or not deliveries:
                    if lease is not None:
                        await self._release(lease)
                    return  # its worker is alive (or just finished): not ours to run
                if deliveries > MAX_DELIVERIES:
                    await self._dead_letter(entry_id, fields, job, lease, deliveries)
                    return
                log.warning("resuming turn %s, abandoned by its worker", job.turn_id)
                self._failpoints.hit("during_reclaim")
            else:
                lease = await self._leases.acquire(job.session_id, self.name, job.turn_id)
            try:
                await self._actor.run(job, lease)
            finally:
                await self._release(lease)
            await self._ack(entry_id)
            async with self._progress:
                self.finished += 1
                self._progress.notify_all()
        except Exception:
            log.exception("turn entry %s failed in the worker; left pending", entry_id)
        finally:
            self._slots.release()

    async def _deliveries(self, entry_id: str) -> int:
        """How many times the entry was delivered; 0 when it is no longer pending."""
        k = self._keys
        with map_redis_errors("read pending turns"):
            pending: Any = await self._redis.xpending_range(
                k.turns_stream, k.turns_group, min=entry_id, max=entry_id, count=1
            )
        return int(pending[0]["times_delivered"]) if pending else 0

    async def _dead_letter(
        self,
        entry_id: str,
        fields: dict[bytes, bytes],
        job: TurnJob,
        lease: Lease,
        deliveries: int,
    ) -> None:
        """Set aside a job that keeps killing its workers (RELIABILITY Q7), and say so."""
        reason = f"could not be run: its worker stopped {deliveries - 1} times while running it"
        log.error("turn %s dead-lettered after %d deliveries", job.turn_id, deliveries)
        try:
            k = self._keys
            with map_redis_errors("dead-letter"):
                entry: dict[Any, Any] = {**fields, b"entry": entry_id, b"deliveries": deliveries}
                await self._redis.xadd(
                    k.dead_letters,
                    entry,
                    maxlen=10_000,
                    approximate=True,
                )
            await self._actor.give_up(job, lease, reason)
            await self._ack(entry_id)
        finally:
            await self._release(lease)

    async def _release(self, lease: Lease) -> None:
        """Release the lease, shielded and bounded (an expiry frees it anyway)."""
        release = asyncio.get_running_loop().create_task(
            asyncio.wait_for(self._leases.release(lease), RELEASE_TIMEOUT_S)
        )
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:
            await asyncio.wait({release})
            raise
        except Exception as exc:
            log.warning("lease of %s not released (it will expire): %s", lease.session_id, exc)

    async def _ack(self, entry_id: str) -> None:
        """Acknowledge and delete the entry.

        Done entries are not kept, so the stream holds only work not yet done (RELIABILITY Q10).
        """
        k = self._keys
        with map_redis_errors("ack turn"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.xack(k.turns_stream, k.turns_group, entry_id)
                pipe.xdel(k.turns_stream, entry_id)
                await pipe.execute()


def _job_of(entry_id: str, fields: dict[bytes, bytes]) -> TurnJob | None:
    try:
        return TurnJob.model_validate_json(fields.get(b"job", b""))
    except ValidationError as exc:
        log.error("turn entry %s is not a job (%s): dropped", entry_id, exc)
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def require_durable_redis(redis: aioredis.Redis) -> None:
    """Refuse a Redis without AOF: a restart would lose every queued and pending turn.

    Raises:
        BotConfigError: `appendonly` is off (or cannot be read: a managed Redis that hides
            CONFIG must be checked by its operator, and says so by not setting production).
    """
    try:
        reply: Any = await redis.config_get("appendonly")
    except RedisError as exc:
        raise BotConfigError(f"cannot check that Redis persists (CONFIG GET): {exc}") from exc
    value = reply.get("appendonly") or reply.get(b"appendonly")
    if value not in ("yes", b"yes"):
        raise BotConfigError(
            "CHATOPS_PRODUCTION is set but Redis runs without AOF (appendonly no): a restart "
            "would lose queued turns; set appendonly yes and appendfsync everysec"
        )


def pricing_from(settings: Settings) -> Pricing:
    """The model prices the settle writer books costs with."""
    return Pricing(
        prompt_per_mtok=settings.price_prompt_per_mtok,
        completion_per_mtok=settings.price_completion_per_mtok,
    )


def platforms_from(settings: Settings) -> dict[Platform, ChatPlatform]:
    """The card clients of every configured platform.

    Raises:
        BotConfigError: No platform is configured.
    """
    platforms: dict[Platform, ChatPlatform] = {}
    if settings.slack_bot_token is not None:
        from bot.adapters.slack_cards import SlackCards

        platforms[Platform.SLACK] = SlackCards.from_settings(settings)
    if settings.feishu_app_id and settings.feishu_app_secret is not None:
        from bot.adapters.feishu_cards import FeishuCards

        platforms[Platform.FEISHU] = FeishuCards.from_settings(settings)
    if not platforms:
        raise BotConfigError("neither Slack (SLACK_BOT_TOKEN) nor Feishu (FEISHU_APP_*) is set")
    return platforms


async def open_clients(
    settings: Settings, redis: aioredis.Redis | None, stack: AsyncExitStack
) -> tuple[aioredis.Redis, dict[Platform, ChatPlatform]]:
    """The Redis client and the platforms' card clients, closed by `stack` when it opened them.

    A given Redis client is used as it is, and is the caller's to close.

    Raises:
        BotConfigError: The settings cannot work.
    """
    if redis is None and not settings.redis_url:
        raise BotConfigError("REDIS_URL is not set")
    platforms = platforms_from(settings)
    for platform in platforms.values():
        stack.push_async_callback(platform.aclose)
    if redis is None:
        assert settings.redis_url
        redis = aioredis.Redis.from_url(settings.redis_url)
        stack.push_async_callback(redis.aclose)
    return redis, platforms


@asynccontextmanager
async def open_worker(
    settings: Settings,
    *,
    redis: aioredis.Redis | None = None,
    actor_options: ActorOptions | None = None,
    options: WorkerOptions | None = None,
) -> AsyncIterator[Worker]:
    """Build a worker from the settings, with every client it needs; close them afterwards.

    Raises:
        BotConfigError: The settings cannot work.
    """
    async with AsyncExitStack() as stack:
        redis, platforms = await open_clients(settings, redis, stack)
        if settings.production:
            await require_durable_redis(redis)
        model, openai_client = build_chat_model(settings)
        stack.push_async_callback(openai_client.close)
        http = httpx.AsyncClient()
        stack.push_async_callback(http.aclose)
        keys = BotKeys()
        toolset = Toolset.of([http_get_tool(HostAllowlist.parse(settings.http_allowlist), http)])
        try:
            failpoints = Failpoints.parse(settings.failpoints)
        except ValueError as exc:
            raise BotConfigError(f"CHATOPS_FAILPOINTS: {exc}") from exc
        runtime = Runtime(
            model=model,
            redis=redis,
            toolset=toolset,
            instructions=INSTRUCTIONS,
            sink=failpoints.sink(),
        )
        leases = Leases(redis, keys, ttl_s=settings.lease_ttl_s)
        actor = Actor(
            runtime=runtime,
            redis=redis,
            keys=keys,
            leases=leases,
            settle=SettleWriter(redis, keys, pricing_from(settings)),
            platforms=platforms,
            options=actor_options,
            failpoints=failpoints,
        )
        yield Worker(
            redis=redis,
            actor=actor,
            leases=leases,
            keys=keys,
            options=options,
            failpoints=failpoints,
        )
