"""The admins' kill switch command in chat: `@chatops killswitch on|off|status` (issue 7).

Why this way: the command crosses the whole bot. It is parsed and classified in the ingress,
carried out there (the switch, and a stop for every live turn), and its effect is what workers
do next and what people see on the cards. So requests go in signed exactly as Slack sends them,
into the real ingress, with a real worker talking to the fake OpenAI provider and the fake Slack
Web API, over real Redis; the assertions read the cards, the settles, the switch's state and the
model's requests. The worker runs one analysis at a time and rests briefly between reads, so
"nothing starts while the switch is on" is observed on a worker that is known to be reading
again (it logs that it sees the switch). The phrases themselves are unit-tested in
`test_control_commands.py`, their policy rows in `test_steer_policy.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.analysis.actor import ActorOptions
from bot.control.killswitch import KillSwitch
from bot.keys import BotKeys
from bot.publishing.card_publisher import PublisherOptions
from bot.settings import Settings
from bot.worker.assembly import open_worker
from bot.worker.process import Worker, WorkerOptions
from tests.bot.analysis.test_turn_e2e import probe, session_of, settles
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import SECRET, Bot, open_bot
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

ADMIN = "U0ADMIN01"
KEYS = BotKeys()
READ_INTERVAL_S = 0.2


def mention(text: str) -> str:
    return f"<@{sg.SLACK_BOT_USER_ID}> {text}"


class LogWatch(logging.Handler):
    """Sets `seen` when a record containing `needle` is logged on `logger`."""

    def __init__(self, logger: str, needle: str) -> None:
        super().__init__(logging.DEBUG)
        self.needle, self.seen = needle, asyncio.Event()
        self._logger = logging.getLogger(logger)

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.seen.set()

    def __enter__(self) -> LogWatch:
        self._logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self._logger.removeHandler(self)


@pytest.fixture
async def admin_bot(bot_settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Bot]:
    settings = bot_settings.model_copy(update={"admins": f" {ADMIN}, U0ADMIN02 "})
    async with open_bot(settings, redis_client) as running:
        yield running


@asynccontextmanager
async def one_at_a_time(bot: Bot) -> AsyncIterator[Worker]:
    """A worker that runs one analysis at a time: between analyses it checks the switch first."""
    options = WorkerOptions(concurrency=1, block_s=READ_INTERVAL_S)
    actor = ActorOptions(publisher=PublisherOptions(min_interval_s=0.05))
    async with open_worker(
        bot.settings, redis=bot.redis, actor_options=actor, options=options
    ) as worker:
        task = asyncio.get_running_loop().create_task(worker.run())
        try:
            yield worker
        finally:
            worker.stop()
            await asyncio.wait_for(task, 15)


async def say(bot: Bot, payload: dict[str, Any]) -> dict[str, Any]:
    """Post a Slack event and return the ingress's JSON answer."""
    answer: dict[str, Any] = (await bot.post(payload)).json()
    return answer


async def test_an_admin_stops_everything_and_releases_it_from_the_thread(
    admin_bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, "db")]),
        fp.TextReply("Ran once the switch was off."),
    )
    switch = KillSwitch(redis_client)
    with LogWatch("bot.worker.process", "reading no turns") as switch_seen:
        async with one_at_a_time(admin_bot) as worker:
            first = sg.slack_ts()
            await admin_bot.post(sg.slack_app_mention(ts=first))
            await slow_service.wait_for_hits(1)

            on = sg.slack_app_mention(text=mention("killswitch on"), user=ADMIN, thread_ts=first)
            answer = await say(admin_bot, on)
            assert answer["killswitch"] == "on" and "stopped 1 live" in answer["message"]
            # Slack's `message` twin of the same mention is the same command, carried out once.
            twin = sg.slack_message(
                text=mention("killswitch on"), user=ADMIN, ts=on["event"]["ts"], thread_ts=first
            )
            assert await say(admin_bot, twin) == {"ok": True}
            await worker.wait_finished(1)

            final = final_card(slack_api, first)
            assert f"Stopped by the kill switch ({ADMIN})" in card_text(final)
            assert not stop_buttons(final)
            reasons = [
                r.reason.value for r in (await settles(redis_client, session_of(first))).values()
            ]
            assert reasons == ["stopped"]
            state = await switch.state()
            assert state.on and state.by == ADMIN
            status = await say(
                admin_bot, sg.slack_app_mention(text=mention("急停状态"), user=ADMIN)
            )
            assert status["killswitch"] == "status" and "on since" in status["message"]

            # A mention while the switch is on is accepted and waits; the worker takes nothing.
            await asyncio.wait_for(switch_seen.seen.wait(), 10)
            second = sg.slack_ts()
            await admin_bot.post(sg.slack_app_mention(ts=second))
            await asyncio.sleep(3 * READ_INTERVAL_S)  # a worker that did read would have by now
            assert len(fake_llm.requests) == 1
            assert cards_in(slack_api, second) == []
            assert await redis_client.xlen(KEYS.turns_stream) == 1  # the first one is done
            pending = await redis_client.xpending(KEYS.turns_stream, KEYS.turns_group)
            assert pending["pending"] == 0  # and no worker holds the waiting one

            off = sg.slack_message(text=mention("killswitch off"), user=ADMIN, thread_ts=first)
            answer = await say(admin_bot, off)
            assert answer == {
                "ok": True,
                "killswitch": "off",
                "message": "Kill switch off: queued analyses run now.",
            }
            await worker.wait_finished(2)

    assert not (await switch.state()).on
    records = await settles(redis_client, session_of(second))
    assert [r.reason.value for r in records.values()] == ["completed"]
    assert "Ran once the switch was off" in card_text(final_card(slack_api, second))
    # The commands never reached the model: its two requests are the two mentions' own.
    assert len(fake_llm.requests) == 2
    for request in fake_llm.requests:
        assert not any("killswitch" in str(m.get("content")) for m in request.messages)


async def test_a_non_admins_command_changes_nothing_and_starts_nothing(
    admin_bot, fake_llm, slack_api, slow_service, redis_client, caplog
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, "db")]),
        fp.TextReply("The database is fine."),
    )
    async with one_at_a_time(admin_bot) as worker:
        thread = sg.slack_ts()
        await admin_bot.post(sg.slack_app_mention(ts=thread))
        await slow_service.wait_for_hits(1)

        with caplog.at_level(logging.WARNING, logger="bot.control.killswitch"):
            in_thread = sg.slack_message(text=mention("killswitch on"), thread_ts=thread)
            answer = await say(admin_bot, in_thread)
            top_level = sg.slack_app_mention(text=mention("开启急停"))
            fresh = await say(admin_bot, top_level)
        for refused in (answer, fresh):
            assert refused["killswitch"] == "refused"
            assert "Only an admin" in refused["message"]
        assert "refused: not in CHATOPS_ADMINS" in caplog.text and sg.SLACK_USER_ID in caplog.text
        assert not (await KillSwitch(redis_client).state()).on
        assert await redis_client.xlen(KEYS.turns_stream) == 1  # the live analysis only

        slow_service.release("db")
        await worker.wait_finished(1)

    records = await settles(redis_client, session_of(thread))
    assert [r.reason.value for r in records.values()] == ["completed"]
    assert "The database is fine" in card_text(final_card(slack_api, thread))
    # Not a steer: the model's second request ends with the tool's answer, and no new analysis.
    assert [m["role"] for m in fake_llm.requests[1].messages][-1] == "tool"
    assert len(fake_llm.requests) == 2
    assert cards_in(slack_api, top_level["event"]["ts"]) == []
    assert not await redis_client.exists(KEYS.session.history(session_of(top_level["event"]["ts"])))


async def test_with_no_admins_configured_nobody_may_pull_it(bot, redis_client) -> None:
    assert bot.settings.admins == ""
    answer = await say(bot, sg.slack_app_mention(text=mention("killswitch on"), user=ADMIN))
    assert answer["killswitch"] == "refused"
    assert not (await KillSwitch(redis_client).state()).on
    assert await redis_client.xlen(KEYS.turns_stream) == 0


async def test_a_command_that_failed_midway_is_carried_out_when_slack_retries(
    admin_bot, redis_client
) -> None:
    # A Redis error in the middle of the command (the lease index holds the wrong type): the
    # answer is 503, and the retry Slack sends is not taken for a duplicate.
    await redis_client.set(KEYS.leases, "not a sorted set")
    payload = sg.slack_app_mention(text=mention("killswitch on"), user=ADMIN)
    body, headers = sg.slack_request(payload, secret=SECRET)
    failed = await admin_bot.http.post("/slack/events", content=body, headers=headers)
    assert failed.status_code == 503

    await redis_client.delete(KEYS.leases)
    body, headers = sg.slack_request(payload, secret=SECRET, retry_num=1, retry_reason="http_error")
    retried = await admin_bot.http.post("/slack/events", content=body, headers=headers)
    assert retried.status_code == 200 and retried.json()["killswitch"] == "on"
    assert (await KillSwitch(redis_client).state()).on
    again = await admin_bot.http.post("/slack/events", content=body, headers=headers)
    assert again.json() == {"ok": True}  # carried out once: now it is a duplicate


@pytest.mark.parametrize("record", [b"not json", b"[1, 2]", b'"on"', b'{"by": "alice"}'])
async def test_a_switch_record_that_does_not_parse_still_means_on(redis_client, record) -> None:
    """Only `engage` writes the key; whatever else is found there keeps the brakes on."""
    from bot.keys import BotKeys

    keys = BotKeys()
    await redis_client.set(keys.killswitch, record)
    state = await KillSwitch(redis_client, keys).state()
    assert state.on and state.by == "an unreadable record"
