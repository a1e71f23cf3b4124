"""The console platform end to end: `POST /console/events` in, the cards stream out.

Why this way: the console is a third platform adapter, not a shortcut, so it is tested the way
Slack's turn is in `test_turn_e2e.py`: requests go through the real ingress app over ASGI with
the bearer token, a real in-process worker runs the analysis against the fake OpenAI provider
and a held tool (`slow_service`), and the assertions read what a console would read, the
`chatops:console:cards` stream in the real Redis. The bot here has only the console configured
(`bot_settings` is overridden), which is also the proof that such a worker is valid. The
renderer has pure tests of its own at the end.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from bot.errors import BotConfigError
from bot.events import Platform
from bot.keys import BotKeys
from bot.publishing.platform import CardGone, CardRef, CardTarget
from bot.settings import Settings
from bot.worker.clients import platforms_from
from bot.worker.process import Worker
from cards._console import STOP_HINT, render_console
from cards._model import (
    CardStatus,
    CardStep,
    Intervention,
    InterventionKind,
    ProgressCard,
    StepState,
)
from tests.fakes import openai_provider as fp
from tests.fakes.service import SlowService
from tests.inprocess_bot import Bot, open_bot

KEYS = BotKeys()
TOKEN = "console-test-token-0000"
CHANNEL = "ops"


@pytest.fixture
def bot_settings(redis_server, fake_llm, slow_service) -> Settings:
    """Only the console: no Slack or Feishu settings at all."""
    return Settings(
        _env_file=None,
        REDIS_URL=redis_server,
        OPENAI_BASE_URL=fake_llm.base_url,
        OPENAI_API_KEY="test",
        CHATOPS_CONSOLE_TOKEN=TOKEN,
        CHATOPS_HTTP_ALLOWLIST=f"127.0.0.1:{slow_service.port}",
        CHATOPS_LEASE_TTL_S=5,
    )


def probe(service: SlowService, name: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": service.url(f"/hold/{name}")})


def message(
    thread: str, text: str, *, mention: bool = False, user: str = "alice"
) -> dict[str, Any]:
    return {
        "type": "message",
        "channel": CHANNEL,
        "thread": thread,
        "message_id": thread if mention else uuid.uuid4().hex,
        "user": user,
        "text": text,
        "mention": mention,
    }


def stop(thread: str, turn_id: str, *, user: str = "bob") -> dict[str, Any]:
    return {
        "type": "action",
        "channel": CHANNEL,
        "thread": thread,
        "user": user,
        "action": "stop",
        "value": turn_id,
    }


async def accepted(bot: Bot, payload: dict[str, Any]) -> None:
    response = await bot.console(payload)
    assert response.status_code == 200, response.text


async def held_analysis(
    bot: Bot, fake_llm: fp.FakeProvider, service: SlowService, holds: tuple[str, ...], answer: str
) -> tuple[str, Worker]:
    """Start an analysis whose first batch calls (and is held in) each of `holds`."""
    fake_llm.script(
        fp.ToolCallsReply([probe(service, name) for name in holds]), fp.TextReply(answer)
    )
    thread = uuid.uuid4().hex
    worker = await bot.start_worker()
    await accepted(bot, message(thread, "why is checkout slow?", mention=True))
    await service.wait_for_hits(len(holds))
    return thread, worker


async def entries(redis: aioredis.Redis, thread: str) -> list[dict[str, str]]:
    """The cards stream's entries of `thread`, in order, decoded."""
    raw: Any = await redis.xrange(KEYS.console_cards)
    decoded = [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in raw]
    return [entry for entry in decoded if entry["thread"] == thread]


async def test_a_mention_is_analysed_and_its_card_ends_answered(
    bot, fake_llm, slow_service, redis_client
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, "db")]),
        fp.TextReply("The database is fine; the gateway drops connections."),
    )
    thread = uuid.uuid4().hex
    worker = await bot.start_worker()
    await accepted(bot, message(thread, "why is checkout slow?", mention=True))
    await slow_service.wait_for_hits(1)
    slow_service.release("db")
    await worker.wait_finished(1)

    cards = await entries(redis_client, thread)
    assert cards[0]["op"] == "post" and {e["op"] for e in cards[1:]} == {"update"}
    assert {e["message_id"] for e in cards} == {cards[0]["message_id"]}
    assert {e["channel"] for e in cards} == {CHANNEL}
    first = ProgressCard.from_json(cards[0]["card"])
    assert first.title == "why is checkout slow?" and not first.is_final
    assert STOP_HINT in cards[0]["text"]
    final = ProgressCard.from_json(cards[-1]["card"])
    assert final.status is CardStatus.ANSWERED
    assert [(s.tool, s.state) for s in final.steps] == [("http_get", StepState.DONE)]
    assert "Answered" in cards[-1]["text"] and "gateway drops" in cards[-1]["text"]
    assert STOP_HINT not in cards[-1]["text"]
    assert cards[-1]["text"] == render_console(final)
    assert fake_llm.requests[0].messages[1]["content"] == "[alice] why is checkout slow?"


async def test_a_reply_in_the_thread_steers_the_analysis(
    bot, fake_llm, slow_service, redis_client
) -> None:
    thread, worker = await held_analysis(
        bot, fake_llm, slow_service, ("db", "cache"), "The gateway is dropping connections."
    )
    await accepted(bot, message(thread, "it's the gateway, not the db", user="carol"))
    await worker.wait_finished(1)

    sent = fake_llm.requests[-1].messages
    assert "carol" in sent[-1]["content"] and "gateway" in sent[-1]["content"]
    final = (await entries(redis_client, thread))[-1]
    card = ProgressCard.from_json(final["card"])
    assert card.status is CardStatus.ANSWERED and card.redirected
    assert "Answered (redirected by carol)" in final["text"]
    assert "carol: it's the gateway, not the db" in final["text"]
    assert STOP_HINT not in final["text"]


async def test_the_stop_action_stops_the_analysis(
    bot, fake_llm, slow_service, redis_client
) -> None:
    thread, worker = await held_analysis(bot, fake_llm, slow_service, ("a", "b"), "never sent")
    posted = ProgressCard.from_json((await entries(redis_client, thread))[0]["card"])
    await accepted(bot, stop(thread, posted.turn_id))
    await worker.wait_finished(1)

    assert len(fake_llm.requests) == 1  # no model request after the stop
    assert len(slow_service.hits) == 2  # and no tool call
    final = (await entries(redis_client, thread))[-1]
    assert ProgressCard.from_json(final["card"]).status is CardStatus.STOPPED
    assert "Stopped by bob" in final["text"] and STOP_HINT not in final["text"]


async def test_a_wrong_or_missing_token_is_401_and_starts_nothing(bot, redis_client) -> None:
    payload = message(uuid.uuid4().hex, "hello", mention=True)
    assert (await bot.console(payload, token="wrong")).status_code == 401
    response = await bot.http.post("/console/events", json=payload)
    assert response.status_code == 401
    basic = {"authorization": f"Basic {TOKEN}"}
    response = await bot.http.post("/console/events", json=payload, headers=basic)
    assert response.status_code == 401
    assert await redis_client.xlen(KEYS.turns_stream) == 0


@pytest.mark.parametrize(
    ("body", "names"),
    [
        (b"{not json", "body"),
        (b"[]", "body"),
        (b'{"type": "message"}', "channel"),
        (b'{"type": "shout", "text": "hi"}', "type"),
        (
            b'{"type": "action", "channel": "c", "thread": "t", "user": "u",'
            b' "action": "restart", "value": "turn"}',
            "action",
        ),
        (  # X10: a console user never names another platform's person
            b'{"type": "message", "channel": "c", "thread": "t", "message_id": "m",'
            b' "user": "slack:U0ADMIN01", "text": "hi"}',
            "user",
        ),
        (
            b'{"type": "action", "channel": "c", "thread": "t", "user": "console:alice",'
            b' "action": "stop", "value": "turn"}',
            "user",
        ),
        (
            b'{"type": "message", "channel": "c", "thread": "t", "message_id": "m",'
            b' "user": "u", "text": "hi", "mention": "yes please"}',
            "mention",
        ),
        (
            b'{"type": "message", "channel": "", "thread": "t", "message_id": "m",'
            b' "user": "u", "text": "hi"}',
            "channel",
        ),
        (
            b'{"type": "message", "channel": "c", "thread": "t", "message_id": "m",'
            b' "user": "u", "text": "hi", "extra": 1}',
            "extra",
        ),
        (b"\xff\xfe", "body"),
    ],
)
async def test_malformed_bodies_are_400_with_the_field_named(
    bot, redis_client, body: bytes, names: str
) -> None:
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    response = await bot.http.post("/console/events", content=body, headers=headers)
    assert response.status_code == 400, response.text
    answer = response.json()
    assert answer["error"] == "malformed request" and names in answer["detail"]
    assert await redis_client.xlen(KEYS.turns_stream) == 0


async def test_without_the_token_setting_the_route_is_404(bot_settings, redis_client) -> None:
    unset = bot_settings.model_copy(update={"console_token": None})
    async with open_bot(unset, redis_client) as running:
        response = await running.console(message("t", "hi", mention=True), token=TOKEN)
    assert response.status_code == 404


async def test_a_retried_message_is_one_event(bot, redis_client) -> None:
    payload = message(uuid.uuid4().hex, "why?", mention=True)
    await accepted(bot, payload)
    await accepted(bot, payload)
    assert await redis_client.xlen(KEYS.turns_stream) == 1


async def test_console_cards_refuse_an_update_of_an_unknown_card(
    bot_settings, redis_client
) -> None:
    platforms = platforms_from(bot_settings, redis_client)
    assert set(platforms) == {Platform.CONSOLE}
    console = platforms[Platform.CONSOLE]
    card = ProgressCard(title="t", turn_id="turn-1", thread="th")
    ref = await console.post_card(
        CardTarget(Platform.CONSOLE, CHANNEL, "th"), card, key=uuid.uuid4().hex
    )
    await console.update_card(ref, card.ended(CardStatus.ANSWERED, answer="ok"))
    with pytest.raises(CardGone):
        await console.update_card(CardRef(Platform.CONSOLE, CHANNEL, "never-posted"), card)
    assert [e["op"] for e in await entries(redis_client, "th")] == ["post", "update"]


def test_settings_without_any_platform_are_refused() -> None:
    nothing = Settings(_env_file=None, REDIS_URL="redis://127.0.0.1:9/0")
    with pytest.raises(BotConfigError, match="no platform"):
        platforms_from(nothing)
    console_only = nothing.model_copy(update={"console_token": SecretStr(TOKEN)})
    with pytest.raises(BotConfigError, match="needs Redis"):
        platforms_from(console_only)


# The renderer, pure.

LIVE = ProgressCard(
    title="Why is checkout slow?",
    turn_id="turn-1",
    steps=(
        CardStep(
            tool="http_get", args="url=http://db/health", state=StepState.DONE, duration_s=0.4
        ),
        CardStep(tool="http_get", args="url=http://cache/health"),
    ),
    interventions=(
        Intervention(kind=InterventionKind.STEER, by="carol", text="look at the gateway"),
    ),
    elapsed_s=65,
)


def test_a_live_card_shows_its_steps_and_the_stop_hint() -> None:
    text = render_console(LIVE)
    lines = text.split("\n")
    assert lines[0].startswith("== Why is checkout slow? ==") and len(lines[0]) == 80
    assert lines[1] == "🔎 Investigating… · 1m 05s"
    assert "  1. ✅ `http_get` url=http://db/health · 0.4s" in lines
    assert "  2. ⏳ `http_get` url=http://cache/health · running" in lines
    assert "  ↪ carol: look at the gateway" in lines
    assert lines[-1] == STOP_HINT and text.count(STOP_HINT) == 1


def test_a_final_card_has_the_answer_and_no_stop_hint() -> None:
    text = render_console(
        LIVE.ended(CardStatus.ANSWERED, answer="It is the gateway.\n\nRestart it.")
    )
    assert STOP_HINT not in text
    assert "✅ Answered (redirected by carol) · 1m 05s" in text
    assert "⏹️ `http_get` url=http://cache/health · interrupted" in text
    assert "-" * 80 + "\nIt is the gateway.\n\nRestart it.\n" + "-" * 80 in text
    stopped = render_console(
        LIVE.ended(
            CardStatus.STOPPED, interventions=(Intervention(kind=InterventionKind.STOP, by="bob"),)
        )
    )
    assert "Stopped by bob" in stopped and STOP_HINT not in stopped
    failed = render_console(LIVE.ended(CardStatus.FAILED, error="model unavailable"))
    assert "Failed: model unavailable" in failed
    assert "Continuing on another worker…" in render_console(LIVE.evolve(handed_over=True))


@pytest.mark.parametrize("width", [10, 40, 80, 120])
def test_no_line_is_wider_than_asked_and_no_control_character_survives(width: int) -> None:
    card = LIVE.evolve(
        title="\x1b[31mred\x1b[0m " + "long title " * 30,
        steps=(CardStep(tool="http_get", args="url=" + "x" * 500),),
        interventions=(Intervention(kind=InterventionKind.STEER, by="eve\x07", text="y " * 400),),
    ).ended(CardStatus.ANSWERED, answer="\x1b]0;pwned\x07" + "word " * 500)
    text = render_console(card, width=width)
    assert max(len(line) for line in text.split("\n")) <= max(width, 30)
    assert not any(ch in text for ch in "\x1b\x07")


def test_the_token_is_read_from_the_environment_and_empty_is_off(monkeypatch) -> None:
    monkeypatch.setenv("CHATOPS_CONSOLE_TOKEN", "from-env")
    token = Settings(_env_file=None).console_token
    assert token is not None and token.get_secret_value() == "from-env"
    assert "from-env" not in repr(Settings(_env_file=None))
    monkeypatch.setenv("CHATOPS_CONSOLE_TOKEN", "")
    assert Settings(_env_file=None).console_token is None
