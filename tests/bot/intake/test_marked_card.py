"""A card shown as marked wrong: the press through the real ingress, the card shown again once.

Why this way: the promise is what people in the thread see, so an analysis runs for real (the
ingress over ASGI, an in-process worker, the fake OpenAI provider), its final card is read from
the fake Slack Web API's records or the console's cards stream, the press is a signed Slack
interactivity payload (or the console's bearer-token action), and the marked card is shown by a
real reaper sweep, the one that shows every recorded final not yet shown. The record's fences
(a later analysis's card, a sender holding an older state, a stale read) are driven directly on
the real redis-server, since no process interleaving reaches them on demand.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from bot.events import Platform, session_id_for
from bot.intake.accept import MARKED_WRONG, NOT_ON_RECORD
from bot.keys import BotKeys
from bot.ops.reaper import Reaper
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import CardTarget
from bot.settings import Settings
from bot.state.lease import Leases
from bot.state.memory import MemoryBook
from bot.state.settle import SettleWriter
from bot.worker.clients import open_clients
from cards import CardStatus, ProgressCard
from cards._console import WRONG_HINT
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.slack_api import FakeSlackAPI
from tests.inprocess_bot import Bot, open_bot
from tests.slack_view import blocks, card_text, final_card, stop_buttons

KEYS = BotKeys()
TOKEN = "console-marked-card-token-000"
ANSWER = "Findings\nThe database pool was exhausted.\nNext steps\nRaise the pool."


@pytest.fixture
async def bot(bot_settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Bot]:
    settings = bot_settings.model_copy(update={"console_token": SecretStr(TOKEN)})
    async with open_bot(settings, redis_client) as running:
        yield running


async def sweep(bot: Bot) -> int:
    """One reaper sweep with the platforms' real clients; the finals it showed."""
    async with AsyncExitStack() as stack:
        redis, platforms = await open_clients(bot.settings, bot.redis, stack)
        reaper = Reaper(
            redis=redis,
            keys=KEYS,
            leases=Leases(redis, KEYS, ttl_s=30),
            settle=SettleWriter(redis, KEYS),
            platforms=platforms,
        )
        return (await reaper.sweep()).delivered


def wrong_buttons(call: Any) -> list[dict[str, Any]]:
    return [
        element
        for block in blocks(call)
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("action_id") == "wrong"
    ]


def press(thread: str, turn: str, *, user: str, username: str) -> dict[str, Any]:
    return sg.slack_block_actions(
        action_id="wrong",
        value=turn,
        message_ts=thread,
        thread_ts=thread,
        user=user,
        username=username,
        button_text="Mark answer wrong",
    )


async def answered_in_slack(bot: Bot, fake_llm: fp.FakeProvider) -> str:
    fake_llm.script(fp.TextReply(ANSWER))
    thread = sg.slack_ts()
    worker = await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await worker.wait_finished(1)
    return thread


async def test_a_slack_press_shows_the_final_card_marked_once_and_keeps_the_first_mark(
    bot: Bot, fake_llm: fp.FakeProvider, slack_api: FakeSlackAPI
) -> None:
    thread = await answered_in_slack(bot, fake_llm)
    answered = final_card(slack_api, thread)
    [button] = wrong_buttons(answered)
    turn = button["value"]
    assert not stop_buttons(answered)

    said = (await bot.press(press(thread, turn, user=sg.SLACK_USER_ID, username="alice"))).json()
    assert said == {"ok": True, "marked_wrong": True, "message": MARKED_WRONG}
    assert await sweep(bot) == 1
    marked = final_card(slack_api, thread)
    assert marked.params["ts"] == answered.response["ts"]  # the same message, updated
    assert "Answer marked wrong by alice" in card_text(marked)
    assert "pool was exhausted" in card_text(marked)
    assert not wrong_buttons(marked) and not stop_buttons(marked)

    updates = len(slack_api.calls_to("chat.update"))
    other = await bot.press(press(thread, turn, user="U0BOB0001", username="bob"))
    assert other.json()["message"] == MARKED_WRONG
    assert await sweep(bot) == 0  # nothing to show again
    assert len(slack_api.calls_to("chat.update")) == updates
    [past] = await MemoryBook(bot.redis, KEYS, days=30).search("database pool exhausted")
    assert past.wrong_by == "alice"
    record = await CardRecord(bot.redis, KEYS, session_of(thread)).read()
    card = ProgressCard.from_json(record["state"])
    assert record["final"] == "1" and card.status is CardStatus.ANSWERED
    assert card.marked_wrong_by == "alice"

    late = ProgressCard(title="late", turn_id=turn, thread=thread)  # a late live update
    assert await CardRecord(bot.redis, KEYS, session_of(thread)).claim(2**40, late) == 0


async def test_a_slack_press_on_an_unknown_turn_is_answered_and_changes_nothing(
    bot: Bot, fake_llm: fp.FakeProvider, slack_api: FakeSlackAPI
) -> None:
    thread = await answered_in_slack(bot, fake_llm)
    before = await CardRecord(bot.redis, KEYS, session_of(thread)).read()
    said = await bot.press(press(thread, "turn-never-ran", user=sg.SLACK_USER_ID, username="al"))
    assert said.json() == {"ok": True, "marked_wrong": False, "message": NOT_ON_RECORD}
    assert await sweep(bot) == 0
    assert await CardRecord(bot.redis, KEYS, session_of(thread)).read() == before
    assert wrong_buttons(final_card(slack_api, thread))  # still offered


def session_of(thread: str) -> str:
    return session_id_for(Platform.SLACK, sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


async def console_cards(redis: aioredis.Redis, thread: str) -> list[dict[str, str]]:
    raw: Any = await redis.xrange(KEYS.console_cards)
    decoded = [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in raw]
    return [entry for entry in decoded if entry.get("thread") == thread]


def console_press(thread: str, turn: str, user: str) -> dict[str, Any]:
    return {
        "type": "action",
        "channel": "ops",
        "thread": thread,
        "user": user,
        "action": "wrong",
        "value": turn,
    }


async def test_the_console_wrong_press_shows_the_card_marked_and_keeps_the_first_mark(
    bot: Bot, fake_llm: fp.FakeProvider
) -> None:
    fake_llm.script(fp.TextReply(ANSWER))
    thread = uuid.uuid4().hex
    worker = await bot.start_worker()
    mention = {
        "type": "message",
        "channel": "ops",
        "thread": thread,
        "message_id": thread,
        "user": "alice",
        "text": "why is checkout slow?",
        "mention": True,
    }
    assert (await bot.console(mention)).status_code == 200
    await worker.wait_finished(1)
    shown = await console_cards(bot.redis, thread)
    answered = ProgressCard.from_json(shown[-1]["card"])
    assert answered.can_mark_wrong and shown[-1]["text"].endswith(WRONG_HINT)

    unknown = await bot.console(console_press(thread, "turn-console-none", "carol"))
    assert unknown.json()["message"] == NOT_ON_RECORD
    assert await sweep(bot) == 0 and len(await console_cards(bot.redis, thread)) == len(shown)

    said = await bot.console(console_press(thread, answered.turn_id, "carol"))
    assert said.status_code == 200 and said.json()["message"] == MARKED_WRONG
    assert await sweep(bot) == 1
    again = await bot.console(console_press(thread, answered.turn_id, "dave"))
    assert again.json()["message"] == MARKED_WRONG
    assert await sweep(bot) == 0

    after = await console_cards(bot.redis, thread)
    assert len(after) == len(shown) + 1  # shown again once
    last = after[-1]
    assert (last["op"], last["message_id"]) == ("update", shown[-1]["message_id"])
    card = ProgressCard.from_json(last["card"])
    assert card.is_final and card.marked_wrong_by == "console:carol"
    assert "Answer marked wrong by console:carol" in last["text"]
    assert WRONG_HINT not in last["text"] and "/stop" not in last["text"]


def answered_card(turn: str = "t-1") -> ProgressCard:
    live = ProgressCard(title="why?", turn_id=turn, thread="th")
    return live.ended(CardStatus.ANSWERED, answer="It was the pool.")


async def recorded(redis: aioredis.Redis, session: str, card: ProgressCard) -> CardRecord:
    """A record holding `card` as its final state, delivered on message `m-1`."""
    await redis.set(KEYS.live_turn(session), "1|w|t")  # a lease of token 1, as `fenced` reads it
    record = CardRecord(redis, KEYS, session)
    await record.attach(1, CardTarget(Platform.CONSOLE, "ops", "th"))
    await record.set_message("m-1")
    assert await record.claim(1, card) > 0
    await record.mark_delivered()
    return record


async def test_the_record_shows_again_only_the_card_it_was_read_as(
    redis_client: aioredis.Redis,
) -> None:
    record = await recorded(redis_client, "s-stale", answered_card())
    fields = await record.read()
    marked = answered_card().evolve(marked_wrong_by="alice")
    assert await record.refinal(marked, seq=fields["seq"], message_id="m-other") is False
    assert await record.refinal(marked, seq="0", message_id="m-1") is False
    assert await record.read() == fields
    assert await record.show_marked_wrong("t-other", "alice") is False  # another analysis's
    assert await record.show_marked_wrong("t-1", "alice") is True
    after = await record.read()
    assert int(after["seq"]) == int(fields["seq"]) + 1 and after["delivered"] == "0"
    assert await redis_client.sismember(KEYS.undelivered_cards, "s-stale")
    assert await record.show_marked_wrong("t-1", "bob") is False  # marked already
    assert ProgressCard.from_json((await record.read())["state"]).marked_wrong_by == "alice"


async def test_a_card_being_sent_or_a_later_analysis_card_is_never_overwritten(
    redis_client: aioredis.Redis,
) -> None:
    sending = await recorded(redis_client, "s-sending", answered_card())
    await redis_client.hset(KEYS.card("s-sending"), "delivered", "sending:1")
    assert await sending.show_marked_wrong("t-1", "alice") is False

    record = await recorded(redis_client, "s-later", answered_card())
    await record.attach(1, CardTarget(Platform.CONSOLE, "ops", "th"))  # the next analysis
    await record.set_message("m-2")
    later = ProgressCard(title="next?", turn_id="t-2", thread="th")
    assert await record.claim(1, later) > 0
    fields = await record.read()
    assert await record.show_marked_wrong("t-1", "alice") is False
    assert await record.read() == fields
    live = ProgressCard.from_json(fields["state"])
    assert not live.is_final and live.turn_id == "t-2"
