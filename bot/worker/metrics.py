"""A worker's Prometheus metrics, on a registry of its own (tests run many workers in one process).

Each metric is fed by the one place that knows it, once:

- settles (reason, tokens) by the settle writer, for the settles it wrote (never a duplicate);
- probes per turn, steer-to-cut, stop-to-quiet, tool calls and their durations, from the
  `RunDiagnostics` of each run the settle writer settles: the runtime only records (trace
  timestamps, `ToolRun`s), the worker observes;
- queue lag when the worker claims a job, card calls in `bot.publishing.metered_platform`;
- the event loop's lag by the `bot.process.loop_lag` monitor that `Worker.run` owns;
- the queue's entries and the kill switch are read from Redis at scrape time (`refresh`).

The latencies are differences of `time.monotonic()` stamps taken in the worker's process.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from redis.exceptions import RedisError, ResponseError

from agent_core import RunDiagnostics, RunOutcome, SettleRecord, Signal, StoreError
from bot.control.killswitch import KillSwitch
from bot.keys import BotKeys
from bot.process.loop_lag import lag_histogram
from bot.state.turn_jobs import TurnJob

__all__ = ["UNKNOWN_TOOL", "WorkerMetrics", "steer_to_cut", "stop_to_quiet"]

log = logging.getLogger(__name__)

UNKNOWN_TOOL = "unknown"
"""The tool label of a call to a tool the turn did not offer: model-made names stay unbounded."""
SCRAPE_READ_TIMEOUT_S = 1.0
"""A scrape waits this long for Redis; the gauges keep their last values otherwise."""

_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
"""Steer-to-cut is bounded by the longest must-complete tool of a batch (tool timeouts are
tens of seconds); stop-to-quiet by the slowest in-flight call's reaction to its cancel."""
_TOOL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_PROBE_BUCKETS = (0, 1, 2, 3, 5, 8, 13, 21, 34)


def steer_to_cut(diag: RunDiagnostics) -> float | None:
    """Seconds from the first steer the run heard to its steer cut; None if it had no such pair.

    A steer found by a probe without its ring being heard first (queued just as the turn
    began) has no arrival stamp in this run, and is not measured.
    """
    heard: float | None = None
    for entry in diag.trace:
        if entry.kind == "steer_received" and heard is None:
            heard = entry.at
        elif entry.kind == "cut" and entry.detail == Signal.STEER.value and heard is not None:
            return entry.at - heard
    return None


def stop_to_quiet(diag: RunDiagnostics) -> float | None:
    """Seconds from the accepted stop until nothing ran any more; None if no stop was accepted.

    Quiet is the last call answered (or model stream aborted) after the stop; with nothing in
    flight, the end of the run.
    """
    stopped: float | None = None
    quiet: float | None = None
    for entry in diag.trace:
        if entry.kind == "stop_accepted" and stopped is None:
            stopped = entry.at
        elif stopped is not None and entry.kind in ("tool_end", "model_aborted"):
            quiet = entry.at
        elif stopped is not None and entry.kind == "end" and quiet is None:
            quiet = entry.at
    return None if stopped is None or quiet is None else quiet - stopped


class WorkerMetrics:
    """What one worker process did, and what its queue holds (see the module docstring)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.turns = Counter(
            "chatops_turns",
            "Turns settled by this worker, by settle reason",
            ["reason"],
            registry=r,
        )
        self.tokens = Counter(
            "chatops_turn_tokens",
            "Model tokens of the settled turns, by kind (prompt, completion)",
            ["kind"],
            registry=r,
        )
        self.probes = Histogram(
            "chatops_turn_probes",
            "Signal probes per turn (one at the start, one per closed batch)",
            buckets=_PROBE_BUCKETS,
            registry=r,
        )
        self.steer_to_cut = Histogram(
            "chatops_steer_to_cut_seconds",
            "From a steer heard by a running turn to the cut that suspended it",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.stop_to_quiet = Histogram(
            "chatops_stop_to_quiet_seconds",
            "From an accepted stop to the last in-flight call answered",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tool_calls = Counter(
            "chatops_tool_calls",
            "Tool calls answered, by tool and outcome (ok, error, interrupted)",
            ["tool", "outcome"],
            registry=r,
        )
        self.tool_duration = Histogram(
            "chatops_tool_duration_seconds",
            "Time a tool's handler ran (retries included), by tool",
            ["tool"],
            buckets=_TOOL_BUCKETS,
            registry=r,
        )
        self.queue_lag = Histogram(
            "chatops_queue_lag_seconds",
            "From a job's enqueueing to its claim by this worker (new entries, not take-overs)",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.queue_waiting = Gauge(
            "chatops_queue_waiting",
            "Turn entries no worker has claimed yet (read at scrape time)",
            registry=r,
        )
        self.queue_pending = Gauge(
            "chatops_queue_pending",
            "Turn entries claimed by a worker and not acknowledged yet (read at scrape time)",
            registry=r,
        )
        self.card_calls = Counter(
            "chatops_card_calls",
            "Platform calls for cards (post, update, status) by outcome; 429s are "
            'outcome="rate_limited"',
            ["platform", "call", "outcome"],
            registry=r,
        )
        self.killswitch = Gauge(
            "chatops_killswitch_on",
            "1 while the kill switch is on (read at scrape time)",
            registry=r,
        )
        self.event_loop_lag = lag_histogram(r)
        """Fed by the `bot.process.loop_lag` monitor `Worker.run` owns."""

    def settled(self, record: SettleRecord) -> None:
        """Count a settle this worker wrote."""
        self.turns.labels(record.reason.value).inc()
        self.tokens.labels("prompt").inc(record.prompt_tokens)
        self.tokens.labels("completion").inc(record.completion_tokens)

    def ran(self, outcome: RunOutcome) -> None:
        """Observe a settled run's diagnostics (not for turns that never ran: no trace)."""
        diag = outcome.diagnostics
        if not diag.trace:
            return
        self.probes.observe(len(diag.probes))
        if (steer := steer_to_cut(diag)) is not None:
            self.steer_to_cut.observe(steer)
        if (stop := stop_to_quiet(diag)) is not None:
            self.stop_to_quiet.observe(stop)
        for call in diag.tools:
            tool = call.tool or UNKNOWN_TOOL
            self.tool_calls.labels(tool, call.status.value).inc()
            if call.started_at is not None:
                self.tool_duration.labels(tool).observe(call.ended_at - call.started_at)

    def claimed(self, job: TurnJob) -> None:
        """A job was read from the stream: observe how long it waited there."""
        lag = (datetime.now(UTC) - job.enqueued_at).total_seconds()
        self.queue_lag.observe(max(0.0, lag))

    def card_call(self, platform: str, call: str, outcome: str) -> None:
        """Count one platform call for a card."""
        self.card_calls.labels(platform, call, outcome).inc()

    async def refresh(self, redis: aioredis.Redis, keys: BotKeys) -> None:
        """Read the scrape-time gauges from Redis (skipped, with a log, if Redis is slow)."""
        try:
            async with asyncio.timeout(SCRAPE_READ_TIMEOUT_S):
                switch = await KillSwitch(redis, keys).state()
                waiting, pending = await _queue_entries(redis, keys)
        except (StoreError, RedisError, TimeoutError) as exc:
            log.info("worker gauges not read: %s", exc)
            return
        self.killswitch.set(1 if switch.on else 0)
        self.queue_waiting.set(waiting)
        self.queue_pending.set(pending)

    def render(self) -> bytes:
        """The exposition body (content type `prometheus_client.CONTENT_TYPE_LATEST`)."""
        return generate_latest(self.registry)

    async def scrape(self, redis: aioredis.Redis, keys: BotKeys) -> bytes:
        """Refresh the scrape-time gauges, then render."""
        await self.refresh(redis, keys)
        return self.render()


async def _queue_entries(redis: aioredis.Redis, keys: BotKeys) -> tuple[int, int]:
    """(waiting, pending) entries of the turns stream.

    An acknowledged entry is deleted (`bot.worker.turn_stream`), so what the stream holds is waiting
    or pending; XPENDING's summary counts the pending ones. No group yet: nothing is pending.
    """
    length = int(await redis.xlen(keys.turns_stream))
    try:
        summary: Any = await redis.xpending(keys.turns_stream, keys.turns_group)
    except ResponseError:  # NOGROUP: no worker ever ran against this Redis
        return length, 0
    pending = int(summary["pending"]) if summary else 0
    return max(0, length - pending), pending
