"""Event-loop lag: how late a process's loop runs what is due (fault matrix X2).

A monitor task sleeps a fixed interval and observes how much later than asked it woke, into the
`chatops_event_loop_lag_seconds` histogram; a lag past `warn_after_s` is logged as a warning, at
most once per `warn_every_s` (the next warning counts the ones left out). Anything that holds
the loop (a regex backtracking on a tool result, a synchronous scrub of a large page) shows up
here, and the lease heartbeat, the card publisher and every probe are late by the same amount.

The periodic sleep is the measurement itself, not polling for a condition. The monitor is owned:
`monitor_loop_lag` starts it and cancels and awaits it when its context closes, so it never
outlives the process's main task (the worker's run, the ingress's lifespan, the scheduler's run).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram

__all__ = ["LagOptions", "lag_histogram", "monitor_loop_lag", "watch_loop_lag"]

log = logging.getLogger(__name__)

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""A healthy loop lags by milliseconds; a lease of 30 s is lost past tens of seconds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LagOptions:
    """How the loop is watched."""

    interval_s: float = 0.5
    """Sleep between two observations."""
    warn_after_s: float = 1.0
    """A lag above this is logged as a warning."""
    warn_every_s: float = 60.0
    """At most one warning per this many seconds."""


def lag_histogram(registry: CollectorRegistry) -> Histogram:
    """The `chatops_event_loop_lag_seconds` histogram, on a process's own registry."""
    return Histogram(
        "chatops_event_loop_lag_seconds",
        "How much later than due this process's event loop woke a fixed-interval sleep; a "
        "lag of seconds means something blocks the loop",
        buckets=_BUCKETS,
        registry=registry,
    )


async def watch_loop_lag(
    histogram: Histogram,
    options: LagOptions | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Observe the loop's lag into `histogram` until cancelled."""
    options = options or LagOptions()
    loop = asyncio.get_running_loop()
    last_warning = float("-inf")
    left_out = 0
    while True:
        due = loop.time() + options.interval_s
        await asyncio.sleep(options.interval_s)
        lag = max(0.0, loop.time() - due)
        histogram.observe(lag)
        if lag <= options.warn_after_s:
            continue
        now = clock()
        if now - last_warning < options.warn_every_s:
            left_out += 1
            continue
        log.warning(
            "event loop lag %.2f s: something held the loop (%d more lags past %.1f s since "
            "the last warning)",
            lag,
            left_out,
            options.warn_after_s,
        )
        last_warning, left_out = now, 0


@asynccontextmanager
async def monitor_loop_lag(
    histogram: Histogram, options: LagOptions | None = None
) -> AsyncIterator[None]:
    """Watch the loop's lag while the context is open (cancel-and-drain on exit)."""
    task = asyncio.get_running_loop().create_task(
        watch_loop_lag(histogram, options), name="loop-lag"
    )
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])  # drained; our own cancellation, if any, still propagates
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("event loop lag monitor failed", exc_info=error)
