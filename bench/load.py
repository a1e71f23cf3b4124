"""Benchmark of one worker under load: N concurrent analyses, what fails, what it costs.

Run it with `.venv/bin/python bench/load.py` (`--help` for the options). It starts its own
`redis-server`, the fake OpenAI provider, the fake Slack Web API and a slow service on loopback,
then `chatops serve` and one `chatops worker --concurrency 1000`. At each level N (10, 100,
1,000 by default) N analyses start at once, each the same workload: a 20-chunk stream that ends
in one `http_get` the slow service holds `--hold-ms`, then a 20-chunk answer. One in ten is
stopped with its Stop button while its call is held.

Printed per level: analyses failed (settled other than completed or stopped), tool calls
answered "timed out" or "could not get a connection", the most Redis connections the worker held
(sampled from the server's CLIENT LIST while all N were live), stop-to-settled p99 (from the
Stop press's 200 until the analysis's settle record is read), the worker's CPU per analysis
(utime + stime from /proc; goal 10 ms), the level's wall time, and the worker's resident memory
with all N live (VmRSS, sampled once every call is held) against before the level, per live
analysis. The figures are ratios to
what this run measured itself: each level's wall time to the smallest level's, and to the hold
(the floor one analysis cannot beat). Exit status 1 when an analysis failed, a call timed out
or found no connection, or the worker held more than `CHATOPS_REDIS_MAX_CONNECTIONS`.

`--smoke` runs levels of 2 and 20 with a 1 s hold (seconds), to check that every figure can
still be produced (`make test` runs it). The figures end the output as `ratio <name> = <number>`
lines (`bench/_figures.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `tests` importable
    sys.path.insert(0, str(_ROOT))

import redis.asyncio as aioredis  # noqa: E402
from _figures import SMOKE_HELP, FigureError, print_ratios, ratio, run  # noqa: E402

from tests.deployment import Deployment, slack_env, slack_session  # noqa: E402
from tests.fakes import openai_provider as fp  # noqa: E402
from tests.fakes import signing as sg  # noqa: E402
from tests.fakes.service import SlowService  # noqa: E402
from tests.fakes.slack_api import FakeSlackAPI  # noqa: E402
from tests.loopback import spawn_redis, stop_process  # noqa: E402
from tests.slack_view import cards_in, stop_buttons  # noqa: E402

WORKER_NAME = "bench-load-worker"
CONCURRENCY = 1000
MAX_CONNECTIONS = 64
WORDS = " ".join(f"w{n}" for n in range(20))
"""Twenty words: the fake provider streams one chunk per word."""
SUBMITTERS = 32
"""Mentions posted to the ingress at once."""
CPU_GOAL_MS = 10.0
STOPPED_OK = {"stopped", "cancelled", "completed"}
"""A stopped analysis settles stopped (or cancelled, stopped before it was claimed; or completed,
when its answer came before the press)."""


@dataclass(frozen=True)
class Level:
    """What one level measured."""

    analyses: int
    failed: int
    outcomes: dict[str, int]
    timed_out: int
    no_connection: int
    connections: int
    stop_p99_s: float
    cpu_ms_per_analysis: float
    wall_s: float
    rss_idle: int
    """The worker's resident memory before the level started."""
    rss_live: int
    """... and with all its analyses live."""

    @property
    def kib_per_live_analysis(self) -> float:
        """What one live analysis adds to the worker's resident memory."""
        return max(0, self.rss_live - self.rss_idle) / 1024 / self.analyses


def responder(url: str) -> fp.Responder:
    """The workload: a stream ending in one held `http_get` of `url` (`{}`: an id), an answer."""
    ids = itertools.count()

    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        if any(m["role"] == "tool" for m in messages):
            return fp.TextReply(WORDS)
        return fp.ToolCallsReply(
            [fp.ToolCall("http_get", {"url": url.format(next(ids))})], text=WORDS
        )

    return reply


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    """The process's resident memory now (VmRSS of /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise FigureError(f"no VmRSS for pid {pid}")


async def worker_connections(redis: aioredis.Redis) -> int:
    clients: Any = await redis.client_list()
    return sum(1 for c in clients if c.get("name") == WORKER_NAME)


async def run_level(
    n: int,
    deployment: Deployment,
    fakes: tuple[FakeSlackAPI, fp.FakeProvider, SlowService],
    hold_s: float,
) -> Level:
    """N analyses at once; one in ten stopped while its call is held."""
    slack, llm, service = fakes
    pid = deployment.worker.proc.pid
    requests_before = len(llm.requests)
    threads = [sg.slack_ts() for _ in range(n)]
    stopped = set(threads[::10])
    gate = asyncio.Semaphore(SUBMITTERS)

    async def mention(thread: str) -> None:
        async with gate:
            await deployment.slack(sg.slack_app_mention(ts=thread))

    settled: dict[str, tuple[str, float]] = {}

    async def read_settles() -> None:
        while len(settled) < n:
            record = await deployment.next_settle(120)
            settled[record.session_id] = (record.reason, time.monotonic())

    hits_before = len(service.hits)
    rss_before = rss_bytes(pid)
    cpu_before, started = cpu_s(pid), time.monotonic()
    reader = asyncio.get_running_loop().create_task(read_settles())
    await asyncio.gather(*(mention(t) for t in threads))
    # Stops are pressed once every call is held (or the first ones may already be answered).
    await all_held(service, hits_before + n)
    rss_live = rss_bytes(pid)  # every analysis live, its call held
    pressed = await press_stops(deployment, slack, sorted(stopped), deadline_s=hold_s * 0.8 + 30)
    connections = await worker_connections(deployment.redis)
    try:
        await asyncio.wait_for(reader, 120 + hold_s)
    except TimeoutError:
        raise FigureError(
            f"N={n}: {len(settled)} of {n} analyses settled within the bench's wait"
        ) from None
    wall = time.monotonic() - started
    cpu = cpu_s(pid) - cpu_before
    connections = max(connections, await worker_connections(deployment.redis))
    sessions = {slack_session(t): t for t in threads}
    allowed = {
        session: STOPPED_OK if thread in stopped else {"completed"}
        for session, thread in sessions.items()
    }
    failed = sum(1 for session, (reason, _) in settled.items() if reason not in allowed[session])
    outcomes = Counter(reason for reason, _ in settled.values())
    stop_times = [
        settled[slack_session(t)][1] - at
        for t, at in pressed.items()
        if settled[slack_session(t)][0] != "completed"  # a stop that came after the answer
    ]
    results = [
        str(m["content"])
        for r in llm.requests[requests_before:]
        for m in r.messages
        if m["role"] == "tool"
    ]
    return Level(
        analyses=n,
        failed=failed,
        outcomes={str(reason): count for reason, count in outcomes.items()},
        timed_out=sum("timed out" in text for text in results),
        no_connection=sum("could not get a connection" in text for text in results),
        connections=connections,
        stop_p99_s=percentile(stop_times, 0.99),
        cpu_ms_per_analysis=1000 * cpu / n,
        wall_s=wall,
        rss_idle=rss_before,
        rss_live=rss_live,
    )


async def press_stops(
    deployment: Deployment, slack: FakeSlackAPI, threads: list[str], deadline_s: float
) -> dict[str, float]:
    """Press Stop on each thread's card once it shows one; when each press was answered."""
    pressed: dict[str, float] = {}
    async with asyncio.timeout(deadline_s):
        for thread in threads:
            await slack.wait_until(functools.partial(showing_stop, slack, thread), deadline_s)
            cards = cards_in(slack, thread)
            (button,) = stop_buttons(cards[0])
            await deployment.slack_press(
                sg.slack_block_actions(
                    action_id=button["action_id"],
                    value=button["value"],
                    message_ts=cards[0].response["ts"],
                    thread_ts=thread,
                )
            )
            pressed[thread] = time.monotonic()
    return pressed


async def all_held(service: SlowService, count: int) -> None:
    """Wait until `count` calls have reached the service (a minute at most)."""
    for _ in range(6):
        try:
            return await service.wait_for_hits(count)  # each wait gives up after 10 s
        except TimeoutError:
            continue
    raise FigureError(f"{len(service.hits)} of {count} calls reached the service within a minute")


def showing_stop(slack: FakeSlackAPI, thread: str) -> bool:
    cards = cards_in(slack, thread)
    return bool(cards) and bool(stop_buttons(cards[0]))


def percentile(values: list[float], q: float) -> float:
    if not values:
        raise FigureError("no stop was measured")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


async def measure(levels: list[int], hold_s: float, redis_url: str) -> list[Level]:
    """Every level, in order, on one ingress and one worker; each fake closed once started."""
    async with AsyncExitStack() as stack:
        llm, slack, service = fp.FakeProvider(), FakeSlackAPI(), SlowService()
        llm.start()
        stack.callback(llm.stop)
        slack.start()
        stack.callback(slack.stop)
        await service.start()
        stack.push_async_callback(service.close)
        llm.respond_with(responder(service.url(f"/slow/{round(hold_s * 1000)}/" + "a{}")))
        redis = aioredis.Redis.from_url(redis_url)
        stack.push_async_callback(redis.aclose)
        env = {
            **slack_env(redis_url, llm, slack, service),
            "CHATOPS_INTENT_CHECK": "off",
            "CHATOPS_REDIS_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        }
        deployment = Deployment(env, redis)
        stack.push_async_callback(deployment.close)
        worker_env = {"REDIS_URL": f"{redis_url}?client_name={WORKER_NAME}"}
        await deployment.start(
            workers=1,
            first_worker_env=worker_env,
            first_worker_args=("--concurrency", str(CONCURRENCY)),
        )
        return [await run_level(n, deployment, (slack, llm, service), hold_s) for n in levels]
    raise AssertionError("unreachable")


_MODES = """\
modes:
  (default)  levels 10, 100, 1000 with a 5 s held call (a few minutes)
  --smoke    levels 2 and 20 with a 1 s held call (seconds)

Figures: each level's wall time ÷ the smallest level's, and ÷ the held call (the floor); the
worker's CPU per analysis ÷ the 10 ms goal; its Redis connections ÷ the pool's bound. Exit
status 1 when an analysis failed, a call timed out or got no connection, or the worker held
more connections than its bound."""


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the bench; return the exit status."""
    parser = argparse.ArgumentParser(
        description=(
            "One worker, --concurrency 1000, N concurrent analyses: failures, tool timeouts, "
            "Redis connections, stop latency, CPU per analysis and wall time."
        ),
        epilog=_MODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--levels", default="10,100,1000", help="N per level, comma-separated")
    parser.add_argument("--hold-ms", type=int, default=5000, help="how long each call is held")
    parser.add_argument("--smoke", "--quick", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:
        args.levels, args.hold_ms = "2,20", 1000
    levels = sorted({max(1, int(n)) for n in args.levels.split(",")})
    return run(lambda: _bench(levels, args.hold_ms / 1000))


def _bench(levels: list[int], hold_s: float) -> int:
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = spawn_redis(workdir)
        try:
            results = asyncio.run(measure(levels, hold_s, f"redis://127.0.0.1:{port}/0"))
        finally:
            stop_process(proc)
    base = results[0]
    bad = []
    for level in results:
        print(
            f"N={level.analyses}: settled {level.outcomes}, failed {level.failed}, "
            f"timed out {level.timed_out}, no connection {level.no_connection}, "
            f"worker Redis connections {level.connections} "
            f"(bound {MAX_CONNECTIONS}), stop-to-settled p99 {level.stop_p99_s * 1000:.0f} ms, "
            f"worker CPU {level.cpu_ms_per_analysis:.1f} ms/analysis (goal {CPU_GOAL_MS:g}), "
            f"wall {level.wall_s:.2f} s (hold {hold_s:g} s), "
            f"worker memory {level.rss_live / 2**20:.0f} MiB with all live "
            f"({level.kib_per_live_analysis:.0f} KiB per live analysis)"
        )
        if level.failed or level.timed_out or level.no_connection:
            bad.append(f"N={level.analyses}: {level}")
        if level.connections > MAX_CONNECTIONS:
            bad.append(f"N={level.analyses}: {level.connections} connections")
    top = results[-1]
    figures = {
        f"wall_{top.analyses}_vs_{base.analyses}": ratio(top.wall_s, base.wall_s, name="wall"),
        f"wall_{top.analyses}_vs_hold": ratio(top.wall_s, hold_s, name="wall ÷ hold"),
        f"cpu_per_analysis_{top.analyses}_vs_goal": ratio(
            top.cpu_ms_per_analysis, CPU_GOAL_MS, name="cpu ÷ goal"
        ),
        f"redis_connections_{top.analyses}_vs_bound": ratio(
            top.connections, MAX_CONNECTIONS, name="connections ÷ bound"
        ),
        f"worker_memory_{top.analyses}_live_vs_idle": ratio(
            top.rss_live, top.rss_idle, name="memory live ÷ idle"
        ),
    }
    print_ratios(figures)
    if bad:
        raise FigureError("; ".join(bad))
    return 0


if __name__ == "__main__":
    sys.exit(main())
