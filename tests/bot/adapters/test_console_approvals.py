"""Approve and Deny from the console: `POST /console/events` decides a waiting call.

Why this way: the promise is that a console press is the same decision as a Slack or Feishu
button's (responders, the two-person rule, the record), so each test drives the real ingress app
over ASGI with the bearer token and a real in-process worker whose `restart_pod` is a real MCP
server (`tests/fakes/mcp_server.py`, over stdio) declared `side_effect`; the server journals
every call, so "it ran" or "it did not run" is read from the server. The values pressed are the
ones the console card's JSON shows on the cards stream, as `chatops console` reads them. What
the route answers a press naming no call (400 or 404) is the console's own contract; a refused
person gets Slack's 200 and body. The renderer's command lines have a pure test at the end.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from agent_core._approvals import Approval, Verdict
from agent_core._keys import Keys
from bot.adapters.console.inbound import CONSOLE_WORKSPACE
from bot.events import Platform, session_id_for
from bot.keys import BotKeys
from bot.settings import Settings
from bot.state.audit import AuditEvent, read_audit
from cards._console import render_console
from cards._model import CardApproval, CardStatus, ProgressCard
from tests.bot.control.test_approvals import RESTART, mcp_settings, restarts
from tests.fakes import openai_provider as fp
from tests.inprocess_bot import Bot, open_bot

TOKEN = "console-approvals-token-000"
CHANNEL = "ops"
RESPONDER = "carol"
"""`console:carol` is the one configured responder."""


@pytest.fixture
def bot_settings(redis_server, fake_llm) -> Settings:
    """Only the console; the intent check off (the scripts count model requests)."""
    return Settings(
        _env_file=None,
        REDIS_URL=redis_server,
        OPENAI_BASE_URL=fake_llm.base_url,
        OPENAI_API_KEY="test",
        CHATOPS_CONSOLE_TOKEN=TOKEN,
        CHATOPS_LEASE_TTL_S=5,
        CHATOPS_INTENT_CHECK="off",
    )


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


@pytest.fixture
async def bot(
    bot_settings: Settings, redis_client: aioredis.Redis, journal: Path
) -> AsyncIterator[Bot]:
    settings = mcp_settings(bot_settings, journal, "side_effect")
    settings = settings.model_copy(update={"responders": f"console:{RESPONDER}"})
    async with open_bot(settings, redis_client) as running:
        yield running


def session_of(thread: str) -> str:
    return session_id_for(Platform.CONSOLE, CONSOLE_WORKSPACE, CHANNEL, thread)


def press(thread: str, action: str, value: str, *, user: str = RESPONDER) -> dict[str, Any]:
    return {
        "type": "action",
        "channel": CHANNEL,
        "thread": thread,
        "user": user,
        "action": action,
        "value": value,
    }


async def answered(bot: Bot, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await bot.console(payload)
    answer: dict[str, Any] = response.json()
    return response.status_code, answer


async def card_states(redis: aioredis.Redis, thread: str) -> list[tuple[ProgressCard, str]]:
    """Each state of the thread's console card, with its text, in order."""
    raw: Any = await redis.xrange(BotKeys().console_cards)
    return [
        (ProgressCard.from_json(fields[b"card"].decode()), fields[b"text"].decode())
        for _, fields in raw
        if fields[b"thread"].decode() == thread
    ]


async def waiting(bot: Bot, fake_llm: fp.FakeProvider, answer: str) -> tuple[str, CardApproval]:
    """Start an analysis whose model asks to restart a pod; its thread and the waiting call."""
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall(RESTART, {"pod": "checkout-7f9"})]), fp.TextReply(answer)
    )
    thread = uuid.uuid4().hex
    worker = await bot.start_worker()
    mention = {
        "type": "message",
        "channel": CHANNEL,
        "thread": thread,
        "message_id": thread,
        "user": "alice",
        "text": "checkout is down, restart it",
        "mention": True,
    }
    status, _ = await answered(bot, mention)
    assert status == 200
    await worker.wait_finished(1)  # suspended: the call waits for a decision
    card, text = (await card_states(bot.redis, thread))[-1]
    assert card.status is CardStatus.AWAITING_APPROVAL
    (approval,) = card.approvals
    assert approval.tool == RESTART
    call_id = approval.value.partition("|")[0]
    assert f"[ /approve {call_id} ] Approve" in text and f"[ /deny {call_id} ] Deny" in text
    return thread, approval


async def record_of(redis: aioredis.Redis, thread: str) -> Approval:
    (raw,) = await redis.hvals(Keys().approvals(session_of(thread)))
    return Approval.from_json(raw)


async def presses(redis: aioredis.Redis, thread: str) -> list[AuditEvent]:
    return [e for e in await read_audit(redis, session_of(thread)) if e.kind == "approval"]


async def test_an_approve_runs_the_call_and_the_answer_arrives(
    bot, fake_llm, redis_client, journal
) -> None:
    thread, approval = await waiting(bot, fake_llm, "Restarted checkout.")
    assert restarts(journal) == 0

    status, answer = await answered(bot, press(thread, "approve", approval.value))
    assert (status, answer["approval"]) == (200, "approved"), answer
    assert answer["message"] == "Approved: the call runs now."
    await bot.worker.wait_finished(2)

    assert restarts(journal) == 1
    results = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert len(results) == 1 and "restart" in results[0]["content"]
    final, text = (await card_states(redis_client, thread))[-1]
    assert final.status is CardStatus.ANSWERED and "Restarted checkout." in text
    assert "/approve" not in text
    record = await record_of(redis_client, thread)
    assert record.verdict is Verdict.APPROVED and record.decided_by == f"console:{RESPONDER}"
    (audited,) = await presses(redis_client, thread)
    assert audited.who == f"console:{RESPONDER}" and audited.turn == record.turn_id
    assert audited.data == {"call_id": record.call_id, "tool": RESTART, "verdict": "approved"}


async def test_a_deny_answers_the_call_denied_and_nothing_runs(
    bot, fake_llm, redis_client, journal
) -> None:
    thread, approval = await waiting(bot, fake_llm, "Left the pod alone.")

    status, answer = await answered(bot, press(thread, "deny", approval.value))
    assert (status, answer["approval"]) == (200, "denied"), answer
    await bot.worker.wait_finished(2)

    assert restarts(journal) == 0
    results = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert results[-1]["content"].startswith(f"denied by console:{RESPONDER}")
    final, text = (await card_states(redis_client, thread))[-1]
    assert final.status is CardStatus.ANSWERED and "Left the pod alone." in text
    assert (await record_of(redis_client, thread)).verdict is Verdict.DENIED
    assert [(e.who, e.data["verdict"]) for e in await presses(redis_client, thread)] == [
        (f"console:{RESPONDER}", "denied")
    ]
    # S17: a second press on the decided call changes nothing (the desk's answer, as on Slack).
    status, again = await answered(bot, press(thread, "approve", approval.value))
    assert (status, again["approval"]) == (200, "already_decided")
    assert restarts(journal) == 0


async def test_someone_who_is_not_a_responder_is_refused_as_on_slack(
    bot, fake_llm, redis_client, journal
) -> None:
    thread, approval = await waiting(bot, fake_llm, "Restarted checkout.")

    for action in ("approve", "deny"):
        status, answer = await answered(bot, press(thread, action, approval.value, user="mallory"))
        assert (status, answer["approval"]) == (200, "refused"), answer
        assert "only a responder" in answer["message"]
    record = await record_of(redis_client, thread)
    assert record.verdict is Verdict.PENDING and len(record.refusals) == 2
    assert restarts(journal) == 0 and len(fake_llm.requests) == 1
    assert [(e.who, e.data["verdict"]) for e in await presses(redis_client, thread)] == [
        ("console:mallory", "refused"),
        ("console:mallory", "refused"),
    ]

    status, answer = await answered(bot, press(thread, "approve", approval.value))
    assert answer["approval"] == "approved"
    await bot.worker.wait_finished(2)
    assert restarts(journal) == 1


async def test_an_unknown_call_is_404_and_changes_nothing(bot, fake_llm, redis_client) -> None:
    thread, approval = await waiting(bot, fake_llm, "never sent")
    call_id, _, digest = approval.value.partition("|")

    for thread_pressed, value in (
        (thread, f"call_nobody_asked|{digest}"),
        (uuid.uuid4().hex, approval.value),  # the value, on a thread of no analysis
    ):
        status, answer = await answered(bot, press(thread_pressed, "approve", value))
        assert status == 404, answer
        assert answer["error"] == "no such call" and answer["approval"] == "refused"
        assert answer["message"] == "No call of this analysis waits for that."
    record = await record_of(redis_client, thread)
    assert record.verdict is Verdict.PENDING and not record.refusals
    assert await presses(redis_client, thread) == []  # nothing named a call of this analysis
    assert len(fake_llm.requests) == 1 and record.call_id == call_id


@pytest.mark.parametrize("value", ["call_x", "call_x|", "|0123abcd", "|"])
async def test_a_value_that_names_no_call_is_400_with_the_field_named(
    bot, redis_client, value: str
) -> None:
    for action in ("approve", "deny"):
        status, answer = await answered(bot, press(uuid.uuid4().hex, action, value))
        assert status == 400, answer
        assert answer["error"] == "malformed request" and "value" in answer["detail"]
    assert await redis_client.xlen(BotKeys().turns_stream) == 0


# The renderer, pure.


@pytest.mark.parametrize("width", [30, 80])
def test_a_waiting_card_prints_the_commands_the_console_takes(width: int) -> None:
    approvals = tuple(
        CardApproval(tool=RESTART, args=json.dumps({"pod": pod}), risk="side_effect", value=value)
        for pod, value in (("a", "call_1|00ff00ff00ff00ff"), ("b", "call_2|ff00ff00ff00ff00"))
    )
    card = ProgressCard(title="t", turn_id="turn-1", status=CardStatus.AWAITING_APPROVAL)
    text = render_console(card.evolve(approvals=approvals), width=width)
    lines = text.split("\n")
    for call_id in ("call_1", "call_2"):
        assert f"  [ /approve {call_id} ] Approve" in lines
        assert f"  [ /deny {call_id} ] Deny" in lines
    assert "|" not in text  # the digest travels in the card's JSON, never typed
    assert max(len(line) for line in lines) <= width
