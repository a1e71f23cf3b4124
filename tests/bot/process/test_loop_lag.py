"""Fault matrix X2 (the metric half): a blocked event loop shows in the lag histogram and the log.

Why this way: the lag is only worth exporting if a real stall reaches it, so the test blocks the
loop the in-process worker and ingress run on (a `time.sleep` inside a coroutine, the way a
backtracking regex or a synchronous scrub would) and reads the worker's `GET /metrics` over HTTP
and the ingress's `/metrics`, parsed as Prometheus parses them. It asserts counts: an
observation above the 1 s bucket and one warning line, never a measured duration. The block
(2 s) exceeds the warning threshold plus the monitor's interval, so the monitor's one late
wake-up lags by more than a second whatever the phase. The rate limit and the owner's cancel
are checked on the monitor alone, with its own registry.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from bot.process.loop_lag import LagOptions, lag_histogram, monitor_loop_lag
from tests.bot.worker.test_metrics import parse, scrape, value
from tests.inprocess_bot import Bot
from tests.loopback import free_port

LAG = "chatops_event_loop_lag_seconds"


def over_one_second(samples) -> float:
    """Observations above the 1 s bucket: `+Inf` minus `le=1.0`."""
    return value(samples, f"{LAG}_bucket", le="+Inf") - value(samples, f"{LAG}_bucket", le="1.0")


async def test_x2_a_blocked_loop_is_counted_in_the_worker_and_ingress_metrics(
    bot: Bot, caplog: pytest.LogCaptureFixture
) -> None:
    """X2: the worker's and the ingress's lag histograms and one warning show a 2 s stall."""
    caplog.set_level(logging.WARNING, logger="bot.process.loop_lag")
    port = free_port()
    await bot.start_worker(metrics_port=port)
    url = f"http://127.0.0.1:{port}/metrics"
    await asyncio.sleep(0.6)  # past one interval: the monitors have observed at least once
    before = await scrape(url)
    ingress_before = parse((await bot.http.get("/metrics")).text)
    assert value(before, f"{LAG}_count") >= 1

    time.sleep(2.0)  # noqa: ASYNC251 - the point: hold the loop as a synchronous scrub would
    await asyncio.sleep(0.01)  # timers fire in due order: the overdue monitors observe first

    after = await scrape(url)
    ingress_after = parse((await bot.http.get("/metrics")).text)
    assert over_one_second(after) - over_one_second(before) >= 1
    assert over_one_second(ingress_after) - over_one_second(ingress_before) >= 1
    warnings = [r for r in caplog.records if "event loop lag" in r.getMessage()]
    # Worker and ingress share this loop: each monitor warns once for the one stall.
    assert 1 <= len(warnings) <= 2
    assert all(r.levelno == logging.WARNING for r in warnings)


async def test_x2_warnings_are_rate_limited_and_count_what_they_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """X2: three stalls within the warning period: every one observed, one warning logged."""
    caplog.set_level(logging.WARNING, logger="bot.process.loop_lag")
    histogram = lag_histogram(CollectorRegistry())
    options = LagOptions(interval_s=0.05, warn_after_s=0.2, warn_every_s=3600)
    async with monitor_loop_lag(histogram, options):
        await asyncio.sleep(0.1)
        for _ in range(3):
            time.sleep(0.5)  # noqa: ASYNC251 - a stall, on purpose
            await asyncio.sleep(0.01)  # the overdue monitor observes before this wakes
    buckets = {
        s.labels["le"]: s.value
        for metric in histogram.collect()
        for s in metric.samples
        if s.name.endswith("_bucket")
    }
    assert buckets["+Inf"] - buckets["0.25"] == 3  # three observations above 0.25 s
    warnings = [r for r in caplog.records if "event loop lag" in r.getMessage()]
    assert len(warnings) == 1


async def test_x2_the_monitor_ends_with_its_owner() -> None:
    """X2: closing the context cancels and awaits the monitor; no task outlives it."""
    histogram = lag_histogram(CollectorRegistry())
    async with monitor_loop_lag(histogram, LagOptions(interval_s=0.01)):
        await asyncio.sleep(0.05)
        assert [t for t in asyncio.all_tasks() if t.get_name() == "loop-lag"]
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "loop-lag"]
