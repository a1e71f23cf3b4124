"""The intent check through the whole bot: a redirect, then a call that goes against it.

Why this way: the promise is what a person in the thread sees and what runs, so the test drives
signed Slack requests (the mention, the redirect in the thread, the Approve press) through the
real ingress and a real worker, whose database tool is a real MCP server over stdio
(`tests/fakes/mcp_server.py`, declared `read_only`) that journals every call it receives: "it
did not run" is read from the server. The model is the fake OpenAI provider; the check is its
own request there, counted. `CHATOPS_INTENT_CHECK` is set to its default, `after_redirect`
(the shared fixture turns it off for the tests that count requests), or `off`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import ValidationError

from agent_core import IntentCheck, ToolCall, UserKind, UserMessage
from agent_core._intent_check import check_request, read_verdicts
from agent_core._llm.convert import messages_to_wire
from bot.demo.investigation import next_reply
from bot.settings import Settings
from tests.bot.control.test_approvals import (
    RESPONDER,
    SERVER,
    approval_buttons,
    history_is_closed,
    press,
    records,
)
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.inprocess_bot import Bot, open_bot
from tests.slack_view import card_text, cards_in, final_card, updates_of

QUERY = "pg__db_query"
REDIRECT = "leave the database alone"
REASON = "checks the database although the redirect said to leave it alone"


def db_settings(base: Settings, journal: Path, **changes: Any) -> Settings:
    """The bot's settings with a read-only `db_query` MCP tool and a responder."""
    server = {
        "name": "pg",
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {"MCP_FAKE_JOURNAL": str(journal)},
        "risk": "read_only",
        "tools": ["db_query"],
    }
    return base.model_copy(
        update={
            "mcp_servers": json.dumps([server]),
            "responders": f"slack:{RESPONDER}",
            **changes,
        }
    )


def queries(journal: Path) -> int:
    """`db_query` calls the MCP server received."""
    if not journal.exists():
        return 0
    return journal.read_text().splitlines().count("call db_query")


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


@pytest.fixture
async def db_bot(
    bot_settings: Settings, redis_client: aioredis.Redis, journal: Path
) -> AsyncIterator[Bot]:
    settings = db_settings(bot_settings, journal, intent_check=IntentCheck.AFTER_REDIRECT)
    async with open_bot(settings, redis_client) as running:
        yield running


@pytest.fixture
async def unchecked_bot(
    bot_settings: Settings, redis_client: aioredis.Redis, journal: Path
) -> AsyncIterator[Bot]:
    settings = db_settings(bot_settings, journal, intent_check=IntentCheck.OFF)
    async with open_bot(settings, redis_client) as running:
        yield running


def check_reply() -> fp.TextReply:
    verdict = {"call_id": "c1", "consistent": False, "reason": REASON}
    return fp.TextReply(json.dumps({"verdicts": [verdict]}))


async def redirect_then_query(
    bot: Bot, fake_llm: fp.FakeProvider, slow_service: SlowService, *replies: fp.Reply
) -> str:
    """An analysis is redirected mid-batch, then its model asks for a database query."""
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/look")})]),
        fp.ToolCallsReply([fp.ToolCall(QUERY, {"sql": "select count(*) from orders"})]),
        *replies,
    )
    worker = await bot.start_worker()
    thread = sg.slack_ts()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    await bot.post(sg.slack_message(text=REDIRECT, thread_ts=thread))
    await worker.wait_finished(1)
    return thread


async def test_a_redirect_then_a_database_query_waits_with_the_reason_on_the_card(
    db_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await redirect_then_query(
        db_bot, fake_llm, slow_service, check_reply(), fp.TextReply("42 orders.")
    )

    assert queries(journal) == 0  # the query waits for a person
    assert len(fake_llm.requests) == 3
    check = fake_llm.requests[2]
    assert not check.tools  # the check offers no tool
    assert REDIRECT in check.messages[-1]["content"] and QUERY in check.messages[-1]["content"]
    (posted,) = cards_in(slack_api, thread)
    shown = updates_of(slack_api, posted.response["ts"])[-1]
    assert set(approval_buttons(shown)) == {"approve", "deny"}
    said = card_text(shown)
    assert f"Why: {REASON}" in said and "goes against a correction" in said
    assert "select count(*) from orders" in said
    (waiting,) = await records(redis_client, thread)
    assert waiting.why == REASON and waiting.tool == QUERY

    # The same people decide as for a call that changes something: a responder approves.
    answer = await press(db_bot, slack_api, thread, "approve", user=RESPONDER)
    assert answer["approval"] == "approved", answer
    await db_bot.worker.wait_finished(2)
    assert queries(journal) == 1
    assert "42 orders." in card_text(final_card(slack_api, thread))
    await history_is_closed(redis_client, thread)


async def test_with_the_check_off_the_query_runs(
    unchecked_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await redirect_then_query(
        unchecked_bot, fake_llm, slow_service, fp.TextReply("42 orders.")
    )

    assert queries(journal) == 1
    assert len(fake_llm.requests) == 3 and all(r.tools for r in fake_llm.requests[:2])
    assert "42 orders." in card_text(final_card(slack_api, thread))
    assert await records(redis_client, thread) == []
    await history_is_closed(redis_client, thread)


def test_an_unknown_mode_stops_start_up() -> None:
    with pytest.raises(ValidationError, match="CHATOPS_INTENT_CHECK") as raised:
        Settings(_env_file=None, CHATOPS_INTENT_CHECK="sometimes")
    assert "'off', 'after_redirect' or 'always'" in str(raised.value)
    assert Settings(_env_file=None).intent_check is IntentCheck.AFTER_REDIRECT


def test_the_demo_rehearsal_clears_the_calls_it_made_after_a_redirect() -> None:
    """The demo runs with the default check: its scripted model answers it, every call fits."""
    task = UserMessage(content="checkout is down", author="alice")
    steer = UserMessage(content="focus on the payments database", kind=UserKind.STEER)
    calls = {
        "c1": ToolCall(id="x1", name="http_get", arguments='{"url": "http://db/"}'),
        "c2": ToolCall(id="x2", name="http_get", arguments='{"url": "http://db/pool"}'),
    }
    wire = messages_to_wire(check_request(task, [steer], calls))

    reply = next_reply(wire, "http://checkout.demo:8080")

    assert reply.urls == () and read_verdicts(reply.text, list(calls)) == {}
