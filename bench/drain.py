"""Benchmark of a drain: how long a worker's live analyses take to continue elsewhere.

Run it with `.venv/bin/python bench/drain.py` (`--help` for the options). It starts its own
`redis-server`, the fake OpenAI provider, the fake Slack Web API and a slow service on loopback,
then `chatops serve` and two `chatops worker` processes. N analyses start, each with one
`http_get` call the slow service holds, all on the first worker (the second starts after they
are claimed). The first worker gets SIGTERM; the held calls are released `--tool-s` seconds
later (the longest in-flight tool: a drain waits for it, the batch must close to reach a cut);
the clock stops when the second worker has completed all N analyses.

Printed: the time from SIGTERM until all N are completed elsewhere, and its ratio to the
longest in-flight tool (the floor a drain cannot beat); a ratio near 1 means the hand-over
itself costs next to nothing, and machine speed hardly matters to it. Then an idle worker's
exit: the time from SIGTERM until the process is gone (median of `--idle-rounds`), next to the
same for a sleeping Python process that dies of the signal (what signalling and reaping cost
here); the goal is 100 ms. Exit status 1 if an analysis did not complete, or ended on a second card.

`--smoke` drains 2 analyses with a 0.5 s tool and times one idle exit, in seconds, to check
that every figure can still be produced (`make test` runs it). The figures end the output as
`ratio <name> = <number>` lines (`bench/_figures.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:  # run as a script: make `tests` importable
    sys.path.insert(0, str(_ROOT))

import redis.asyncio as aioredis  # noqa: E402
from _figures import SMOKE_HELP, FigureError, print_ratios, ratio, run  # noqa: E402

from bot.keys import BotKeys  # noqa: E402
from tests.deployment import SECRET, Deployment, slack_env  # noqa: E402
from tests.fakes import openai_provider as fp  # noqa: E402
from tests.fakes import signing as sg  # noqa: E402
from tests.fakes.feishu_api import FakeFeishuAPI  # noqa: E402
from tests.fakes.service import SlowService  # noqa: E402
from tests.fakes.slack_api import FakeSlackAPI  # noqa: E402
from tests.loopback import spawn_redis, stop_process  # noqa: E402
from tests.processes import Chatops  # noqa: E402
from tests.slack_view import cards_in  # noqa: E402

KEYS = BotKeys()


async def measure(turns: int, tool_s: float, redis_url: str) -> float:
    """One drain of `turns` analyses; returns the seconds from SIGTERM until all are done.

    Raises:
        FigureError: An analysis did not drain once and complete once, on one card.
    """
    llm, slack, feishu = fp.FakeProvider(), FakeSlackAPI(), FakeFeishuAPI()
    service = SlowService()
    llm.start()
    slack.start()
    feishu.start()
    await service.start()
    redis = aioredis.Redis.from_url(redis_url)
    env = {**slack_env(redis_url, llm, slack, service), "CHATOPS_LEASE_TTL_S": "5"}
    deployment = Deployment(env, redis)
    try:
        calls = [
            fp.ToolCallsReply([fp.ToolCall("http_get", {"url": service.url(f"/hold/t{n}")})])
            for n in range(turns)
        ]
        llm.script(*calls, *[fp.TextReply(f"done {n}") for n in range(turns)])
        await deployment.start(workers=1)
        threads = [sg.slack_ts() for _ in range(turns)]
        for thread in threads:
            await deployment.slack(sg.slack_app_mention(ts=thread))
        await service.wait_for_hits(turns)
        await deployment.add_worker()
        started = time.monotonic()
        deployment.worker.signal(signal.SIGTERM)
        await asyncio.sleep(tool_s)
        for n in range(turns):
            service.release(f"t{n}")
        reasons = await _settles(deployment, 2 * turns)
        elapsed = time.monotonic() - started
        cards = [len(cards_in(slack, t)) for t in threads]
        if sorted(reasons) != ["completed"] * turns + ["drained"] * turns or set(cards) != {1}:
            raise FigureError(f"the drain settled {sorted(reasons)}, on cards per thread {cards}")
        return elapsed
    finally:
        await deployment.close()
        await redis.aclose()
        await service.close()
        llm.stop()
        slack.stop()
        feishu.stop()


async def _settles(deployment: Deployment, count: int) -> list[str]:
    """The reasons of the next `count` settles (each within 60 s).

    Raises:
        FigureError: Fewer settled: an analysis ended otherwise than drained and completed.
    """
    reasons: list[str] = []
    try:
        for _ in range(count):
            reasons.append((await deployment.next_settle(60)).reason)
    except TimeoutError:
        raise FigureError(
            f"{len(reasons)} of {count} settles within 60 s each: {sorted(reasons)} (each "
            "analysis should settle once drained and once completed)"
        ) from None
    return reasons


async def measure_idle(redis_url: str, rounds: int) -> list[float]:
    """Seconds from SIGTERM until an idle `chatops worker` has exited, one per round."""
    env = {
        "REDIS_URL": redis_url,
        "OPENAI_API_KEY": "bench",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": "xoxb-bench",
    }
    times = []
    for _ in range(rounds):
        worker = await Chatops.worker(env)
        await asyncio.sleep(0.5)  # idle: inside its blocking stream read
        started = time.monotonic()
        worker.signal(signal.SIGTERM)
        await asyncio.to_thread(worker.proc.wait, 10)
        times.append(time.monotonic() - started)
        await worker.stop()
    return times


async def measure_baseline(rounds: int) -> list[float]:
    """Seconds from SIGTERM until a sleeping Python process has exited (signal and reaping)."""
    times = []
    for _ in range(rounds):
        sleeper = "import time; print('up', flush=True); time.sleep(60)"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", sleeper, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdout is not None
        await proc.stdout.readline()
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        await proc.wait()
        times.append(time.monotonic() - started)
    return times


_MODES = """\
modes:
  (default)  4 live analyses, a 2 s in-flight tool, 5 idle exits (under a minute)
  --smoke    2 live analyses, a 0.5 s in-flight tool, 1 idle exit (seconds)

Figures: the drain's time ÷ the longest in-flight tool (the floor, 1.00x), and an idle worker's
exit ÷ a sleeping Python process's, both measured in the same run. Exit status 1 when an
analysis does not drain once and complete once on one card, or a figure cannot be produced."""


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the bench; return the exit status."""
    parser = argparse.ArgumentParser(
        description=(
            "SIGTERM a worker with live analyses: the time until another worker has completed "
            "them all against the longest in-flight tool, and an idle worker's exit against a "
            "bare Python process's."
        ),
        epilog=_MODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=4, help="live analyses on the worker")
    parser.add_argument("--tool-s", type=float, default=2.0, help="longest in-flight tool (s)")
    parser.add_argument("--idle-rounds", type=int, default=5, help="idle worker exits to time")
    parser.add_argument("--smoke", "--quick", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:
        args.turns, args.tool_s, args.idle_rounds = 2, 0.5, 1
    return run(lambda: _bench(max(1, args.turns), args.tool_s, max(1, args.idle_rounds)))


def _bench(turns: int, tool_s: float, idle_rounds: int) -> int:
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = spawn_redis(workdir)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            elapsed = asyncio.run(measure(turns, tool_s, url))
            idle = asyncio.run(measure_idle(url, idle_rounds))
            bare = asyncio.run(measure_baseline(idle_rounds))
        finally:
            stop_process(proc)
    print(
        f"drain of {turns} live analyses: {elapsed:.2f} s from SIGTERM until all completed "
        f"on another worker; longest in-flight tool {tool_s:.2f} s; "
        f"ratio {elapsed / tool_s:.2f}x (floor 1.00x)"
    )
    idle_ms, bare_ms = 1000 * statistics.median(idle), 1000 * statistics.median(bare)
    print(
        f"idle worker: {idle_ms:.0f} ms (median of {len(idle)}) from SIGTERM to exit; a sleeping "
        f"python process: {bare_ms:.0f} ms; ratio {idle_ms / bare_ms:.1f}x; goal 100 ms"
    )
    print("checked: every analysis drained once, completed once, on one card")
    print_ratios(
        {
            "drain_vs_longest_tool": ratio(elapsed, tool_s, name="drain ÷ tool"),
            "idle_exit_vs_sleeping_python": ratio(idle_ms, bare_ms, name="idle exit ÷ python"),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
