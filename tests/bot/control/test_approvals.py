"""Approval gates through the whole bot (docs/reliability.md A1, A4, A5, H3, S17).

Why this way: the promise is that nothing changes without a named person's approval, so each
test drives signed Slack requests through the real ingress and a real worker, whose toolset
comes from a real MCP server (`tests/fakes/mcp_server.py`, started over stdio by the worker as
in production) declared `side_effect` or `destructive`. The server journals every call it
receives, so "it did not run" is read from the server, not from our own bookkeeping. The model
is the fake OpenAI provider, which refuses a broken history with OpenAI's own 400.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from agent_core import validate_history
from agent_core._approvals import Approval, Verdict
from agent_core._keys import Keys
from agent_core._store import HistoryStore
from bot.control.killswitch import KillSwitch
from bot.events import Platform, session_id_for
from bot.ops.scheduler import open_scheduler
from bot.settings import Settings
from tests.deployment import slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import Bot, open_bot
from tests.paths import TESTS
from tests.slack_view import blocks, card_text, cards_in, final_card, stop_buttons, updates_of

SERVER = TESTS / "fakes" / "mcp_server.py"
RESPONDER = "U0RESPONDER"
OUTSIDER = "U0OUTSIDER"
RESTART = "k8s__restart_pod"


def session_of(thread: str) -> str:
    return session_id_for(Platform.SLACK, sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


def mcp_servers(journal: Path, risk: str) -> str:
    """`CHATOPS_MCP_SERVERS` for the test MCP server over stdio, offering `restart_pod`."""
    server = {
        "name": "k8s",
        "transport": "stdio",
        "command": sys.executable,
        "args": [str(SERVER), "stdio"],
        "env": {"MCP_FAKE_JOURNAL": str(journal)},
        "risk": risk,
        "tools": ["restart_pod"],
    }
    return json.dumps([server])


def mcp_settings(base: Settings, journal: Path, risk: str, **extra: Any) -> Settings:
    fields = {
        "CHATOPS_MCP_SERVERS": mcp_servers(journal, risk),
        "CHATOPS_RESPONDERS": f"slack:{RESPONDER},slack:{sg.SLACK_USER_ID}",
        **extra,
    }
    return base.model_copy(
        update={
            "mcp_servers": fields.pop("CHATOPS_MCP_SERVERS"),
            "responders": fields.pop("CHATOPS_RESPONDERS"),
            **{k.removeprefix("CHATOPS_").lower(): v for k, v in fields.items()},
        }
    )


def restarts(journal: Path) -> int:
    """`restart_pod` calls the MCP server received."""
    if not journal.exists():
        return 0
    return journal.read_text().splitlines().count("call restart_pod")


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


@pytest.fixture
async def side_effect_bot(
    bot_settings: Settings, redis_client: aioredis.Redis, journal: Path
) -> AsyncIterator[Bot]:
    async with open_bot(mcp_settings(bot_settings, journal, "side_effect"), redis_client) as b:
        yield b


@pytest.fixture
async def destructive_bot(
    bot_settings: Settings, redis_client: aioredis.Redis, journal: Path
) -> AsyncIterator[Bot]:
    async with open_bot(mcp_settings(bot_settings, journal, "destructive"), redis_client) as b:
        yield b


def approval_buttons(call: Any) -> dict[str, dict[str, Any]]:
    """The Approve and Deny buttons of a card, by action id."""
    return {
        element["action_id"]: element
        for block in blocks(call)
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("action_id") in ("approve", "deny")
    }


async def press(
    bot: Bot, slack_api: Any, thread: str, action: str, *, user: str, value: str | None = None
) -> dict[str, Any]:
    """Press Approve or Deny on the thread's card as `user`; the ingress's answer."""
    (posted,) = cards_in(slack_api, thread)
    # The newest state that showed the buttons: a late press uses a card already replaced.
    shown = [c for c in updates_of(slack_api, posted.response["ts"]) if approval_buttons(c)][-1]
    button = approval_buttons(shown)[action]
    response = await bot.press(
        sg.slack_block_actions(
            action_id=action,
            value=value if value is not None else button["value"],
            message_ts=posted.response["ts"],
            thread_ts=thread,
            user=user,
            button_text=button["text"]["text"],
        )
    )
    answer: dict[str, Any] = response.json()
    return answer


async def suspend_on_restart(bot: Bot, fake_llm: Any, slack_api: Any, thread: str) -> None:
    """Start an analysis whose model reads, then asks to restart a pod: it waits for approval."""
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)  # the worker is free while the call waits
    (posted,) = cards_in(slack_api, thread)
    shown = updates_of(slack_api, posted.response["ts"])[-1]
    assert set(approval_buttons(shown)) == {"approve", "deny"}
    assert "Waiting for approval" in card_text(shown)
    assert RESTART in card_text(shown) and "checkout-7f9" in card_text(shown)


async def records(redis: aioredis.Redis, thread: str) -> list[Approval]:
    raw = await redis.hvals(Keys().approvals(session_of(thread)))
    return [Approval.from_json(v) for v in raw]


async def history_is_closed(redis: aioredis.Redis, thread: str) -> None:
    validate_history(await HistoryStore(redis).load(session_of(thread)))


async def waiting_analysis(
    bot: Bot, fake_llm: Any, slack_api: Any, slow_service: Any, answer: str
) -> str:
    """Start an analysis that waits for approval; return its thread.

    Its model reads a page, falls for the instruction in it and asks for a restart, then (once
    it gets its results) answers `answer`.
    """
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("http_get", {"url": slow_service.url("/leak")}),
                fp.ToolCall(RESTART, {"pod": "checkout-7f9"}),
            ]
        ),
        fp.TextReply(answer),
    )
    thread = sg.slack_ts()
    await suspend_on_restart(bot, fake_llm, slack_api, thread)
    return thread


async def test_h3_approved_call_runs_once_on_a_later_turn(
    side_effect_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await waiting_analysis(
        side_effect_bot, fake_llm, slack_api, slow_service, "Restarted checkout."
    )
    # A1: the injected instruction led to a request, never to a restart.
    assert restarts(journal) == 0
    assert len(fake_llm.requests) == 1
    (waiting,) = await records(redis_client, thread)
    assert waiting.verdict is Verdict.PENDING and waiting.requester == sg.SLACK_USER_ID

    answer = await press(side_effect_bot, slack_api, thread, "approve", user=RESPONDER)
    assert answer["approval"] == "approved"
    await side_effect_bot.worker.wait_finished(2)

    assert restarts(journal) == 1
    assert len(fake_llm.requests) == 2 and fake_llm.requests[1].status == 200
    results = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert len(results) == 2  # both calls of the batch, in call order, right after it
    assert "restart" in results[1]["content"] and "error" not in results[1]["content"]
    assert "Restarted checkout." in card_text(final_card(slack_api, thread))
    (decided,) = await records(redis_client, thread)
    assert decided.verdict is Verdict.APPROVED and decided.decided_by == f"slack:{RESPONDER}"
    assert decided.decided_at >= decided.requested_at and decided.started_at > 0
    assert json.loads(decided.arguments) == {"pod": "checkout-7f9"}
    await history_is_closed(redis_client, thread)

    # S17: a second press on a decided call changes nothing and runs nothing.
    again = await press(side_effect_bot, slack_api, thread, "deny", user=RESPONDER)
    assert again["approval"] == "already_decided"
    assert restarts(journal) == 1


async def test_a4_forged_presses_are_refused_then_a_deny_closes_the_call(
    side_effect_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await waiting_analysis(
        side_effect_bot, fake_llm, slack_api, slow_service, "Left the pod alone."
    )

    outsider = await press(side_effect_bot, slack_api, thread, "approve", user=OUTSIDER)
    assert outsider["approval"] == "refused" and "responder" in outsider["message"]
    forged = await press(
        side_effect_bot, slack_api, thread, "approve", user=RESPONDER, value="call_x|0000"
    )
    assert forged["approval"] == "refused"
    call_id = (await records(redis_client, thread))[0].call_id
    other_args = await press(
        side_effect_bot, slack_api, thread, "approve", user=RESPONDER, value=f"{call_id}|00ff"
    )
    assert other_args["approval"] == "refused" and "other arguments" in other_args["message"]
    (still,) = await records(redis_client, thread)
    assert still.verdict is Verdict.PENDING and len(still.refusals) == 2  # both on the record
    assert restarts(journal) == 0 and len(fake_llm.requests) == 1

    denied = await press(side_effect_bot, slack_api, thread, "deny", user=RESPONDER)
    assert denied["approval"] == "denied"
    await side_effect_bot.worker.wait_finished(2)
    assert restarts(journal) == 0
    results = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert results[-1]["content"].startswith(f"denied by slack:{RESPONDER}")
    assert "Left the pod alone." in card_text(final_card(slack_api, thread))
    await history_is_closed(redis_client, thread)


async def test_a5_the_requester_may_not_approve_a_destructive_call(
    destructive_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await waiting_analysis(
        destructive_bot, fake_llm, slack_api, slow_service, "Restarted."
    )
    shown = card_text(updates_of(slack_api, cards_in(slack_api, thread)[0].response["ts"])[-1])
    assert "second person" in shown

    # The requester is a responder too, yet cannot approve their own destructive call.
    own = await press(destructive_bot, slack_api, thread, "approve", user=sg.SLACK_USER_ID)
    assert own["approval"] == "refused" and "second person" in own["message"]
    assert (await records(redis_client, thread))[0].verdict is Verdict.PENDING

    second = await press(destructive_bot, slack_api, thread, "approve", user=RESPONDER)
    assert second["approval"] == "approved"
    await destructive_bot.worker.wait_finished(2)
    assert restarts(journal) == 1
    await history_is_closed(redis_client, thread)


async def test_h3_stop_while_waiting_closes_the_call_and_the_card(
    side_effect_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await waiting_analysis(
        side_effect_bot, fake_llm, slack_api, slow_service, "never sent"
    )
    (posted,) = cards_in(slack_api, thread)
    (stop,) = stop_buttons(updates_of(slack_api, posted.response["ts"])[-1])
    await side_effect_bot.press(
        sg.slack_block_actions(
            action_id=stop["action_id"],
            value=stop["value"],
            message_ts=posted.response["ts"],
            thread_ts=thread,
        )
    )
    await side_effect_bot.worker.wait_finished(2)

    assert restarts(journal) == 0
    assert len(fake_llm.requests) == 1  # no model request after the stop
    final = final_card(slack_api, thread)
    assert "Stopped" in card_text(final)
    assert not approval_buttons(final)
    (closed,) = await records(redis_client, thread)
    assert closed.verdict is Verdict.STOPPED
    history = await HistoryStore(redis_client).load(session_of(thread))
    validate_history(history)
    assert history[-1].content.startswith("interrupted: the analysis was stopped by")

    late = await press(side_effect_bot, slack_api, thread, "approve", user=RESPONDER)
    assert late["approval"] == "already_decided"
    assert restarts(journal) == 0


async def test_h3_a_redirect_while_waiting_answers_interrupted_and_goes_on(
    side_effect_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await waiting_analysis(
        side_effect_bot, fake_llm, slack_api, slow_service, "Checked the DB instead."
    )
    await side_effect_bot.post(
        sg.slack_message(text="don't restart anything, look at the database", thread_ts=thread)
    )
    await side_effect_bot.worker.wait_finished(2)

    assert restarts(journal) == 0
    messages = fake_llm.requests[1].messages
    restart_result = [m for m in messages if m["role"] == "tool"][-1]
    assert restart_result["content"].startswith("interrupted: the analysis was redirected")
    assert messages[-1]["role"] == "user" and "database" in messages[-1]["content"]
    assert "Checked the DB instead." in card_text(final_card(slack_api, thread))
    (closed,) = await records(redis_client, thread)
    assert closed.verdict is Verdict.SUPERSEDED
    await history_is_closed(redis_client, thread)


async def test_h3_expiry_answers_approval_expired(
    bot_settings, redis_client, fake_llm, slack_api, slow_service, journal
) -> None:
    settings = mcp_settings(bot_settings, journal, "side_effect", CHATOPS_APPROVAL_TIMEOUT_S=0.2)
    async with open_bot(settings, redis_client) as bot:
        thread = await waiting_analysis(bot, fake_llm, slack_api, slow_service, "Nobody approved.")
        async with open_scheduler(settings, interval_s=60, redis=redis_client) as scheduler:
            report = None
            for _ in range(100):  # the request expires 0.2 s after it was made
                report = await scheduler.tick()
                if report is not None and report.expired:
                    break
                await asyncio.sleep(0.05)
            assert report is not None and report.expired == 1
        assert bot.worker is not None
        await bot.worker.wait_finished(2)
        late = await press(bot, slack_api, thread, "approve", user=RESPONDER)
    assert late["approval"] == "already_decided"
    assert restarts(journal) == 0
    results = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert results[-1]["content"].startswith("approval expired")
    assert "Nobody approved." in card_text(final_card(slack_api, thread))
    await history_is_closed(redis_client, thread)


@pytest.mark.slow
async def test_h3_a_worker_killed_before_the_turn_suspended_asks_again_after_takeover(
    deployment, fake_llm, slack_api, slow_service, journal
) -> None:
    """A worker dies mid-batch, before its turn suspended: the new holder asks again.

    Its read was still running and the restart not yet asked for. Nothing runs unapproved, and
    the approved call runs once.
    """
    deployment.env |= {
        "CHATOPS_MCP_SERVERS": mcp_servers(journal, "side_effect"),
        "CHATOPS_RESPONDERS": RESPONDER,
    }
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("http_get", {"url": slow_service.url("/ok")}),
                fp.ToolCall(RESTART, {"pod": "checkout-7f9"}),
            ]
        ),
        fp.TextReply("Restarted after approval."),
    )
    await deployment.start(workers=1, first_worker_env={"CHATOPS_FAILPOINTS": "mid_tool"})
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    assert await asyncio.to_thread(deployment.workers[0].proc.wait, 20) == -9
    await deployment.add_worker()

    settled = await deployment.next_settle()
    assert settled.reason == "awaiting", settled
    assert restarts(journal) == 0
    (posted,) = cards_in(slack_api, thread)
    await slack_api.wait_for_calls(1, "chat.update")
    shown = [c for c in updates_of(slack_api, posted.response["ts"]) if approval_buttons(c)]
    while not shown:  # the card shows the request once the taken-over turn suspends
        await asyncio.sleep(0.05)
        shown = [c for c in updates_of(slack_api, posted.response["ts"]) if approval_buttons(c)]
    button = approval_buttons(shown[-1])["approve"]
    await deployment.slack_press(
        sg.slack_block_actions(
            action_id="approve",
            value=button["value"],
            message_ts=posted.response["ts"],
            thread_ts=thread,
            user=RESPONDER,
            button_text="Approve",
        )
    )
    settled = await deployment.next_settle()
    assert settled.reason == "completed", settled
    await deployment.released(slack_session(thread))
    assert restarts(journal) == 1
    assert [r.status for r in fake_llm.requests] == [200, 200]
    assert "Restarted after approval." in card_text(final_card(slack_api, thread))


async def test_the_kill_switch_stops_an_analysis_waiting_for_approval(
    side_effect_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await waiting_analysis(side_effect_bot, fake_llm, slack_api, slow_service, "never")
    switch = KillSwitch(redis_client)
    stopped = await switch.engage("oncall-lead")
    assert any(s.startswith(session_of(thread)) for s in stopped)
    refused = await press(side_effect_bot, slack_api, thread, "approve", user=RESPONDER)
    assert refused["approval"] == "refused" and "kill switch" in refused["message"]

    await switch.release()  # the continuation runs now: it only closes the batch and the card
    await side_effect_bot.worker.wait_finished(2)
    assert restarts(journal) == 0
    assert len(fake_llm.requests) == 1
    assert "Stopped by the kill switch (oncall-lead)" in card_text(final_card(slack_api, thread))
    (closed,) = await records(redis_client, thread)
    assert closed.verdict is Verdict.STOPPED
    await history_is_closed(redis_client, thread)


async def test_s17_a_redelivered_press_is_answered_from_the_record(
    side_effect_bot, fake_llm, slack_api, slow_service, redis_client, journal
) -> None:
    thread = await waiting_analysis(side_effect_bot, fake_llm, slack_api, slow_service, "Done.")
    (posted,) = cards_in(slack_api, thread)
    shown = updates_of(slack_api, posted.response["ts"])[-1]
    payload = sg.slack_block_actions(
        action_id="approve",
        value=approval_buttons(shown)["approve"]["value"],
        message_ts=posted.response["ts"],
        thread_ts=thread,
        user=RESPONDER,
        button_text="Approve",
    )
    first = (await side_effect_bot.press(payload)).json()
    again = (await side_effect_bot.press(payload)).json()  # the same delivery, once more
    assert first["approval"] == "approved" and again["approval"] == "already_decided"
    await side_effect_bot.worker.wait_finished(2)
    assert restarts(journal) == 1
