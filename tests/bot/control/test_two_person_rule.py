"""The two-person rule, closed: participants may not approve, scheduled calls need two (X11, X12).

Why this way: the rule guards the one thing the bot must never do alone, run a destructive call,
so each test drives it the way it would be bent: signed Slack requests (a redirect in the
thread, Approve presses) into the real ingress, a real worker whose destructive tool is a real
MCP server that journals every call it receives ("it did not run" is read from the server), the
fake OpenAI provider, and real Redis. The scheduled run is fired by the real `ScheduledJobs`
(its thread started on the fake Slack Web API), so the card the presses land on is a scheduled
run's own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agent_core._approvals import Verdict
from bot.adapters.slack.posts import SlackPoster
from bot.events import Platform
from bot.keys import BotKeys
from bot.ops.scheduled_jobs import ScheduledJob, ScheduledJobs
from bot.settings import Settings
from tests.bot.control.test_approvals import (
    RESTART,
    approval_buttons,
    history_is_closed,
    mcp_settings,
    press,
    records,
    restarts,
    session_of,
)
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.inprocess_bot import Bot, open_bot
from tests.slack_view import card_text, cards_in, final_card, updates_of

KEYS = BotKeys()
STEERER = "U0STEERER"
"""A responder who redirects the analysis toward the destructive call."""
SECOND = "U0SECOND"
"""A responder who took no part in the analysis."""
THIRD = "U0THIRD"


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


@pytest.fixture
async def destructive_bot(
    bot_settings: Settings, redis_client: aioredis.Redis, journal: Path
) -> AsyncIterator[Bot]:
    responders = ",".join(f"slack:{u}" for u in (sg.SLACK_USER_ID, STEERER, SECOND, THIRD))
    settings = mcp_settings(bot_settings, journal, "destructive", CHATOPS_RESPONDERS=responders)
    async with open_bot(settings, redis_client) as running:
        yield running


async def test_x11_a_responder_who_redirected_the_analysis_may_not_approve_its_call(
    destructive_bot, fake_llm, slack_api, slow_service: SlowService, redis_client, journal
) -> None:
    """X11: the redirect led to the restart; its author is refused, on the record."""
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/look")})]),
        fp.ToolCallsReply([fp.ToolCall(RESTART, {"pod": "checkout-7f9"})]),
        fp.TextReply("Restarted."),
    )
    worker = await destructive_bot.start_worker()
    thread = sg.slack_ts()
    await destructive_bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    redirect = sg.slack_message(text="just restart the pod", thread_ts=thread, user=STEERER)
    await destructive_bot.post(redirect)
    await worker.wait_finished(1)  # redirected, then suspended on the restart
    assert "just restart the pod" in str(fake_llm.requests[1].messages[-1]["content"])
    (posted,) = cards_in(slack_api, thread)
    assert approval_buttons(updates_of(slack_api, posted.response["ts"])[-1])
    participants = await redis_client.smembers(KEYS.participants(session_of(thread)))
    assert participants == {f"slack:{sg.SLACK_USER_ID}".encode(), f"slack:{STEERER}".encode()}

    steered = await press(destructive_bot, slack_api, thread, "approve", user=STEERER)
    assert steered["approval"] == "refused", steered
    assert "you redirected or answered this analysis" in steered["message"]
    own = await press(destructive_bot, slack_api, thread, "approve", user=sg.SLACK_USER_ID)
    assert own["approval"] == "refused" and "you asked for this analysis" in own["message"]
    (waiting,) = await records(redis_client, thread)
    assert waiting.verdict is Verdict.PENDING and restarts(journal) == 0
    assert waiting.refusals == (
        f"slack:{STEERER}: a destructive call needs a second person: "
        "you redirected or answered this analysis",
        f"slack:{sg.SLACK_USER_ID}: a destructive call needs a second person: "
        "you asked for this analysis",
    )

    second = await press(destructive_bot, slack_api, thread, "approve", user=SECOND)
    assert second["approval"] == "approved", second
    await worker.wait_finished(2)
    assert restarts(journal) == 1
    (decided,) = await records(redis_client, thread)
    assert decided.verdict is Verdict.APPROVED and decided.decided_by == f"slack:{SECOND}"
    assert "Restarted." in card_text(final_card(slack_api, thread))
    await history_is_closed(redis_client, thread)


def root_post_ts(slack_api) -> str:
    """The scheduled run's thread: the one top-level post the scheduler made."""
    (root,) = [
        c.response["ts"]
        for c in slack_api.calls_to("chat.postMessage")
        if c.status == 200 and not c.params.get("thread_ts")
    ]
    ts: str = root
    return ts


async def test_x12_a_scheduled_jobs_destructive_call_needs_two_distinct_approvers(
    destructive_bot, fake_llm, slack_api, redis_client, journal
) -> None:
    """X12: the first approval is recorded and the call waits; a second person releases it."""
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall(RESTART, {"pod": "checkout-7f9"})]),
        fp.TextReply("Restarted on schedule."),
    )
    job = ScheduledJob.model_validate(
        {
            "id": "nightly-restart",
            "cron": "* * * * *",
            "timezone": "UTC",
            "platform": "slack",
            "channel": sg.SLACK_CHANNEL_ID,
            "prompt": "Restart checkout if it is stuck",
        }
    )
    posters = {Platform.SLACK: SlackPoster(destructive_bot.settings)}
    jobs = ScheduledJobs(redis=redis_client, keys=KEYS, jobs=[job], posters=posters, holder="t")
    worker = await destructive_bot.start_worker()
    fired = datetime(2024, 5, 2, 9, 30, tzinfo=UTC)
    assert await jobs.fire(job, fired + timedelta(seconds=0.2)) == "started"
    await worker.wait_finished(1)
    thread = root_post_ts(slack_api)
    (waiting,) = await records(redis_client, thread)
    assert waiting.requester == "scheduler:nightly-restart" and waiting.risk.value == "destructive"

    first = await press(destructive_bot, slack_api, thread, "approve", user=SECOND)
    assert first["approval"] == "recorded", first
    assert "second person" in first["message"]
    again = await press(destructive_bot, slack_api, thread, "approve", user=SECOND)
    assert again["approval"] == "refused" and "you approved it already" in again["message"]
    (still,) = await records(redis_client, thread)
    assert still.verdict is Verdict.PENDING and restarts(journal) == 0
    assert len(fake_llm.requests) == 1  # nothing continued the analysis
    firsts = await redis_client.hgetall(KEYS.first_approvals(session_of(thread)))
    assert firsts == {waiting.call_id.encode(): f"slack:{SECOND}".encode()}

    released = await press(destructive_bot, slack_api, thread, "approve", user=THIRD)
    assert released["approval"] == "approved", released
    await worker.wait_finished(2)
    assert restarts(journal) == 1
    (decided,) = await records(redis_client, thread)
    assert decided.verdict is Verdict.APPROVED and decided.decided_by == f"slack:{THIRD}"
    assert "Restarted on schedule." in card_text(final_card(slack_api, thread))
    await history_is_closed(redis_client, thread)
