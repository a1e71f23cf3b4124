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

from bot.keys import BotKeys  # noqa: E402
from tests.deployment import SECRET, Deployment  # noqa: E402
from tests.fakes import openai_provider as fp  # noqa: E402
from tests.fakes import signing as sg  # noqa: E402
from tests.fakes.feishu_api import FakeFeishuAPI  # noqa: E402
from tests.fakes.service import SlowService  # noqa: E402
from tests.fakes.slack_api import FakeSlackAPI  # noqa: E402
from tests.loopback import spawn_redis, stop_process  # noqa: E402
from tests.processes import Chatops  # noqa: E402
from tests.slack_view import cards_in  # noqa: E402

KEYS = BotKeys()


async def measure(turns: int, tool_s: float, redis_url: str) -> tuple[float, bool]:
    """One drain of `turns` analyses; returns (seconds from SIGTERM to all done, all good)."""
    llm, slack, feishu = fp.FakeProvider(), FakeSlackAPI(), FakeFeishuAPI()
    service = SlowService()
    llm.start()
    slack.start()
    feishu.start()
    await service.start()
    redis = aioredis.Redis.from_url(redis_url)
    env = {
        "REDIS_URL": redis_url,
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": "bench",
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_BOT_TOKEN": slack.token,
        "SLACK_API_URL": slack.base_url,
        "CHATOPS_HTTP_ALLOWLIST": f"127.0.0.1:{service.port}",
        "CHATOPS_LEASE_TTL_S": "5",
    }
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
        reasons = [(await deployment.next_settle(60)).reason for _ in range(2 * turns)]
        elapsed = time.monotonic() - started
        one_card_each = all(len(cards_in(slack, t)) == 1 for t in threads)
        good = sorted(reasons) == ["completed"] * turns + ["drained"] * turns and one_card_each
        return elapsed, good
    finally:
        await deployment.close()
        await redis.aclose()
        await service.close()
        llm.stop()
        slack.stop()
        feishu.stop()


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=4, help="live analyses on the worker")
    parser.add_argument("--tool-s", type=float, default=2.0, help="longest in-flight tool (s)")
    parser.add_argument("--idle-rounds", type=int, default=5, help="idle worker exits to time")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = spawn_redis(workdir)
        url = f"redis://127.0.0.1:{port}/0"
        try:
            elapsed, good = asyncio.run(measure(args.turns, args.tool_s, url))
            idle = asyncio.run(measure_idle(url, args.idle_rounds))
            bare = asyncio.run(measure_baseline(args.idle_rounds))
        finally:
            stop_process(proc)
    print(
        f"drain of {args.turns} live analyses: {elapsed:.2f} s from SIGTERM until all completed "
        f"on another worker; longest in-flight tool {args.tool_s:.2f} s; "
        f"ratio {elapsed / args.tool_s:.2f}x (floor 1.00x)"
    )
    idle_ms, bare_ms = 1000 * statistics.median(idle), 1000 * statistics.median(bare)
    print(
        f"idle worker: {idle_ms:.0f} ms (median of {len(idle)}) from SIGTERM to exit; a sleeping "
        f"python process: {bare_ms:.0f} ms; ratio {idle_ms / bare_ms:.1f}x; goal 100 ms"
    )
    print("checked: every analysis drained once, completed once, on one card" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
