"""Scheduled jobs: config refused at start-up, one run per fire time, an ordinary stoppable turn.

Why this way: parsing, the run id and the fire time are pure and tested directly with fixed
instants (never the clock). Firing is tested against a real Redis with two `ScheduledJobs`
as two schedulers would hold them, then with two real `chatops scheduler` processes firing a
per-second job at one Redis and the fake Slack API: every run on the turns stream has its own
event id and its own thread, started by exactly one top-level post. A Feishu job fired by two
`ScheduledJobs` against the fake Feishu API posts one top-level message in the chat, and the
run's event is keyed by that root's message id and the tenant Feishu answered with. Last, a
whole deployment (`chatops serve`, a worker, a scheduler, the fake OpenAI provider and Slack or
Feishu API): a run answers on its card in the job's thread and is booked as an automation; the
next run is stopped with its card's Stop button (a signed interactivity request, or Feishu's
card callback) and is not booked. The scheduler is paused (SIGSTOP) between runs, so each run
is one the test expects; the deployment tests are marked slow.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis.asyncio as aioredis

from bot.adapters.console.posts import ConsolePoster
from bot.adapters.feishu.posts import FeishuPoster
from bot.errors import BotConfigError
from bot.events import AuthorKind, Platform
from bot.keys import BotKeys
from bot.ops.scheduled_jobs import (
    ScheduledJob,
    ScheduledJobs,
    latest_fire_time,
    parse_jobs,
    run_event_id,
)
from bot.publishing.channel_posts import bounded_key
from bot.settings import Settings
from bot.state.settle import Book
from bot.state.turn_jobs import TurnJob, turn_id_for
from tests.deployment import Deployment
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.processes import Chatops
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

KEYS = BotKeys()
CHATOPS = str(Path(sys.executable).with_name("chatops"))


def job_entry(**overrides: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": "daily-briefing",
        "cron": "30 9 * * *",
        "timezone": "Europe/Berlin",
        "platform": "slack",
        "channel": sg.SLACK_CHANNEL_ID,
        "prompt": "Summarize last night's alerts",
    }
    entry.update(overrides)
    return entry


def refused(raw: str) -> str:
    with pytest.raises(BotConfigError) as caught:
        parse_jobs(raw)
    return str(caught.value)


# --- config ------------------------------------------------------------------------------


def test_a_valid_job_parses_with_its_defaults() -> None:
    (job,) = parse_jobs(json.dumps([job_entry()]))
    assert job.id == "daily-briefing" and job.platform is Platform.SLACK
    assert parse_jobs("") == () and parse_jobs("  ") == ()
    (utc,) = parse_jobs(json.dumps([{k: v for k, v in job_entry().items() if k != "timezone"}]))
    assert utc.timezone == "UTC"
    assert utc.tools is None  # every tool of the worker
    (narrow,) = parse_jobs(json.dumps([job_entry(tools=["http_get"])]))
    assert narrow.tools == ("http_get",)
    (feishu,) = parse_jobs(json.dumps([job_entry(platform="feishu", channel=sg.FEISHU_CHAT_ID)]))
    assert feishu.platform is Platform.FEISHU  # no longer refused: Feishu posts top-level


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (job_entry(cron="61 9 * * *"), "'daily-briefing': cron"),
        (job_entry(cron="30 9 * *"), "'daily-briefing': cron: Wrong number of fields"),
        (job_entry(cron="30 9 * * 1-5"), "use names (mon-fri"),
        (job_entry(timezone="Mars/Olympus"), "'daily-briefing': unknown time zone"),
        (job_entry(platform="teams"), "'daily-briefing': platform"),
        (job_entry(tools="http_get"), "'daily-briefing': tools"),
        (job_entry(prompt="  "), "'daily-briefing': prompt"),
        (job_entry(second="70"), "'daily-briefing': cron"),
        (job_entry(colour="blue"), "'daily-briefing': colour"),
        (job_entry(id="has space"), "'has space': id"),
    ],
)
def test_an_invalid_job_is_refused_naming_it(entry: dict[str, Any], expected: str) -> None:
    message = refused(json.dumps([entry]))
    assert message.startswith("CHATOPS_SCHEDULED_JOBS: job ")
    assert expected in message


def test_a_job_without_an_id_is_named_by_its_position() -> None:
    entry = {k: v for k, v in job_entry().items() if k != "id"}
    assert "job #2: id" in refused(json.dumps([job_entry(), entry]))


def test_malformed_lists_and_duplicate_ids_are_refused() -> None:
    assert "is not JSON" in refused("[{")
    assert "must be a JSON list" in refused(json.dumps(job_entry()))
    assert "job 'daily-briefing' is defined twice" in refused(json.dumps([job_entry()] * 2))


def test_the_cron_fields_are_read_in_the_jobs_time_zone() -> None:
    (job,) = parse_jobs(json.dumps([job_entry()]))
    winter = datetime(2024, 1, 15, 0, 0, tzinfo=UTC)
    summer = datetime(2024, 7, 15, 0, 0, tzinfo=UTC)
    assert job.trigger().get_next_fire_time(None, winter).astimezone(UTC).hour == 8
    assert job.trigger().get_next_fire_time(None, summer).astimezone(UTC).hour == 7
    weekdays = ScheduledJob.model_validate(job_entry(cron="0 9 * * mon-fri", timezone="UTC"))
    saturday = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)
    assert weekdays.trigger().get_next_fire_time(None, saturday).weekday() == 0  # Monday


# --- run ids and fire times --------------------------------------------------------------


def test_the_run_id_is_the_job_and_its_fire_time_in_any_zone() -> None:
    fire = datetime(2024, 5, 2, 7, 30, tzinfo=UTC)
    berlin = fire.astimezone(ZoneInfo("Europe/Berlin"))
    assert run_event_id("daily-briefing", fire) == "scheduled-daily-briefing-20240502T073000Z"
    assert run_event_id("daily-briefing", berlin) == run_event_id("daily-briefing", fire)
    later = fire + timedelta(seconds=1)
    assert run_event_id("daily-briefing", later) != run_event_id("daily-briefing", fire)
    assert run_event_id("other", fire) != run_event_id("daily-briefing", fire)


def test_the_fire_time_is_the_latest_due_one_within_the_grace() -> None:
    daily = ScheduledJob.model_validate(job_entry(timezone="UTC")).trigger()
    due = datetime(2024, 5, 2, 9, 30, tzinfo=UTC)
    assert latest_fire_time(daily, due) == due
    assert latest_fire_time(daily, due + timedelta(seconds=2.5)) == due
    assert latest_fire_time(daily, due - timedelta(seconds=1)) is None
    assert latest_fire_time(daily, due + timedelta(seconds=61)) is None  # past the grace
    every_second = ScheduledJob.model_validate(
        job_entry(cron="* * * * *", second="*", timezone="UTC")
    ).trigger()
    now = datetime(2024, 5, 2, 12, 0, 3, 700_000, tzinfo=UTC)
    assert latest_fire_time(every_second, now) == now.replace(microsecond=0)


# --- firing against Redis ----------------------------------------------------------------


def console_jobs(redis: aioredis.Redis, holder: str, job: ScheduledJob) -> ScheduledJobs:
    posters = {Platform.CONSOLE: ConsolePoster(redis)}
    return ScheduledJobs(redis=redis, keys=KEYS, jobs=[job], posters=posters, holder=holder)


async def stream_jobs(redis: aioredis.Redis) -> list[TurnJob]:
    entries: Any = await redis.xrange(KEYS.turns_stream)
    return [TurnJob.model_validate_json(fields[b"job"]) for _, fields in entries]


async def test_two_schedulers_firing_one_run_enqueue_one_scheduler_turn(redis_client) -> None:
    job = ScheduledJob.model_validate(
        job_entry(platform="console", channel="ops", cron="* * * * *", timezone="UTC")
    )
    first, second = console_jobs(redis_client, "a", job), console_jobs(redis_client, "b", job)
    fire = datetime(2024, 5, 2, 9, 30, tzinfo=UTC)
    now = fire + timedelta(seconds=0.2)
    outcomes = await asyncio.gather(first.fire(job, now), second.fire(job, now))
    assert sorted(outcomes) == ["fired elsewhere", "started"]
    (turn,) = await stream_jobs(redis_client)
    event = turn.event
    assert event.event_id == run_event_id(job.id, fire) and turn.turn_id == turn_id_for(event)
    assert event.author_kind is AuthorKind.SCHEDULER and event.text == job.prompt
    assert (event.platform, event.channel, event.thread) == (
        Platform.CONSOLE,
        "ops",
        event.event_id,
    )

    # The claim is only the first guard: without it, the queue's dedupe on the run id holds.
    await redis_client.delete(f"{KEYS.root}:scheduled:{event.event_id}")
    assert await first.fire(job, now) == "duplicate"
    assert await first.fire(job, now + timedelta(minutes=1)) == "started"  # the next fire time
    assert len(await stream_jobs(redis_client)) == 2


async def test_a_feishu_run_starts_under_one_top_level_message_in_the_chat(
    redis_client, feishu_api
) -> None:
    job = ScheduledJob.model_validate(
        job_entry(platform="feishu", channel=sg.FEISHU_CHAT_ID, cron="* * * * *", timezone="UTC")
    )
    settings = Settings(
        _env_file=None,
        FEISHU_APP_ID=sg.FEISHU_APP_ID,
        FEISHU_APP_SECRET=sg.FEISHU_APP_SECRET,
        FEISHU_DOMAIN=feishu_api.base_url,
    )

    def scheduler(holder: str) -> ScheduledJobs:
        posters = {Platform.FEISHU: FeishuPoster.from_settings(settings)}
        return ScheduledJobs(
            redis=redis_client, keys=KEYS, jobs=[job], posters=posters, holder=holder
        )

    fire = datetime(2024, 5, 2, 9, 30, tzinfo=UTC)
    now = fire + timedelta(seconds=0.2)
    outcomes = await asyncio.gather(scheduler("a").fire(job, now), scheduler("b").fire(job, now))
    assert sorted(outcomes) == ["fired elsewhere", "started"]
    (turn,) = await stream_jobs(redis_client)
    (create,) = feishu_api.calls_to("im.v1.message.create")
    root = create.response["data"]
    assert create.query == {"receive_id_type": "chat_id"}
    assert create.params["receive_id"] == sg.FEISHU_CHAT_ID
    assert create.params["uuid"] == bounded_key(run_event_id(job.id, fire))
    assert not root.get("root_id")  # top-level in the chat, not a reply
    assert "Scheduled job daily-briefing" in root["body"]["content"]
    event = turn.event
    assert (event.platform, event.workspace, event.channel, event.thread) == (
        Platform.FEISHU,
        sg.FEISHU_TENANT_KEY,
        sg.FEISHU_CHAT_ID,
        root["message_id"],
    )


def test_a_job_on_a_platform_the_deployment_lacks_is_refused() -> None:
    job = ScheduledJob.model_validate(job_entry())
    with pytest.raises(BotConfigError, match="'daily-briefing': platform slack is not configured"):
        ScheduledJobs(redis=aioredis.Redis(), keys=KEYS, jobs=[job], posters={}, holder="a")


def test_chatops_scheduler_refuses_a_bad_job_and_documents_the_setting(redis_server) -> None:
    env = {
        **os.environ,
        "REDIS_URL": redis_server,
        "CHATOPS_CONSOLE_TOKEN": "t",
        "CHATOPS_SCHEDULED_JOBS": json.dumps([job_entry(platform="console", cron="bad")]),
    }
    done = subprocess.run(
        [CHATOPS, "scheduler"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "job 'daily-briefing': cron" in done.stderr
    shown = subprocess.run(
        [CHATOPS, "scheduler", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert "CHATOPS_SCHEDULED_JOBS" in shown.stdout


# --- processes ---------------------------------------------------------------------------


def jobs_env(env: dict[str, str], **overrides: Any) -> dict[str, str]:
    entry = job_entry(cron="* * * * *", timezone="UTC", **overrides)
    return {**env, "CHATOPS_SCHEDULED_JOBS": json.dumps([entry])}


async def next_run(
    redis: aioredis.Redis, after: str, timeout_s: float = 30.0
) -> tuple[str, TurnJob]:
    """The next turn job on the stream after entry `after` (blocking reads)."""
    async with asyncio.timeout(timeout_s):
        while True:
            reply: Any = await redis.xread({KEYS.turns_stream: after}, count=1, block=2000)
            if reply:
                entry_id, fields = reply[0][1][0]
                return entry_id.decode(), TurnJob.model_validate_json(fields[b"job"])


def root_posts(slack_api) -> dict[str, Any]:
    """The bot's successful top-level posts, by ts."""
    return {
        c.response["ts"]: c
        for c in slack_api.calls_to("chat.postMessage")
        if c.status == 200 and not c.params.get("thread_ts")
    }


@pytest.mark.slow
async def test_two_scheduler_processes_start_each_run_once(
    deploy_env, redis_client, slack_api
) -> None:
    env = jobs_env(deploy_env, second="*")
    schedulers = [await Chatops.scheduler(env, 10.0) for _ in range(2)]
    try:
        last, _ = await next_run(redis_client, "$")  # both schedulers are up and firing
        for _ in range(3):
            last, _ = await next_run(redis_client, last)
    finally:
        for scheduler in schedulers:
            await scheduler.stop()
    turns = await stream_jobs(redis_client)
    run_ids = [turn.event.event_id for turn in turns]
    assert len(run_ids) >= 4 and len(set(run_ids)) == len(run_ids)
    assert all(run_id.startswith("scheduled-daily-briefing-") for run_id in run_ids)
    roots = root_posts(slack_api)
    assert sorted(roots) == sorted(turn.event.thread for turn in turns)  # one thread per run
    assert all(roots[turn.event.thread].params["channel"] == sg.SLACK_CHANNEL_ID for turn in turns)
    assert all(turn.event.workspace == sg.SLACK_TEAM_ID for turn in turns)


async def automation_turns(redis: aioredis.Redis) -> list[str]:
    entries: Any = await redis.xrange(KEYS.book(Book.AUTOMATION))
    return [fields[b"turn"].decode() for _, fields in entries]


@pytest.mark.slow
async def test_a_scheduled_run_is_an_ordinary_turn_booked_and_stoppable(
    deployment: Deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.TextReply("Briefing: all quiet overnight."),
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/brief")})]),
        fp.TextReply("never sent"),
    )
    await deployment.start()
    env = jobs_env(deployment.env, second="*/2", tools=["http_get"])
    scheduler = await Chatops.scheduler(env, 10.0)
    deployment.processes.append(scheduler)
    seen, answered = await next_run(deployment.redis, "0-0")
    scheduler.signal(signal.SIGSTOP)  # no further run until the test lets it fire

    settled = await deployment.next_settle()
    assert (settled.turn_id, settled.reason) == (answered.turn_id, "completed")
    await deployment.released(answered.session_id)
    thread = answered.event.thread
    assert thread in root_posts(slack_api)  # the job's message in the channel roots the thread
    (card,) = cards_in(slack_api, thread)
    assert card.params["channel"] == sg.SLACK_CHANNEL_ID and stop_buttons(card)
    final = final_card(slack_api, thread)
    assert "Briefing: all quiet overnight." in card_text(final) and not stop_buttons(final)
    assert await automation_turns(deployment.redis) == [answered.turn_id]
    # The job's toolset: the worker also has http_probe, but this run is offered http_get only.
    assert [t["function"]["name"] for t in fake_llm.requests[0].tools or []] == ["http_get"]

    scheduler.signal(signal.SIGCONT)  # the missed fire times coalesce into one run
    _, stopped = await next_run(deployment.redis, seen)
    scheduler.signal(signal.SIGSTOP)
    await slow_service.wait_for_hits(1)
    (posted,) = cards_in(slack_api, stopped.event.thread)
    (button,) = stop_buttons(posted)
    await deployment.slack_press(
        sg.slack_block_actions(
            action_id=button["action_id"],
            value=button["value"],
            message_ts=posted.response["ts"],
            thread_ts=stopped.event.thread,
        )
    )
    settled = await deployment.next_settle()
    assert (settled.turn_id, settled.reason) == (stopped.turn_id, "stopped")
    await deployment.released(stopped.session_id)
    final = final_card(slack_api, stopped.event.thread)
    assert "Stopped" in card_text(final) and not stop_buttons(final)
    assert await automation_turns(deployment.redis) == [answered.turn_id]
    assert len(fake_llm.requests) == 2
    scheduler.signal(signal.SIGKILL)  # stopped where it is: no run fires during teardown


def feishu_cards_under(feishu_api, root: str) -> list[dict[str, Any]]:
    """The bot's messages in the topic of `root` (its replies), oldest first, as last patched."""
    return [m for m in feishu_api.bot_messages(sg.FEISHU_CHAT_ID) if m.get("root_id") == root]


def feishu_stop_value(message: dict[str, Any]) -> dict[str, Any] | None:
    """The Stop button's callback value on a Feishu card, if it shows one."""
    card = json.loads(message["body"]["content"])
    for element in card.get("body", {}).get("elements", []):
        for behavior in element.get("behaviors", []) or []:
            value = behavior.get("value")
            if isinstance(value, dict) and value.get("action") == "stop":
                return value
    return None


@pytest.mark.slow
async def test_a_scheduled_run_on_feishu_roots_a_topic_in_the_chat_and_is_stoppable(
    deployment: Deployment, fake_llm, feishu_api, slow_service
) -> None:
    fake_llm.script(
        fp.TextReply("Briefing: all quiet overnight."),
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/brief")})]),
        fp.TextReply("never sent"),
    )
    await deployment.start()
    env = jobs_env(
        deployment.env,
        platform="feishu",
        channel=sg.FEISHU_CHAT_ID,
        second="*/2",
        tools=["http_get"],
    )
    scheduler = await Chatops.scheduler(env, 10.0)
    deployment.processes.append(scheduler)
    seen, answered = await next_run(deployment.redis, "0-0")
    scheduler.signal(signal.SIGSTOP)  # no further run until the test lets it fire

    settled = await deployment.next_settle()
    assert (settled.turn_id, settled.reason) == (answered.turn_id, "completed")
    await deployment.released(answered.session_id)
    root = answered.event.thread
    (create,) = feishu_api.calls_to("im.v1.message.create")
    assert create.query == {"receive_id_type": "chat_id"}
    assert create.response["data"]["message_id"] == root
    posted = feishu_api.message(root)
    assert posted is not None and not posted.get("root_id")  # top-level in the chat
    assert "Scheduled job daily-briefing" in posted["body"]["content"]
    assert answered.event.workspace == sg.FEISHU_TENANT_KEY  # what the chat's events carry
    (card,) = feishu_cards_under(feishu_api, root)  # the card, in the root's topic
    replies = [c for c in feishu_api.calls_to("im.v1.message.reply") if c.status == 200]
    assert [(c.path_params["message_id"], c.params["reply_in_thread"]) for c in replies] == [
        (root, True)
    ]
    assert card["thread_id"] == (feishu_api.message(root) or {}).get("thread_id")
    assert "Briefing: all quiet overnight." in card["body"]["content"]
    assert feishu_stop_value(card) is None  # final
    assert await automation_turns(deployment.redis) == [answered.turn_id]

    scheduler.signal(signal.SIGCONT)  # the missed fire times coalesce into one run
    _, stopped = await next_run(deployment.redis, seen)
    scheduler.signal(signal.SIGSTOP)
    await slow_service.wait_for_hits(1)
    (live,) = feishu_cards_under(feishu_api, stopped.event.thread)
    value = feishu_stop_value(live)
    assert value is not None and value["thread"] == stopped.event.thread
    press = sg.feishu_card_action(value=value, open_message_id=live["message_id"])
    await deployment.feishu(press, path="/feishu/card")  # the session is keyed by the root
    settled = await deployment.next_settle()
    assert (settled.turn_id, settled.reason) == (stopped.turn_id, "stopped")
    await deployment.released(stopped.session_id)
    (final,) = feishu_cards_under(feishu_api, stopped.event.thread)
    assert feishu_stop_value(final) is None and "Stopped" in final["body"]["content"]
    assert await automation_turns(deployment.redis) == [answered.turn_id]
    assert len(feishu_api.calls_to("im.v1.message.create")) == 2  # one root per run
    scheduler.signal(signal.SIGKILL)  # stopped where it is: no run fires during teardown
