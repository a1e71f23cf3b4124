"""The memory of past analyses through the whole bot: booked as an analysis answers, read back.

Why this way: that an answered analysis is booked once, with the task it was given and the
answer its card shows, is the turn chain's doing at the end of a real analysis; and that the
next firing of an alert finds the first answer is what the model reads in the tool result of
its `past_analyses` call. So the real ingress app and a real worker run over the real Redis,
the model is the fake OpenAI provider (whose recorded requests are what the model was sent),
cards go to the fake Slack Web API, and alerts are written by the same `route_event` the
receivers use. What the memory holds is then read with a `MemoryBook` of the test's own.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.events import AlertOrigin, AuthorKind, ChatEvent, Platform, session_id_for
from bot.intake.queue import Queue
from bot.intake.routing import RoutingOutcome, route_event
from bot.keys import BotKeys
from bot.state.memory import MemoryBook
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.slack_view import card_text, final_card

KEYS = BotKeys()
ALERT = "CheckoutLatencyHigh"


def alert_event(incident: str, thread: str) -> ChatEvent:
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=f"alert-{incident}",
        workspace=sg.SLACK_TEAM_ID,
        channel=sg.SLACK_CHANNEL_ID,
        thread=thread,
        message_id="",
        author="alert:alertmanager",
        author_name="Alertmanager",
        author_kind=AuthorKind.ALERT,
        text=f"Alert {ALERT} is firing for service checkout (p99 2.4 s).",
        alert=AlertOrigin(
            sender="alertmanager",
            incident=incident,
            alert_name=ALERT,
            route="checkout",
            labels=(("service", "checkout"), ("severity", "page")),
            fingerprints=(f"fp-{incident}",),
        ),
    )


async def test_an_answered_analysis_is_booked_once_with_its_task_and_answer(
    bot, fake_llm, slack_api, redis_client: aioredis.Redis
) -> None:
    answer = "Findings: the payments-db connection pool is exhausted."
    fake_llm.script(fp.TextReply(answer))
    thread = sg.slack_ts()
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    assert "connection pool is exhausted" in card_text(final_card(slack_api, thread))

    memory = MemoryBook(redis_client, KEYS, days=90)
    (booked,) = await memory.search("checkout returning 500s")
    assert booked.task == "why is checkout returning 500s?"
    assert booked.answer == answer
    assert booked.session_id == session_id_for(
        "slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread
    )
    where = (booked.platform, booked.channel, booked.thread)
    assert where == ("slack", sg.SLACK_CHANNEL_ID, thread)
    assert booked.alert_name == ""  # a person's mention: no alert
    assert await redis_client.zcard(KEYS.memory_index) == 1
    # The id the card carries (its Stop button's value, what a mark-wrong press names).
    assert await memory.mark_wrong(booked.turn_id, "slack:U0ALICE", 1.0)


async def test_the_same_alert_firing_again_sees_the_first_answer(
    bot, fake_llm, redis_client: aioredis.Redis
) -> None:
    first_answer = "Findings: the payments-db connection pool is exhausted [1]."
    fake_llm.script(
        fp.TextReply(first_answer),
        fp.ToolCallsReply([fp.ToolCall("past_analyses", {"query": ALERT})]),
        fp.TextReply("The pool is exhausted again, as on the first firing."),
    )
    queue = Queue(redis_client)
    memory = MemoryBook(redis_client, KEYS, days=90)
    await bot.start_worker()
    assert bot.worker is not None

    assert await route_event(queue, alert_event("inc-1", sg.slack_ts())) is RoutingOutcome.START
    await bot.worker.wait_finished(1)
    assert await memory.count_for_alert(ALERT) == 1
    (first,) = await memory.search("", alert_name=ALERT)
    assert first.task == alert_event("inc-1", "").text and first.answer == first_answer
    assert (first.incident, first.sender, first.route) == ("inc-1", "alertmanager", "checkout")
    assert first.labels == (("service", "checkout"), ("severity", "page"))
    assert first.fingerprints == ("fp-inc-1",)

    assert await route_event(queue, alert_event("inc-2", sg.slack_ts())) is RoutingOutcome.START
    await bot.worker.wait_finished(2)

    # The second analysis's model was offered the tool, and read the first answer in its result.
    offered = {t["function"]["name"] for t in fake_llm.requests[1].tools or []}
    assert "past_analyses" in offered
    result = fake_llm.requests[2].messages[-1]
    assert result["role"] == "tool"
    assert '<tool_output tool="past_analyses">' in result["content"]
    assert "1 earlier analysis for 'CheckoutLatencyHigh'" in result["content"]
    assert first_answer in result["content"]
    assert "alert CheckoutLatencyHigh {service=checkout, severity=page}" in result["content"]
    assert "MARKED WRONG" not in result["content"]

    # Each analysis booked once; the newest first.
    assert await memory.count_for_alert(ALERT) == 2
    found = await memory.search(ALERT)
    assert [p.incident for p in found] == ["inc-2", "inc-1"]
