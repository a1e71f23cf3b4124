"""Marking an answer wrong: a "Mark answer wrong" press through the real ingress.

Slack presses are signed for real and posted to `/slack/events` (`tests/inprocess_bot.py`), the
console's to `POST /console/events` with its bearer token; the mark is read back through the real
`MemoryBook` on a loopback redis-server, after booking the analysis first as the turn chain
does. No worker runs: the press is taken at the ingress and changes nothing else.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from bot.events import AuthorKind, ChatEvent, EventKind, Platform
from bot.intake.accept import MARKED_WRONG, NOT_ON_RECORD
from bot.intake.routing import routes_for
from bot.policy.steer import Marker, marker_of
from bot.settings import Settings
from bot.state.audit import AuditLog
from bot.state.memory import MemoryBook, PastAnalysis
from tests.fakes import signing as sg
from tests.inprocess_bot import Bot, open_bot

TOKEN = "console-mark-wrong-token-0000"
ROOT = "1700000000.000100"
TURN = f"turn-slack-Ev{ROOT}"
SESSION = "slack-session-of-the-thread"


@pytest.fixture
async def bot(bot_settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Bot]:
    settings = bot_settings.model_copy(update={"console_token": SecretStr(TOKEN)})
    async with open_bot(settings, redis_client) as running:
        yield running


def _memory(bot: Bot) -> MemoryBook:
    return MemoryBook(bot.redis, days=bot.settings.memory_days)


async def _book(bot: Bot, turn: str = TURN) -> None:
    analysis = PastAnalysis(
        turn_id=turn,
        session_id=SESSION,
        when=time.time(),
        platform="slack",
        channel=sg.SLACK_CHANNEL_ID,
        thread=ROOT,
        task="Why is HighLatency firing?",
        answer="The database pool was exhausted.",
        alert_name="HighLatency",
    )
    await _memory(bot).book(analysis)


async def _past(bot: Bot) -> PastAnalysis:
    [past] = await _memory(bot).search("", alert_name="HighLatency")
    return past


def _press(turn: str, *, user: str = sg.SLACK_USER_ID, username: str = "alice") -> dict[str, Any]:
    return sg.slack_block_actions(
        action_id="wrong",
        value=turn,
        message_ts=ROOT,
        thread_ts=ROOT,
        user=user,
        username=username,
        button_text="Mark answer wrong",
    )


async def _marks_audited(bot: Bot) -> list[str]:
    event = ChatEvent(
        platform=Platform.SLACK,
        event_id="x",
        workspace=sg.SLACK_TEAM_ID,
        channel=sg.SLACK_CHANNEL_ID,
        thread=ROOT,
        message_id="",
        author="x",
    )
    audited = await AuditLog(bot.redis).read(event.session_id)
    return [a.who for a in audited if a.kind == "marked_wrong"]


async def test_a_slack_press_marks_the_booked_answer_wrong_and_keeps_the_first(bot: Bot) -> None:
    await _book(bot)
    press = _press(TURN)
    answer = (await bot.press(press)).json()
    assert answer == {"ok": True, "marked_wrong": True, "message": MARKED_WRONG}
    past = await _past(bot)
    assert past.wrong_by == "alice" and past.wrong_at > 0

    again = (await bot.press(press)).json()  # the platform delivers the same press again
    assert again["message"] == MARKED_WRONG
    other = (await bot.press(_press(TURN, user="U0BOB0001", username="bob"))).json()
    assert other["marked_wrong"] is True and other["message"] == MARKED_WRONG
    assert (await _past(bot)).wrong_by == "alice"  # the first mark is kept
    who = await _marks_audited(bot)
    assert who == [f"slack:{sg.SLACK_USER_ID}", "slack:U0BOB0001"]  # the repeat: once


async def test_a_press_on_an_unknown_turn_is_answered_clearly(bot: Bot) -> None:
    await _book(bot)
    answer = (await bot.press(_press("turn-slack-never-booked"))).json()
    assert answer == {"ok": True, "marked_wrong": False, "message": NOT_ON_RECORD}
    assert (await _past(bot)).wrong_by == ""
    assert await _marks_audited(bot) == []


async def test_a_console_wrong_press_marks_it(bot: Bot) -> None:
    await _book(bot)
    press = {
        "type": "action",
        "channel": "ops",
        "thread": "t-1",
        "user": "carol",
        "action": "wrong",
        "value": TURN,
    }
    response = await bot.console(press, token=TOKEN)
    assert response.status_code == 200, response.text
    assert response.json()["message"] == MARKED_WRONG
    assert (await _past(bot)).wrong_by == "console:carol"
    unknown = await bot.console({**press, "value": "turn-console-none"}, token=TOKEN)
    assert unknown.status_code == 200 and unknown.json()["message"] == NOT_ON_RECORD


def test_the_policy_routes_a_wrong_press_nowhere() -> None:
    press = ChatEvent(
        platform=Platform.SLACK,
        event_id="Ev1",
        kind=EventKind.ACTION,
        workspace="T1",
        channel="C1",
        thread=ROOT,
        message_id="",
        author="U1",
        author_kind=AuthorKind.HUMAN,
        action="wrong",
        action_value=TURN,
    )
    assert marker_of(press) is Marker.NONE
    assert routes_for(press) == (None, None, None, None)  # no stop, steer or start in any state
