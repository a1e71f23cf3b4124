"""The end-to-end turn in one process: the real ingress app and a real worker, over real Redis.

Why this way: what a person in the thread sees (one card, what it says, its Stop button) and what
the model is sent both result from ingress, queue, worker, actor, runtime, settle writer and card
publisher working together. So requests go in signed exactly as Slack sends them, the worker
talks to the fake OpenAI provider and the fake Slack Web API over HTTP through the real SDKs, and
the assertions read what those fakes recorded and what Redis holds (settles, books). The same
flows across separate `chatops serve` and `chatops worker` processes are in
`test_turn_processes.py`.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from agent_core import SettleRecord
from bot.events import session_id_for
from bot.keys import BotKeys
from bot.state.settle import Book
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

KEYS = BotKeys()


def probe(service: SlowService, name: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": service.url(f"/hold/{name}")})


def session_of(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


async def settles(redis: aioredis.Redis, session: str) -> dict[str, SettleRecord]:
    records = {}
    entries: Any = await redis.xrange(KEYS.book(Book.SETTLES))
    for _, fields in entries:
        if fields[b"session"].decode() == session:
            record = SettleRecord.model_validate_json(fields[b"record"])
            records[record.turn_id] = record
    return records


async def book_len(redis: aioredis.Redis, book: Book) -> int:
    return int(await redis.xlen(KEYS.book(book)))


async def test_steer_mid_batch_redirects_and_the_card_ends_answered(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("db", "cache", "queue")]),
        fp.TextReply("The gateway is dropping connections."),
    )
    thread = sg.slack_ts()
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(3)
    await bot.post(sg.slack_message(text="it's the gateway, not the db", thread_ts=thread))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)

    # The redirected turn's request holds every tool response and then the steer, by name.
    assert [r.status for r in fake_llm.requests] == [200, 200]
    sent = fake_llm.requests[1].messages
    assert [m["role"] for m in sent] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
    ]
    assert sg.SLACK_USER_ID in sent[-1]["content"] and "gateway" in sent[-1]["content"]

    # One card, in the mention's thread; the last state is final, answered, redirected, no Stop.
    assert len(cards_in(slack_api, thread)) == 1
    assert stop_buttons(cards_in(slack_api, thread)[0])
    final = final_card(slack_api, thread)
    assert not stop_buttons(final)
    text = card_text(final)
    assert "Answered" in text and "redirected" in text and "gateway is dropping" in text

    # The books: the steered turn settled as such, with no final event; only the follow-up
    # counts as an automation; nothing was taken for a mute turn.
    records = await settles(redis_client, session_of(thread))
    reasons = sorted(r.reason.value for r in records.values())
    assert reasons == ["completed", "steered"]
    steered = next(r for r in records.values() if r.reason == "steered")
    assert steered.final_event_id == ""
    assert await book_len(redis_client, Book.AUTOMATION) == 1
    assert await book_len(redis_client, Book.NO_FINAL_REPLY) == 0
    assert await book_len(redis_client, Book.REMEDIES) == 0
    assert not await redis_client.exists(KEYS.live_turn(session_of(thread)))
    assert not await redis_client.smembers(KEYS.open_turns(session_of(thread)))

    # Tokens and cost are booked for both turns, the steered one included (10 + 5 each).
    usage = await redis_client.hgetall(KEYS.usage(session_of(thread)))
    assert {k: float(v) for k, v in usage.items()} == {
        b"turns": 2,
        b"prompt_tokens": 20,
        b"completion_tokens": 10,
        b"cost": (20 * 1.0 + 10 * 2.0) / 1e6,
    }


async def test_stop_button_mid_batch_starts_nothing_more(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("a", "b")]),
        fp.TextReply("never sent"),
    )
    thread = sg.slack_ts()
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(2)
    (posted,) = cards_in(slack_api, thread)
    (button,) = stop_buttons(posted)
    await bot.press(
        sg.slack_block_actions(
            action_id=button["action_id"],
            value=button["value"],
            message_ts=posted.response["ts"],
            thread_ts=thread,
        )
    )
    assert bot.worker is not None
    await bot.worker.wait_finished(1)

    assert len(fake_llm.requests) == 1  # no model request after the stop
    assert len(slow_service.hits) == 2  # and no tool call
    final = final_card(slack_api, thread)
    assert not stop_buttons(final)
    assert "Stopped" in card_text(final)
    records = await settles(redis_client, session_of(thread))
    assert [r.reason.value for r in records.values()] == ["stopped"]
    assert await book_len(redis_client, Book.AUTOMATION) == 0


async def test_stop_typed_before_the_turn_starts_never_calls_the_model(
    bot, fake_llm, slack_api, redis_client
) -> None:
    thread = sg.slack_ts()
    await bot.post(sg.slack_app_mention(ts=thread))
    await bot.post(sg.slack_message(text="stop", thread_ts=thread))
    worker = await bot.start_worker()
    await worker.wait_finished(1)
    assert fake_llm.requests == []
    assert cards_in(slack_api, thread) == []
    records = await settles(redis_client, session_of(thread))
    assert [r.reason.value for r in records.values()] == ["cancelled"]


async def test_another_bots_message_in_the_thread_does_not_steer(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, "x")]),
        fp.TextReply("All clear."),
    )
    thread = sg.slack_ts()
    worker = await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    await bot.post(sg.slack_bot_message(text="Alert: p99 > 2s", thread_ts=thread))
    slow_service.release("x")
    await worker.wait_finished(1)
    records = await settles(redis_client, session_of(thread))
    assert [r.reason.value for r in records.values()] == ["completed"]
    assert [m["role"] for m in fake_llm.requests[1].messages][-1] == "tool"


async def test_an_empty_answer_climbs_the_remedy_ladder_once(
    bot, fake_llm, slack_api, redis_client
) -> None:
    fake_llm.script(fp.TextReply(""), fp.TextReply(""))
    thread = sg.slack_ts()
    worker = await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await worker.wait_finished(1)
    assert len(fake_llm.requests) == 2  # the original and one re-run, no more
    assert await book_len(redis_client, Book.REMEDIES) == 1
    assert await book_len(redis_client, Book.NO_FINAL_REPLY) == 2
    assert await book_len(redis_client, Book.AUTOMATION) == 0
    final = final_card(slack_api, thread)
    assert not stop_buttons(final)
