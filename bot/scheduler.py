"""`chatops scheduler`: periodic jobs (APScheduler), one active scheduler across replicas.

Any number of scheduler processes may run; each job run first takes or renews a leader lock in
Redis (`SET NX PX`, renewed only by its holder through a compare-and-set script), and a process
that is not the leader skips the run. A leader that dies loses the lock after its expiry and
another takes over at its next tick. The jobs are idempotent anyway (RELIABILITY C10), so the
lock saves work rather than guarding correctness.

Jobs: the reaper's sweep (`bot.reaper`), every `interval_s`; and the operators' scheduled jobs
(`bot.scheduled_jobs`), which every scheduler fires without the lock: each run is claimed once
by its id, derived from the job and its fire time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import redis.asyncio as aioredis
from apscheduler.schedulers.asyncio import AsyncIOScheduler  # type: ignore[import-untyped]

from agent_core.store import map_redis_errors
from bot.keys import BotKeys
from bot.lease import Leases
from bot.reaper import Reaper, SweepReport
from bot.scheduled_jobs import ScheduledJobs, scheduled_jobs_from
from bot.settings import Settings
from bot.settle import SettleWriter
from bot.wiring import open_clients, pricing_from

__all__ = ["LeaderLock", "Scheduler", "open_scheduler"]

log = logging.getLogger(__name__)

# KEYS: lock. ARGV: holder, ttl ms. 1 when the caller holds the lock afterwards.
_LEAD = """
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


TICK_TIMEOUT_S = 60.0
"""The longest one reaper tick may take (or three intervals, if longer)."""


class LeaderLock:
    """At most one holder at a time; held while renewed within its TTL."""

    def __init__(self, redis: aioredis.Redis, key: str, holder: str, ttl_s: float) -> None:
        self._redis = redis
        self._key = key
        self.holder = holder
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._lead = redis.register_script(_LEAD)

    async def hold(self) -> bool:
        """Take or renew the lock; True when this process leads."""
        with map_redis_errors("leader lock"):
            return bool(await self._lead(keys=[self._key], args=[self.holder, self._ttl_ms]))


class Scheduler:
    """Runs the periodic jobs while it leads."""

    def __init__(
        self,
        *,
        reaper: Reaper,
        lock: LeaderLock,
        interval_s: float,
        scheduled: ScheduledJobs | None = None,
    ) -> None:
        self._reaper = reaper
        self._lock = lock
        self.interval_s = interval_s
        self.scheduled = scheduled
        """The operators' cron jobs (`CHATOPS_SCHEDULED_JOBS`), if any."""
        self.sweeps: list[SweepReport] = []
        """Reports of the sweeps this process ran (the latest few)."""

    async def tick(self) -> SweepReport | None:
        """One run of the reaper job, if this process leads."""
        try:
            # Bounded: the client waits a stalled Redis out, and one hung tick would hold up
            # every later one (`max_instances=1`); each step of a sweep is idempotent.
            async with asyncio.timeout(max(TICK_TIMEOUT_S, 3 * self.interval_s)):
                if not await self._lock.hold():
                    return None
                report = await self._reaper.sweep()
        except TimeoutError:
            log.warning("reaper sweep took too long; next tick goes on with it")
            return None
        except Exception:
            log.exception("reaper sweep failed; next tick retries")
            return None
        self.sweeps = [*self.sweeps[-9:], report]
        if report.interrupted or report.delivered:
            log.info("reaper: %d interrupted, %d delivered", report.interrupted, report.delivered)
        return report

    async def run(self, stop: asyncio.Event) -> None:
        """Run the jobs until `stop` is set."""
        scheduler = AsyncIOScheduler()
        scheduler.add_job(
            self.tick,
            "interval",
            seconds=self.interval_s,
            max_instances=1,
            coalesce=True,
            id="reaper",
        )
        if self.scheduled is not None:
            self.scheduled.add_to(scheduler)
        scheduler.start()
        try:
            await self.tick()  # at start-up too: a restarted scheduler catches up at once
            await stop.wait()
        finally:
            scheduler.shutdown(wait=False)


@asynccontextmanager
async def open_scheduler(
    settings: Settings, *, interval_s: float, redis: aioredis.Redis | None = None
) -> AsyncIterator[Scheduler]:
    """Build the scheduler and its clients from the settings; close them afterwards.

    Raises:
        BotConfigError: The settings cannot work.
    """
    async with AsyncExitStack() as stack:
        redis, platforms = await open_clients(settings, redis, stack)
        keys = BotKeys()
        leases = Leases(redis, keys, ttl_s=settings.lease_ttl_s)
        reaper = Reaper(
            redis=redis,
            keys=keys,
            leases=leases,
            settle=SettleWriter(redis, keys, pricing_from(settings)),
            platforms=platforms,
        )
        holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        lock = LeaderLock(redis, f"{keys.prefix}:scheduler:leader", holder, ttl_s=interval_s * 3)
        scheduled = scheduled_jobs_from(
            settings, redis=redis, keys=keys, platforms=list(platforms), holder=holder
        )
        yield Scheduler(reaper=reaper, lock=lock, interval_s=interval_s, scheduled=scheduled)
