"""`chatops demo`: start the local stack, say what was chosen, play the incident, sum up."""

from __future__ import annotations

import sys
import time
from typing import TextIO

import redis.asyncio as aioredis

from bot.demo.play import play
from bot.demo.stack import StackError, local_stack

__all__ = ["run_demo"]

SCALE, FAST_SCALE = 3.0, 2.0
"""How slow the demo service's probes are (1: 0.6-1.5 s each): slow enough for a person to
see a batch run on the card (updated at most once a second) and redirect it mid-batch."""


async def run_demo(*, fast: bool = False, out: TextIO | None = None) -> int:
    """Run the demo; the process exit status (0: the story happened as told)."""
    out = out or sys.stdout
    started = time.monotonic()
    try:
        async with local_stack(service_scale=FAST_SCALE if fast else SCALE) as stack:
            if stack.redis_start_s is not None:
                out.write(
                    f"redis: embedded redis-server, answered in {stack.redis_start_s * 1000:.0f} ms"
                    "\n"
                )
            else:
                out.write(f"redis: {stack.redis_url}\n")
            if stack.model == "rehearsal":
                out.write(
                    "model: REHEARSAL (a local scripted stand-in, not an LLM; set "
                    "OPENAI_API_KEY to use a real model)\n"
                )
            else:
                out.write(f"model: {stack.model}\n")
            out.write(f"service under investigation: {stack.service_url}\n")
            redis = aioredis.Redis.from_url(stack.redis_url)
            try:
                summary = await play(stack, redis, out)
            finally:
                await redis.aclose()
    except StackError as exc:
        out.write(f"chatops demo: {exc}\n")
        return 2
    out.write(f"demo took {time.monotonic() - started:.1f} s\n")
    return 0 if summary.ok else 1
