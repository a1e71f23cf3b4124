"""The kill switch across workers: live turns stop on every worker, new ones wait (issue 7).

Why this way: the switch is an operator's command against a running deployment, so the test
runs `chatops serve`, two `chatops worker` processes (one analysis each: `--concurrency 1`) and
`chatops killswitch` itself, and reads the outcome where people see it: both cards end "Stopped
by the kill switch", both turns settle `stopped`, a mention made while it is on is not started
(the model is never asked) until the switch is off, and then it runs. Marked slow.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.keys import BotKeys
from tests.deployment import Deployment, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.slack_view import card_text, final_card, stop_buttons

pytestmark = pytest.mark.slow

CHATOPS = str(Path(sys.executable).with_name("chatops"))


async def killswitch(deployment: Deployment, *args: str) -> str:
    done = await asyncio.to_thread(
        subprocess.run,
        [CHATOPS, "killswitch", *args],
        env={**deployment.env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_the_kill_switch_stops_live_turns_on_two_workers_and_blocks_new_ones(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/a")})]),
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/b")})]),
        fp.TextReply("Ran once the switch was off."),
    )
    await deployment.start(workers=1, first_worker_args=("--concurrency", "1"))
    await deployment.add_worker(None, "--concurrency", "1")
    first, second = sg.slack_ts(), sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=first))
    await slow_service.wait_for_hits(1)
    await deployment.slack(sg.slack_app_mention(ts=second))
    await slow_service.wait_for_hits(2)
    holders = {await deployment.holder(slack_session(t)) for t in (first, second)}
    assert len(holders) == 2  # one live turn on each worker

    assert "stopped 2 live analyses" in await killswitch(deployment, "on", "--by", "oncall")
    reasons = {(await deployment.next_settle()).reason.value for _ in range(2)}
    assert reasons == {"stopped"}
    for thread in (first, second):
        await deployment.released(slack_session(thread))
        card = card_text(final_card(slack_api, thread))
        assert "Stopped by the kill switch (oncall)" in card
        assert not stop_buttons(final_card(slack_api, thread))
    assert "on since" in await killswitch(deployment, "status")

    third = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=third))  # accepted, and left queued
    for worker in deployment.workers:
        await worker.wait_for_line("reading no turns")
    requests_while_on = len(fake_llm.requests)
    assert await deployment.redis.xlen(BotKeys().turns_stream) == 1

    assert "kill switch off" in await killswitch(deployment, "off")
    settled = await deployment.next_settle()
    assert settled.reason.value == "completed"
    assert requests_while_on == 2  # nothing started while the switch was on
    await deployment.released(slack_session(third))
    assert "Ran once the switch was off" in card_text(final_card(slack_api, third))


def test_an_unknown_action_is_refused_with_a_clear_error() -> None:
    done = subprocess.run(
        [CHATOPS, "killswitch", "maybe"], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2 and "use on, off or status" in done.stderr


class _Heard(logging.Handler):
    """Sets an event once a record with `text` is logged (from any thread)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.loop = asyncio.get_running_loop()
        self.heard = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.loop.call_soon_threadsafe(self.heard.set)


async def test_a_kill_switch_the_worker_cannot_read_is_never_taken_for_off(
    bot_settings, fake_llm, slack_api, redis_client
) -> None:
    """A worker that can read the stream but not the switch reads no turn until it can.

    The switch is out of reach through an ACL here; in a cluster it may be a key on another
    node. Once it can be read (off), the waiting turn runs.
    """
    from bot.worker.process import log as worker_log
    from tests.inprocess_bot import open_bot

    # Every key but the switch (`{chatops}:killswitch`, the only key of ours after "{chatops}:k").
    allowed = ["~{chatops}:[^k]*", "&*", "+@all"]
    await redis_client.acl_setuser("noswitch", enabled=True, nopass=True, keys=[], reset_keys=True)
    await redis_client.execute_command("ACL", "SETUSER", "noswitch", *allowed)
    restricted = aioredis.Redis.from_url(bot_settings.redis_url, username="noswitch")
    unreadable, readable = _Heard("kill switch unreadable"), _Heard("kill switch readable again")
    for heard in (unreadable, readable):
        worker_log.addHandler(heard)
    try:
        fake_llm.script(fp.TextReply("Checked once the switch could be read."))
        async with open_bot(bot_settings, restricted) as bot:
            worker = await bot.start_worker()
            thread = sg.slack_ts()
            await bot.post(sg.slack_app_mention(ts=thread))
            async with asyncio.timeout(30):  # the worker says so at its first read
                await unreadable.heard.wait()
            (group,) = await redis_client.xinfo_groups(BotKeys().turns_stream)
            assert (group["pending"], group["lag"]) == (0, 1)  # written, and read by nobody
            assert fake_llm.requests == []
            await redis_client.execute_command("ACL", "SETUSER", "noswitch", "allkeys")
            async with asyncio.timeout(30):
                await worker.wait_finished(1)
                await readable.heard.wait()
        assert "Checked once the switch could be read." in card_text(final_card(slack_api, thread))
    finally:
        for heard in (unreadable, readable):
            worker_log.removeHandler(heard)
        await restricted.aclose()
        await redis_client.acl_deluser("noswitch")
