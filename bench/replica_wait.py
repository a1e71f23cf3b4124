"""Benchmark of `WAIT` on the acknowledgment path: what waiting for a replica costs an event.

Run it with `.venv/bin/python bench/replica_wait.py` (`--help` for the options). It starts its
own primary `redis-server` and a replica of it (`--replicaof`) on loopback, then accepts events
as the ingress does, through `bot.intake.queue.Queue.submit` (the submit script: dedupe markers,
the turns stream entry, the session's state), each a new analysis in a thread of its own:

- without `WAIT`, as the ingress acknowledges today: the primary has the event, the replica
  gets it asynchronously a moment later;
- with `WAIT 1` after each submit, in the same pipeline, as the ingress of a deployment with
  Sentinels acknowledges (`Queue(replicas=1)`: a primary's crash right after the
  acknowledgment loses no event).

Each is run one event at a time (the latency a platform's request sees) and `--concurrency` at
a time (the ingress's throughput). Printed: events per second and mean latency of each, and
the ratios with `WAIT` to without. `WAIT` returning fewer replicas than asked is counted; the
bench fails if any did (the replica was not keeping up, so the figure would not be `WAIT`'s).

`--smoke` submits a few dozen events, in seconds, to check that every figure can still be
produced (`make test` runs it). The figures end the output as `ratio <name> = <number>` lines
(`bench/_figures.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `tests` importable
    sys.path.insert(0, str(_ROOT))

import redis.asyncio as aioredis  # noqa: E402
from _figures import SMOKE_HELP, print_ratios, ratio, require, run  # noqa: E402

from bot.events import ChatEvent, Platform  # noqa: E402
from bot.intake.queue import Queue, Route  # noqa: E402
from bot.keys import BotKeys  # noqa: E402
from bot.process.redis_pool import pooled_redis  # noqa: E402
from tests.loopback import spawn_redis, stop_process  # noqa: E402
from tests.redis_sentinel import wait_synced  # noqa: E402

KEYS = BotKeys()
START = (Route.START, Route.START, None, None)


def _event(n: int, run_id: str) -> ChatEvent:
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=f"Ev{run_id}{n}",
        workspace="T1",
        channel="C1",
        thread=f"1700000000.{run_id}{n:06d}",
        message_id=f"1700000000.{run_id}{n:06d}",
        author="U1",
        text="<@B1> is the checkout service slow?",
        mentioned=True,
    )


async def trial(url: str, events: list[ChatEvent], concurrency: int, wait: bool) -> float:
    """Seconds to submit `events`, `concurrency` at a time, through `Queue` as the ingress does.

    With `wait` the queue is the one a Sentinel deployment's ingress builds (`replicas=1`: the
    submit script and `WAIT` in one pipeline, on one connection). Fails if a `WAIT` came back
    before the replica acknowledged, or an event was not written.
    """
    short = 0

    def unreplicated() -> None:
        nonlocal short
        short += 1

    redis = pooled_redis(url, max_connections=concurrency + 2)
    queue = Queue(redis, replicas=1 if wait else 0, on_unreplicated=unreplicated)
    todo = iter(events)

    async def lane() -> None:
        for event in todo:
            submitted = await queue.submit(event, START)
            require(
                submitted.accepted and submitted.route is Route.START,
                f"event {event.event_id} was not written",
            )

    try:
        await asyncio.gather(*(redis.ping() for _ in range(concurrency)))  # connect first
        started = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for _ in range(concurrency):
                group.create_task(lane())
        elapsed = time.perf_counter() - started
    finally:
        await redis.aclose()
    require(short == 0, f"{short} WAITs returned before the replica acknowledged")
    return elapsed


async def measure(url: str, events: int, concurrency: int) -> dict[str, float]:
    """Seconds per trial: one lane and `concurrency` lanes, without and with `WAIT`."""
    redis = aioredis.Redis.from_url(url)
    try:
        await Queue(redis).ensure_group()
    finally:
        await redis.aclose()
    elapsed: dict[str, float] = {}
    for round_no in range(2):  # interleaved, so drift on a shared machine hits both
        for wait in (False, True):
            name = "wait" if wait else "plain"
            for mode, lanes in (("seq", 1), ("con", concurrency)):
                tag = f"{mode}{round_no}{int(wait)}"
                batch = [_event(n, tag) for n in range(events)]
                seconds = await trial(url, batch, lanes, wait)
                elapsed[f"{name}_{mode}"] = elapsed.get(f"{name}_{mode}", 0.0) + seconds
    return elapsed


_MODES = """\
modes:
  (default)  2,000 events per trial, 32 at a time for the concurrent ones (under a minute)
  --smoke    40 events per trial, 8 at a time (seconds)

Figures: events per second with WAIT ÷ without, one at a time and concurrently, measured in the
same run against the same primary and replica. Exit status 1 when an event is not written, a
WAIT returns before the replica acknowledged, or a figure cannot be produced."""


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the bench; return the exit status."""
    parser = argparse.ArgumentParser(
        description=(
            "Accept events through the submit script on a primary with a replica, without and "
            "with WAIT 1 after each: what acknowledging only replicated events costs."
        ),
        epilog=_MODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--events", type=int, default=2000, help="events per trial")
    parser.add_argument("--concurrency", type=int, default=32, help="submits in flight at once")
    parser.add_argument("--smoke", "--quick", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:
        args.events, args.concurrency = 40, 8
    return run(lambda: _bench(max(1, args.events), max(1, args.concurrency)))


def _bench(events: int, concurrency: int) -> int:
    with tempfile.TemporaryDirectory() as workdir:
        primary_dir, replica_dir = Path(workdir, "primary"), Path(workdir, "replica")
        primary_dir.mkdir()
        replica_dir.mkdir()
        primary, port = spawn_redis(primary_dir, "--appendonly", "yes")
        replica, replica_port = spawn_redis(
            replica_dir, "--appendonly", "yes", "--replicaof", "127.0.0.1", str(port)
        )
        try:
            try:
                wait_synced(replica_port)
            except RuntimeError as exc:
                require(False, str(exc))
            elapsed = asyncio.run(measure(f"redis://127.0.0.1:{port}/0", events, concurrency))
        finally:
            stop_process(replica)
            stop_process(primary)
    total = 2 * events  # two rounds of each trial
    rates = {name: total / seconds for name, seconds in elapsed.items()}
    for mode, label in (("seq", "one at a time"), ("con", f"{concurrency} at a time")):
        plain, waited = rates[f"plain_{mode}"], rates[f"wait_{mode}"]
        print(
            f"{label}: {plain:,.0f} events/s without WAIT, {waited:,.0f} with WAIT 1"
            + (
                f" (latency {1e3 / plain:.3f} ms and {1e3 / waited:.3f} ms)"
                if mode == "seq"
                else ""
            )
        )
    print(f"checked: all {4 * total} events written; every WAIT was acknowledged by the replica")
    print_ratios(
        {
            "wait_vs_plain_sequential": ratio(
                rates["wait_seq"], rates["plain_seq"], name="with WAIT ÷ without, sequential"
            ),
            "wait_vs_plain_concurrent": ratio(
                rates["wait_con"], rates["plain_con"], name="with WAIT ÷ without, concurrent"
            ),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
