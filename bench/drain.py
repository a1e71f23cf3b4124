"""Benchmark of a drain: how long a worker's live analyses take to continue elsewhere.

Run it with `.venv/bin/python bench/drain.py` (`--help` for the options). It starts its own
`redis-server`, the fake OpenAI provider, the fake Slack Web API and a slow service on loopback,
then `chatops serve` and two `chatops worker` processes. N analyses start, each with one
`http_get` call the slow service holds, all on the first worker (the second starts after they
are claimed). The first worker gets SIGTERM; the held calls are released `--tool-s` seconds
later (the longest in-flight tool: a drain waits for it, the batch must close to reach a cut);
the clock stops when the second worker has completed all N analyses.

Printed: the time from SIGTERM until all N are completed elsewhere, and its ratio to the
longest in-flight tool (the floor a drain cannot beat). A ratio near 1 means the hand-over
itself costs next to nothing; machine speed hardly matters to it. Exit status 1 if an analysis
did not complete, or ended on a second card.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=4, help="live analyses on the worker")
    parser.add_argument("--tool-s", type=float, default=2.0, help="longest in-flight tool (s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        proc, port = spawn_redis(workdir)
        try:
            elapsed, good = asyncio.run(
                measure(args.turns, args.tool_s, f"redis://127.0.0.1:{port}/0")
            )
        finally:
            stop_process(proc)
    print(
        f"drain of {args.turns} live analyses: {elapsed:.2f} s from SIGTERM until all completed "
        f"on another worker; longest in-flight tool {args.tool_s:.2f} s; "
        f"ratio {elapsed / args.tool_s:.2f}x (floor 1.00x)"
    )
    print("checked: every analysis drained once, completed once, on one card" if good else "FAIL")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
