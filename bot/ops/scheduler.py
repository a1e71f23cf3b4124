"""`chatops scheduler`: periodic jobs (APScheduler), one active scheduler across replicas.

Any number of scheduler processes may run; each job run first takes or renews a leader lock in
Redis (`SET NX PX`, renewed only by its holder through a compare-and-set script), and a process
that is not the leader skips the run. A leader that dies loses the lock after its expiry and
another takes over at its next tick. The jobs are idempotent anyway (docs/reliability.md C10), so
the lock saves work rather than guarding correctness.

Jobs: the reaper's sweep (`bot.ops.reaper`), every `interval_s`; and the operators' scheduled jobs
(`bot.ops.scheduled_jobs`), which every scheduler fires without the lock: each run is claimed once
by its id, derived from the job and its fire time.

Metrics (`SchedulerMetrics`, on `GET /metrics` with `--metrics-port`) count what each sweep
reported, fed once per tick from its `SweepReport`: the releases of this process's sweeps only,
so a dashboard sums them over the replicas (only the leader sweeps); and the event loop's lag
(`bot.process.loop_lag`), watched while `run` runs.
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
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from agent_core import map_redis_errors, register_lua
from bot.errors import BotConfigError
from bot.keys import BotKeys
from bot.ops.reaper import Reaper, SweepReport
from bot.ops.scheduled_jobs import ScheduledJobs, scheduled_jobs_from
from bot.process.loop_lag import lag_histogram, monitor_loop_lag
from bot.process.metrics_server import serve_metrics
from bot.settings import Settings
from bot.state.lease import Leases
from bot.state.settle import SettleWriter
from bot.worker.assembly import pricing_from
from bot.worker.clients import open_clients

__all__ = ["LeaderLock", "Scheduler", "SchedulerMetrics", "open_scheduler"]

log = logging.getLogger(__name__)

TICK_TIMEOUT_S = 60.0
"""The longest one reaper tick may take (or three intervals, if longer)."""


class LeaderLock:
    """At most one holder at a time; held while renewed within its TTL."""

    def __init__(self, redis: aioredis.Redis, key: str, holder: str, ttl_s: float) -> None:
        self._redis = redis
        self._key = key
        self.holder = holder
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._lead = register_lua(redis, "bot.ops", "scheduler_lead")

    async def hold(self) -> bool:
        """Take or renew the lock; True when this process leads."""
        with map_redis_errors("leader lock"):
            return bool(await self._lead(keys=[self._key], args=[self.holder, self._ttl_ms]))


class SchedulerMetrics:
    """What this scheduler's sweeps did, and whether it leads (own registry, like the worker's)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.interrupted = Counter(
            "chatops_reaper_interrupted",
            "Cards of abandoned turns the reaper finalized as interrupted",
            registry=r,
        )
        self.delivered = Counter(
            "chatops_reaper_delivered",
            "Final card states the reaper delivered to the platform",
            registry=r,
        )
        self.expired = Counter(
            "chatops_reaper_approvals_expired",
            "Approval requests nobody decided in time, expired by the reaper",
            registry=r,
        )
        self.sweeps = Counter(
            "chatops_reaper_sweeps",
            "Reaper ticks by outcome (swept, not_leader, failed, timed_out)",
            ["outcome"],
            registry=r,
        )
        self.leader = Gauge(
            "chatops_scheduler_leader",
            "1 while this scheduler holds the leader lock (as of its last tick)",
            registry=r,
        )
        self.event_loop_lag = lag_histogram(r)
        """Fed by the `bot.process.loop_lag` monitor `Scheduler.run` owns."""

    def swept(self, report: SweepReport) -> None:
        """Count one sweep's releases."""
        self.sweeps.labels("swept").inc()
        self.interrupted.inc(report.interrupted)
        self.delivered.inc(report.delivered)
        self.expired.inc(report.expired)

    def render(self) -> bytes:
        """The exposition body (content type `prometheus_client.CONTENT_TYPE_LATEST`)."""
        return generate_latest(self.registry)


class Scheduler:
    """Runs the periodic jobs while it leads."""

    def __init__(
        self,
        *,
        reaper: Reaper,
        lock: LeaderLock,
        interval_s: float,
        scheduled: ScheduledJobs | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self._reaper = reaper
        self.metrics = metrics or SchedulerMetrics()
        self._leading = False
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
                leads = await self._lock.hold()
                self._led(leads)
                if not leads:
                    self.metrics.sweeps.labels("not_leader").inc()
                    return None
                report = await self._reaper.sweep()
        except TimeoutError:
            self.metrics.sweeps.labels("timed_out").inc()
            log.warning("reaper sweep took too long; next tick goes on with it")
            return None
        except Exception:
            self.metrics.sweeps.labels("failed").inc()
            log.exception("reaper sweep failed; next tick retries")
            return None
        self.metrics.swept(report)
        self.sweeps = [*self.sweeps[-9:], report]
        if report.interrupted or report.delivered:
            log.info("reaper: %d interrupted, %d delivered", report.interrupted, report.delivered)
        return report

    def _led(self, leads: bool) -> None:
        """Note whether this process leads (a change is logged: which replica sweeps)."""
        if leads != self._leading:
            change = "leads: it runs the reaper" if leads else "no longer leads"
            log.info("scheduler %s %s", self._lock.holder, change)
        self._leading = leads
        self.metrics.leader.set(1 if leads else 0)

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
            async with monitor_loop_lag(self.metrics.event_loop_lag):
                await self.tick()  # at start-up too: a restarted scheduler catches up at once
                await stop.wait()
        finally:
            scheduler.shutdown(wait=False)


@asynccontextmanager
async def open_scheduler(
    settings: Settings,
    *,
    interval_s: float,
    redis: aioredis.Redis | None = None,
    metrics_host: str = "0.0.0.0",
    metrics_port: int | None = None,
) -> AsyncIterator[Scheduler]:
    """Build the scheduler and its clients from the settings; close them afterwards.

    Args:
        settings: The configuration.
        interval_s: Seconds between two reaper sweeps.
        redis: A client to use instead of one from `REDIS_URL` (left open).
        metrics_host: Address of the scheduler's `GET /metrics`.
        metrics_port: Its port (default `CHATOPS_SCHEDULER_METRICS_PORT`); 0: not served.

    Raises:
        BotConfigError: The settings cannot work, or the metrics port cannot be bound.
    """
    async with AsyncExitStack() as stack:
        redis, platforms = await open_clients(settings, redis, stack)
        keys = BotKeys()
        leases = Leases(
            redis, keys, ttl_s=settings.lease_ttl_s, replicas=settings.redis_wait_replicas
        )
        reaper = Reaper(
            redis=redis,
            keys=keys,
            leases=leases,
            settle=SettleWriter(redis, keys, pricing_from(settings)),
            platforms=platforms,
        )
        holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        lock = LeaderLock(redis, f"{keys.root}:scheduler:leader", holder, ttl_s=interval_s * 3)
        scheduled = scheduled_jobs_from(
            settings, redis=redis, keys=keys, platforms=list(platforms), holder=holder
        )
        metrics = SchedulerMetrics()
        port = settings.scheduler_metrics_port if metrics_port is None else metrics_port
        if port:
            await _serve(stack, metrics, metrics_host, port)
        yield Scheduler(
            reaper=reaper, lock=lock, interval_s=interval_s, scheduled=scheduled, metrics=metrics
        )


async def _serve(stack: AsyncExitStack, metrics: SchedulerMetrics, host: str, port: int) -> None:
    """Serve `GET /metrics` until `stack` closes.

    Raises:
        BotConfigError: The address cannot be bound.
    """

    async def render() -> bytes:
        return metrics.render()

    try:
        await stack.enter_async_context(serve_metrics(render, host, port))
    except OSError as exc:
        raise BotConfigError(f"metrics on {host}:{port}: {exc}") from exc
