"""The turns stream over a job's life: read, run, acknowledged and gone (RELIABILITY Q-rows).

Why this way: the stream is the durable queue between the ingress and the workers, so its
state is what the test reads back from the real Redis after the real ingress and worker have
handled many signed mentions: nothing left pending, nothing left behind.
"""

from __future__ import annotations

import pytest

from bot.errors import BotConfigError
from bot.keys import BotKeys
from bot.worker import require_durable_redis
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg

KEYS = BotKeys()
JOBS = 30


async def test_q10_done_entries_leave_the_stream(bot, fake_llm, redis_client) -> None:
    fake_llm.script(*[fp.TextReply(f"answer {n}") for n in range(JOBS)])
    worker = await bot.start_worker()
    for _ in range(JOBS):
        await bot.post(sg.slack_app_mention(ts=sg.slack_ts()))
    await worker.wait_finished(JOBS)
    assert await redis_client.xlen(KEYS.turns_stream) == 0
    pending = await redis_client.xpending(KEYS.turns_stream, KEYS.turns_group)
    assert pending["pending"] == 0


async def test_q2_production_refuses_a_redis_without_aof(redis_client) -> None:
    await redis_client.config_set("appendonly", "no")
    with pytest.raises(BotConfigError, match="appendonly"):
        await require_durable_redis(redis_client)
    await redis_client.config_set("appendonly", "yes")
    try:
        await require_durable_redis(redis_client)  # accepted
    finally:
        await redis_client.config_set("appendonly", "no")
