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

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from agent_core import SettleRecord
from bot.actor import ActorOptions
from bot.adapters.slack import SlackIdentity
from bot.card_publisher import PublisherOptions
from bot.events import session_id_for
from bot.ingress import create_app
from bot.keys import BotKeys
from bot.settings import Settings
from bot.settle import Book
from bot.worker import Worker, open_worker
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.fakes.slack_api import FakeSlackAPI

SECRET = "e2e-signing-secret-000000000000000"
KEYS = BotKeys()


@pytest.fixture
def settings(redis_server, fake_llm, slack_api, slow_service) -> Settings:
    return Settings(
        _env_file=None,
        REDIS_URL=redis_server,
        OPENAI_BASE_URL=fake_llm.base_url,
        OPENAI_API_KEY="test",
        SLACK_SIGNING_SECRET=SECRET,
        SLACK_BOT_TOKEN=slack_api.token,
        SLACK_API_URL=slack_api.base_url,
        CHATOPS_HTTP_ALLOWLIST=f"127.0.0.1:{slow_service.port}",
        CHATOPS_LEASE_TTL_S=5,
    )


class Bot:
    """The ingress (over ASGI) and one worker (started on demand) sharing one Redis."""

    def __init__(self, settings: Settings, redis: aioredis.Redis) -> None:
        self.settings, self.redis = settings, redis
        identity = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)
        self.app = create_app(settings, redis=redis, slack=identity)
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://bot"
        )
        self.worker: Worker | None = None
        self._worker_task: asyncio.Task[None] | None = None
        self._worker_cm: Any = None

    async def post(self, payload: dict[str, Any]) -> httpx.Response:
        body, headers = sg.slack_request(payload, secret=SECRET)
        response = await self.http.post("/slack/events", content=body, headers=headers)
        assert response.status_code == 200, response.text
        return response

    async def press(self, payload: dict[str, Any]) -> httpx.Response:
        body, headers = sg.slack_interactivity(payload, secret=SECRET)
        response = await self.http.post("/slack/events", content=body, headers=headers)
        assert response.status_code == 200, response.text
        return response

    async def start_worker(self) -> Worker:
        options = ActorOptions(publisher=PublisherOptions(min_interval_s=0.05))
        self._worker_cm = open_worker(self.settings, redis=self.redis, actor_options=options)
        self.worker = await self._worker_cm.__aenter__()
        self._worker_task = asyncio.get_running_loop().create_task(self.worker.run())
        return self.worker

    async def close(self) -> None:
        if self.worker is not None and self._worker_task is not None:
            self.worker.stop()
            await asyncio.wait_for(self._worker_task, 15)
            await self._worker_cm.__aexit__(None, None, None)
        await self.http.aclose()


@pytest.fixture
async def bot(settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Bot]:
    lifespan = None
    running = Bot(settings, redis_client)
    lifespan = running.app.router.lifespan_context(running.app)
    await lifespan.__aenter__()
    yield running
    await running.close()
    await lifespan.__aexit__(None, None, None)


def probe(service: SlowService, name: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": service.url(f"/hold/{name}")})


def session_of(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


def cards_in(slack_api: FakeSlackAPI, thread: str) -> list[Any]:
    return [
        c
        for c in slack_api.calls_to("chat.postMessage")
        if c.params.get("thread_ts") == thread and c.status == 200
    ]


def blocks_of(call: Any) -> list[dict[str, Any]]:
    blocks = call.params.get("blocks")
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks or [])


def stop_buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        element
        for block in blocks
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if "Stop" in element.get("text", {}).get("text", "")
    ]


def card_text(call: Any) -> str:
    return json.dumps(blocks_of(call), ensure_ascii=False) + str(call.params.get("text", ""))


async def last_card(slack_api: FakeSlackAPI, thread: str) -> Any:
    """The last successful post or update of the thread's card."""
    (posted,) = cards_in(slack_api, thread)
    ts = posted.response["ts"]
    updates = [
        c for c in slack_api.calls_to("chat.update") if c.params.get("ts") == ts and c.status == 200
    ]
    return updates[-1] if updates else posted


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
    assert stop_buttons(blocks_of(cards_in(slack_api, thread)[0]))
    final = await last_card(slack_api, thread)
    assert not stop_buttons(blocks_of(final))
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
    (button,) = stop_buttons(blocks_of(posted))
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
    final = await last_card(slack_api, thread)
    assert not stop_buttons(blocks_of(final))
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
    final = await last_card(slack_api, thread)
    assert not stop_buttons(blocks_of(final))
