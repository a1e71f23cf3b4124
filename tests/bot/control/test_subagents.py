"""Sub-agents through the whole bot: dispatch, reports, a question, and the cascading stop.

Why this way: the promises are about what the model is asked and what keeps running, so a
signed Slack mention goes through the real ingress and a real worker (it runs the children too,
in parallel), and the fake OpenAI provider plays every model: a responder reads each request's
task and answers as the parent or as a child would. The provider refuses a broken history with
OpenAI's own 400, so every 200 is also a valid history.
"""

from __future__ import annotations

import re
import signal
import uuid
from typing import Any

import pytest

from bot.control.killswitch import KillSwitch
from bot.control.subagent_desk import SubagentCards
from bot.control.subagents import ChildState, SubagentRegistry
from bot.events import ChatEvent, Platform, session_id_for
from bot.keys import BotKeys
from bot.publishing.platform import CardTarget
from bot.state.settle import SettleWriter
from cards._model import CardStatus, ProgressCard
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import Bot
from tests.slack_view import card_text, cards_in, final_card, stop_buttons, updates_of

PARENT_TASK = "why is checkout returning 500s?"
PARTS = ("check the gateway", "check the database", "check the last deploy")


def session_of(thread: str) -> str:
    return session_id_for(Platform.SLACK, sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


def mention_event(thread: str) -> ChatEvent:
    """The mention that starts an analysis in `thread`, as the ingress normalizes it."""
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=f"Ev{thread}",
        workspace=sg.SLACK_TEAM_ID,
        channel=sg.SLACK_CHANNEL_ID,
        thread=thread,
        message_id=thread,
        author=sg.SLACK_USER_ID,
    )


def task_of(messages: list[dict[str, Any]]) -> str:
    return next(str(m["content"]) for m in messages if m["role"] == "user")


def said(messages: list[dict[str, Any]], text: str) -> bool:
    return any(m["role"] == "user" and text in str(m["content"]) for m in messages)


def parent_requests(fake_llm: fp.FakeProvider) -> list[fp.RecordedRequest]:
    return [r for r in fake_llm.requests if PARENT_TASK in task_of(r.messages)]


def child_requests(fake_llm: fp.FakeProvider) -> list[fp.RecordedRequest]:
    return [r for r in fake_llm.requests if PARENT_TASK not in task_of(r.messages)]


def fan_out(messages: list[dict[str, Any]]) -> fp.Reply:
    """A parent that dispatches three parts, then sums up the reports; children that answer."""
    task = task_of(messages)
    if PARENT_TASK in task:
        if said(messages, "Report from sub-agent"):
            reports = sum(said(messages, f"task: {p})") for p in PARTS)
            return fp.TextReply(f"All {reports} parts reported: the database is down.")
        return fp.ToolCallsReply([fp.ToolCall("dispatch_subagent", {"task": p}) for p in PARTS])
    return fp.TextReply(f"{task}: done, " + ("DOWN" if "database" in task else "ok"))


async def start(bot: Bot, thread: str) -> None:
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread, text=f"<@{sg.SLACK_BOT_USER_ID}> {PARENT_TASK}"))


async def test_a_parent_dispatches_three_children_and_resumes_on_their_reports(
    bot, fake_llm, slack_api, redis_client
) -> None:
    fake_llm.respond_with(fan_out)
    thread = sg.slack_ts()
    await start(bot, thread)
    await bot.worker.wait_finished(5)  # the parent's turn, three children, the continuation

    parents = parent_requests(fake_llm)
    assert len(parents) == 2  # no model request while the children ran: it did not poll
    assert len(child_requests(fake_llm)) == 3
    assert all(r.status == 200 for r in fake_llm.requests)
    final = final_card(slack_api, thread)
    assert "All 3 parts reported: the database is down." in card_text(final)
    children = await SubagentRegistry(redis_client).children(session_of(thread))
    assert sorted(c.task for c in children) == sorted(PARTS)
    assert {c.state for c in children} == {ChildState.DONE}
    assert all(c.child_id in card_text(final) for c in children)
    # The reports reached the parent as messages, not as corrections that cut a turn.
    resumed = parents[1].messages
    assert sum("Report from sub-agent" in str(m["content"]) for m in resumed) == 3
    assert len(cards_in(slack_api, thread)) == 1  # children post no card of their own


def asks_the_parent(messages: list[dict[str, Any]]) -> fp.Reply:
    """One child that asks which region to check, and a parent that answers it."""
    task = task_of(messages)
    if PARENT_TASK in task:
        last = str(messages[-1]["content"])
        if "asks:" in last and messages[-1]["role"] == "user":
            child = re.search(r"Sub-agent (sub-\w+)", last)
            assert child is not None
            answer = {"child_id": child.group(1), "answer": "eu-west-1"}
            return fp.ToolCallsReply([fp.ToolCall("answer_child", answer)])
        if said(messages, "Report from sub-agent"):
            return fp.TextReply("The gateway in eu-west-1 is fine.")
        return fp.ToolCallsReply([fp.ToolCall("dispatch_subagent", {"task": PARTS[0]})])
    if said(messages, "Answer to your question"):
        return fp.TextReply("gateway healthy in eu-west-1")
    return fp.ToolCallsReply([fp.ToolCall("ask_parent", {"question": "which region?"})])


async def test_a_child_asks_its_parent_and_resumes_with_the_answer(
    bot, fake_llm, slack_api, redis_client
) -> None:
    fake_llm.respond_with(asks_the_parent)
    thread = sg.slack_ts()
    await start(bot, thread)
    # parent dispatches; child asks; parent answers; child resumes and reports; parent sums up.
    await bot.worker.wait_finished(5)
    assert len(parent_requests(fake_llm)) == 3  # dispatch, answer, sum up: never a poll
    final = final_card(slack_api, thread)
    assert "The gateway in eu-west-1 is fine." in card_text(final)
    (child,) = await SubagentRegistry(redis_client).children(session_of(thread))
    assert child.state is ChildState.DONE and "eu-west-1" in child.report
    answered = [r for r in child_requests(fake_llm) if said(r.messages, "Answer to your")]
    assert answered and "eu-west-1" in str(answered[0].messages[-1]["content"])
    assert all(r.status == 200 for r in fake_llm.requests)


def slow_children(slow_service: Any) -> Any:
    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        task = task_of(messages)
        if PARENT_TASK in task:
            return fp.ToolCallsReply(
                [fp.ToolCall("dispatch_subagent", {"task": p}) for p in PARTS[:2]]
            )
        if messages[-1]["role"] == "tool":
            return fp.TextReply("never sent")
        path = "/hold/" + ("gw" if "gateway" in task else "db")
        return fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url(path)})])

    return reply


async def test_stopping_the_parent_stops_every_child(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.respond_with(slow_children(slow_service))
    thread = sg.slack_ts()
    await start(bot, thread)
    await slow_service.wait_for_hits(2)  # both children are inside their tool call
    (posted,) = cards_in(slack_api, thread)
    (button,) = stop_buttons(updates_of(slack_api, posted.response["ts"])[-1])
    await bot.press(
        sg.slack_block_actions(
            action_id=button["action_id"],
            value=button["value"],
            message_ts=posted.response["ts"],
            thread_ts=thread,
        )
    )
    await bot.worker.wait_finished(4)  # the parent's turn, two children, the continuation

    children = await SubagentRegistry(redis_client).children(session_of(thread))
    assert {c.state for c in children} == {ChildState.CANCELLED}
    for child in children:  # nothing of a child is left running or queued
        assert not await redis_client.smembers(f"{{chatops}}:{child.session_id}:open-turns")
        assert not await redis_client.exists(f"{{chatops}}:{child.session_id}:live")
    assert len(child_requests(fake_llm)) == 2  # each child's first request; none after
    assert len(parent_requests(fake_llm)) == 1
    final = final_card(slack_api, thread)
    assert "Stopped" in card_text(final) and not stop_buttons(final)
    assert all(r.status == 200 for r in fake_llm.requests)


def held_children(slow_service: Any) -> Any:
    """Three children that each wait on a held page; a parent that sums up their reports."""

    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        task = task_of(messages)
        if PARENT_TASK in task:
            if said(messages, "Report from sub-agent"):
                return fp.TextReply("Every part reported.")
            calls = [fp.ToolCall("dispatch_subagent", {"task": p}) for p in PARTS]
            return fp.ToolCallsReply(calls)
        if messages[-1]["role"] == "tool":
            return fp.TextReply(f"{task}: ok")
        page = slow_service.url("/hold/" + task.rsplit(" ", 1)[-1])
        return fp.ToolCallsReply([fp.ToolCall("http_get", {"url": page})])

    return reply


@pytest.mark.slow
async def test_children_survive_the_death_of_the_worker_running_them(
    deployment, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.respond_with(held_children(slow_service))
    await deployment.start(workers=2)
    thread = sg.slack_ts()
    text = f"<@{sg.SLACK_BOT_USER_ID}> {PARENT_TASK}"
    await deployment.slack(sg.slack_app_mention(ts=thread, text=text))
    await slow_service.wait_for_hits(3)  # every child is inside its tool call
    registry = SubagentRegistry(redis_client)
    children = await registry.children(session_of(thread))
    assert len(children) == 3
    orphan = children[0]
    doomed = await deployment.holder(orphan.session_id)
    doomed.signal(signal.SIGKILL)
    for part in PARTS:
        slow_service.release(part.rsplit(" ", 1)[-1])

    # The other worker takes the orphans over; the last report wakes the parent.
    await deployment.released(session_of(thread), timeout_s=60)
    assert "Every part reported." in card_text(final_card(slack_api, thread))
    children = await registry.children(session_of(thread))
    assert {c.state for c in children} == {ChildState.DONE}
    assert len(parent_requests(fake_llm)) == 2  # it never polled, and ran once after reports
    assert all(r.status == 200 for r in fake_llm.requests)
    assert len(cards_in(slack_api, thread)) == 1
    page = "/hold/" + orphan.task.rsplit(" ", 1)[-1]
    assert [h.path for h in slow_service.hits].count(page) == 2  # read again by the new holder


def asks_then_parent_busy(slow_service: Any) -> Any:
    """A child that asks; a parent that, woken by the question, reads a held page first."""

    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        task = task_of(messages)
        if PARENT_TASK in task:
            if said(messages, "asks:"):
                page = slow_service.url("/hold/parent")
                return fp.ToolCallsReply([fp.ToolCall("http_get", {"url": page})])
            return fp.ToolCallsReply([fp.ToolCall("dispatch_subagent", {"task": PARTS[0]})])
        if said(messages, "Answer to your question"):
            return fp.TextReply("never sent: the parent was stopped")
        return fp.ToolCallsReply([fp.ToolCall("ask_parent", {"question": "which region?"})])

    return reply


async def test_a_child_waiting_on_a_stopped_parent_ends_without_another_request(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.respond_with(asks_then_parent_busy(slow_service))
    thread = sg.slack_ts()
    await start(bot, thread)
    await slow_service.wait_for_hits(1)  # the parent, woken by the question, is busy
    await bot.post(sg.slack_message(text="stop", thread_ts=thread))
    await bot.worker.wait_finished(4)  # parent, child, parent again, the child's continuation

    (child,) = await SubagentRegistry(redis_client).children(session_of(thread))
    assert child.state is ChildState.CANCELLED
    assert len(child_requests(fake_llm)) == 1  # it asked, and never ran the model again
    assert not await redis_client.smembers(f"{{chatops}}:{child.session_id}:open-turns")
    assert "Stopped" in card_text(final_card(slack_api, thread))
    assert all(r.status == 200 for r in fake_llm.requests)


async def test_the_kill_switch_stops_a_tree_whose_parent_waits(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.respond_with(slow_children(slow_service))
    thread = sg.slack_ts()
    await start(bot, thread)
    await slow_service.wait_for_hits(2)  # the parent waits (no lease); both children run
    switch = KillSwitch(redis_client)
    await switch.engage("oncall-lead")
    await bot.worker.wait_finished(3)  # the parent's turn and both children
    children = await SubagentRegistry(redis_client).children(session_of(thread))
    assert {c.state for c in children} == {ChildState.CANCELLED}
    await switch.release()  # the parent's continuation, queued and tombstoned, ends the card
    await bot.worker.wait_finished(4)
    assert "Stopped by the kill switch (oncall-lead)" in card_text(final_card(slack_api, thread))
    assert len(parent_requests(fake_llm)) == 1 and len(child_requests(fake_llm)) == 2


@pytest.mark.slow
async def test_a_drained_worker_hands_its_children_over_and_the_tree_stays_whole(
    deployment, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.respond_with(held_children(slow_service))
    await deployment.start(workers=2)
    thread = sg.slack_ts()
    text = f"<@{sg.SLACK_BOT_USER_ID}> {PARENT_TASK}"
    await deployment.slack(sg.slack_app_mention(ts=thread, text=text))
    await slow_service.wait_for_hits(3)
    registry = SubagentRegistry(redis_client)
    handed = (await registry.children(session_of(thread)))[0]
    draining = await deployment.holder(handed.session_id)
    draining.signal(signal.SIGTERM)  # drains: each child it runs is sealed at its next cut
    for part in PARTS:
        slow_service.release(part.rsplit(" ", 1)[-1])

    await deployment.released(session_of(thread), timeout_s=60)
    assert "Every part reported." in card_text(final_card(slack_api, thread))
    children = await registry.children(session_of(thread))
    assert {c.state for c in children} == {ChildState.DONE}
    sealed = await SettleWriter(redis_client, BotKeys()).record(
        handed.session_id, f"turn-{handed.child_id}"
    )
    assert sealed is not None and sealed.reason.value == "drained"  # continued elsewhere
    page = "/hold/" + handed.task.rsplit(" ", 1)[-1]
    assert [h.path for h in slow_service.hits].count(page) == 1  # finished, never run again
    assert len(parent_requests(fake_llm)) == 2
    assert all(r.status == 200 for r in fake_llm.requests)


async def test_a_redirect_while_children_work_does_not_end_or_cancel_them(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        if PARENT_TASK in task_of(messages):
            if said(messages, "Report from sub-agent"):
                return fp.TextReply("Both parts reported.")
            if said(messages, "how is it going"):
                return fp.TextReply("Still waiting for the sub-agents.")
            calls = [fp.ToolCall("dispatch_subagent", {"task": p}) for p in PARTS[:2]]
            return fp.ToolCallsReply(calls)
        reply_as_child: fp.Reply = held_children(slow_service)(messages)
        return reply_as_child

    fake_llm.respond_with(reply)
    thread = sg.slack_ts()
    await start(bot, thread)
    await slow_service.wait_for_hits(2)  # both children inside their tool calls
    await bot.post(sg.slack_message(text="how is it going?", thread_ts=thread))
    await bot.worker.wait_finished(2)  # the parent's turn and its redirected continuation
    children = await SubagentRegistry(redis_client).children(session_of(thread))
    assert {c.state for c in children} == {ChildState.RUNNING}  # not cancelled by the answer
    for part in PARTS[:2]:
        slow_service.release(part.rsplit(" ", 1)[-1])
    await bot.worker.wait_finished(5)  # both children, then the parent once more
    assert "Both parts reported." in card_text(final_card(slack_api, thread))
    children = await SubagentRegistry(redis_client).children(session_of(thread))
    assert {c.state for c in children} == {ChildState.DONE}


async def test_a_childs_first_card_already_final_is_its_report(redis_client) -> None:
    """A reaper or a dead letter may post a child's card for the first time as final."""
    registry = SubagentRegistry(redis_client)
    parent = sg.slack_ts()
    parent_event = mention_event(parent)
    record = await registry.dispatch(parent_event, session_of(parent), "turn-p", "check it")
    assert record is not None
    card = ProgressCard(title="check it", turn_id="turn-c").ended(
        CardStatus.INTERRUPTED, error="interrupted"
    )
    target = CardTarget(Platform.SUBAGENT, session_of(parent), record.child_id)
    await SubagentCards(registry).post_card(target, card, key=uuid.uuid4().hex)
    child = await registry.child(session_of(parent), record.child_id)
    assert child is not None and child.state is ChildState.FAILED
    inbox = await redis_client.lrange(BotKeys().inbox(session_of(parent)), 0, -1)
    assert len(inbox) == 1 and b"Report from sub-agent" in inbox[0]


async def test_a_parent_that_ignores_a_question_ends_and_the_asker_is_stopped(
    bot, fake_llm, slack_api, redis_client
) -> None:
    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        if PARENT_TASK in task_of(messages):
            if said(messages, "asks:"):
                return fp.TextReply("No need: the gateway is fine, I checked the status page.")
            return fp.ToolCallsReply([fp.ToolCall("dispatch_subagent", {"task": PARTS[0]})])
        return fp.ToolCallsReply([fp.ToolCall("ask_parent", {"question": "which region?"})])

    fake_llm.respond_with(reply)
    thread = sg.slack_ts()
    await start(bot, thread)
    await bot.worker.wait_finished(4)  # parent, child, parent answering, the child's end
    assert "the gateway is fine" in card_text(final_card(slack_api, thread))
    (child,) = await SubagentRegistry(redis_client).children(session_of(thread))
    assert child.state is ChildState.CANCELLED
    assert len(parent_requests(fake_llm)) == 2  # the answer ended it: no wake-up loop
    assert len(child_requests(fake_llm)) == 1


async def test_a_dispatch_run_again_by_a_resumed_batch_gets_the_child_it_made(
    redis_client,
) -> None:
    registry = SubagentRegistry(redis_client)
    parent = sg.slack_ts()
    event = mention_event(parent)
    before = await redis_client.xlen(BotKeys().turns_stream)
    first = await registry.dispatch(event, session_of(parent), "turn-p", "check it", "call_1")
    again = await registry.dispatch(event, session_of(parent), "turn-p", "check it", "call_1")
    other = await registry.dispatch(event, session_of(parent), "turn-p", "check it", "call_2")
    assert first is not None and again is not None and other is not None
    assert again.child_id == first.child_id != other.child_id
    assert len(await registry.children(session_of(parent))) == 2
    assert await redis_client.xlen(BotKeys().turns_stream) == before + 2  # queued once each
