"""The turns stream over a job's life: read, run, acknowledged and gone (the Q rows).

Why this way: the stream is the durable queue between the ingress and the workers, so its
state is what the test reads back from the real Redis after the real ingress and worker have
handled many signed mentions: nothing left pending, nothing left behind.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.errors import BotConfigError
from bot.events import session_id_for
from bot.keys import BotKeys
from bot.worker.clients import require_durable_redis
from bot.worker.process import MAX_DELIVERIES
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.rings import rings
from tests.slack_view import card_text, final_card, stop_buttons

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


async def test_q7_a_job_that_keeps_killing_its_workers_is_dead_lettered(
    bot, fake_llm, slack_api, redis_client
) -> None:
    thread = sg.slack_ts()
    await bot.post(sg.slack_app_mention(ts=thread))
    ((_, ((entry_id, _fields),)),) = await redis_client.xreadgroup(
        KEYS.turns_group, "ghost", {KEYS.turns_stream: ">"}, count=1
    )
    for _ in range(MAX_DELIVERIES):  # delivered again and again: each time its worker died
        await redis_client.xclaim(
            KEYS.turns_stream, KEYS.turns_group, "ghost", 0, [entry_id], idle=10 * 60 * 1000
        )
    session = session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)
    async with rings(redis_client, KEYS.lease_free(session)) as free:
        await bot.start_worker()
        await free.wait_for("free")  # handled: released
    dead: Any = await redis_client.xrange(KEYS.dead_letters)
    assert [fields[b"entry"] for _, fields in dead] == [entry_id]
    assert fake_llm.requests == []  # never run again
    assert await redis_client.xlen(KEYS.turns_stream) == 0
    final = final_card(slack_api, thread)
    assert "Failed" in card_text(final) and "could not be run" in card_text(final)
    assert not stop_buttons(final)
