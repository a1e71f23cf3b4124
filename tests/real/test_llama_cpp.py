"""Whole analyses against a real OpenAI-compatible server: llama-cpp-python with SmolLM2-135M.

Why this way: the fakes answer what we believe providers answer; this server is a third party's
code, with its own quirks (every tool-call delta repeats the call's id and name, no usage chunk,
`: ping` comments, a call forced only by naming a function, a 500 for a null `content`). So the
bot runs as in production: the real ingress app (signed Slack requests over ASGI), a real
worker whose model is built from settings (bot/worker/model.py) with `OPENAI_BASE_URL`
pointing at the server, the fake Slack Web API, real Redis. Only a recording proxy sits between
the worker and the server, to count requests, hold one stream open for the stop and save the
exchanges.

The model is tiny: what it says is not asserted, only what the bot makes of it (a call of an
offered tool, answered; an answer on the card; a stop that ends the stream and sends nothing
more). Run with `make test-real`; without a server these tests are deselected.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from agent_core import SettleRecord
from bot.events import session_id_for
from bot.keys import BotKeys
from bot.state.settle import Book
from tests.fakes import signing as sg
from tests.inprocess_bot import open_bot
from tests.real.recording_proxy import RecordingProxy
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.timeout(900)]

KEYS = BotKeys()
HELD_TIMEOUT_S = 300.0
CLOSED_PORT = 9
"""The discard port: nothing listens on it here, so a connection to it is refused."""


def session_of(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


async def settles(redis: aioredis.Redis, session: str) -> list[SettleRecord]:
    entries: Any = await redis.xrange(KEYS.book(Book.SETTLES))
    records = [SettleRecord.model_validate_json(f[b"record"]) for _, f in entries]
    return [r for r in records if r.session_id == session]


PROMETHEUS_TOOL = {
    "type": "function",
    "function": {
        "name": "prometheus_query",
        "description": "Run a PromQL query",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


def _chunks(sse: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in sse.split(b"\n") if line.startswith(b"data: {")]


def text_deltas(sse: bytes) -> list[str]:
    """Every text delta of a recorded stream."""
    return [
        c["delta"]["content"]
        for chunk in _chunks(sse)
        for c in chunk["choices"]
        if c["delta"].get("content")
    ]


def tool_calls_of(sse: bytes) -> list[dict[str, Any]]:
    """Every tool-call delta of a recorded stream (the `data:` lines' JSON)."""
    return [
        call
        for chunk in _chunks(sse)
        for c in chunk["choices"]
        for call in c["delta"].get("tool_calls") or ()
    ]


async def test_a_mention_is_answered_through_the_bot(
    real_settings, redis_client, llama_proxy: RecordingProxy, slack_api
) -> None:
    # tool_choice omitted: llama-cpp-python then answers in text and ignores the tools offered.
    settings = real_settings(CHATOPS_TOOL_CHOICE="omit", CHATOPS_MODEL_STREAMING="on")
    llama_proxy.record_as = ["text-answer"]
    thread = sg.slack_ts()
    async with open_bot(settings, redis_client) as bot:
        worker = await bot.start_worker()
        await bot.post(sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> hello", ts=thread))
        await worker.wait_finished(1)

    (only,) = llama_proxy.completions()
    sent = only.request_json()
    assert (sent["model"], sent["stream"]) == ("smollm2", True)
    assert sent["tools"] and "tool_choice" not in sent
    assert (only.status, only.complete, only.disconnected) == (200, True, False)
    streamed = "".join(text_deltas(bytes(only.response)))
    assert streamed.strip()
    (record,) = await settles(redis_client, session_of(thread))
    assert (record.reason.value, record.model_requests) == ("completed", 1)
    final = final_card(slack_api, thread)
    assert not stop_buttons(final)
    assert "Answered" in card_text(final)


async def test_a_mention_is_analysed_with_a_forced_tool_call_and_answered(
    real_settings, redis_client, llama_proxy: RecordingProxy, slack_api
) -> None:
    # The server forces a call only when tool_choice names a function ("required" fails its
    # assert tool_choice == "auto"): the first request names http_get, and with one step the
    # wrap-up (no tools offered, so no tool_choice) gives the answer.
    # The call goes to a closed port (the only one allowed): whatever URL the tiny model writes
    # (it has written https:// to a plain-HTTP service), the tool answers a clear error.
    settings = real_settings(
        CHATOPS_TOOL_CHOICE="function:http_get",
        CHATOPS_MAX_STEPS=1,
        CHATOPS_HTTP_ALLOWLIST=f"127.0.0.1:{CLOSED_PORT}",
    )
    llama_proxy.record_as = ["forced-analysis-call", "forced-analysis-wrap-up"]
    thread = sg.slack_ts()
    url = f"http://127.0.0.1:{CLOSED_PORT}/health"
    text = f"<@{sg.SLACK_BOT_USER_ID}> is {url} up? Fetch it."
    async with open_bot(settings, redis_client) as bot:
        worker = await bot.start_worker()
        await bot.post(sg.slack_app_mention(text=text, ts=thread))
        await worker.wait_finished(1)

    (record,) = await settles(redis_client, session_of(thread))
    assert record.reason.value == "completed", record.error
    assert record.model_requests == 2
    first, second = llama_proxy.completions()  # the request with tools, then the wrap-up
    sent = first.request_json()
    assert sent["stream"] is True
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "http_get"}}
    assert "http_get" in {t["function"]["name"] for t in sent["tools"]}
    assert (first.status, first.complete) == (200, True)
    deltas = tool_calls_of(bytes(first.response))
    assert deltas and {d["function"]["name"] for d in deltas} == {"http_get"}
    wrap_up = second.request_json()
    assert "tools" not in wrap_up and "tool_choice" not in wrap_up
    (assistant,) = [m for m in wrap_up["messages"] if m.get("tool_calls")]
    (call,) = assistant["tool_calls"]
    assert (call["id"], call["function"]["name"]) == (deltas[0]["id"], "http_get")
    (answered,) = [m for m in wrap_up["messages"] if m["role"] == "tool"]
    assert answered["tool_call_id"] == call["id"]
    words = re.findall(r"[A-Za-z]{3,}", "".join(text_deltas(bytes(second.response))))
    assert words  # the wrap-up streamed an answer in text
    final = final_card(slack_api, thread)
    assert not stop_buttons(final)
    assert "Answered" in card_text(final)
    assert words[0] in card_text(final)  # a plain word: the card's escaping cannot change it


async def test_the_server_streams_a_call_forced_by_name(llama_proxy: RecordingProxy) -> None:
    """The shape the replay tests assemble: every delta repeats the call's id and name."""
    llama_proxy.record_as = ["forced-by-name"]
    request = {
        "model": "smollm2",
        "stream": True,
        "max_tokens": 60,
        "messages": [
            {"role": "system", "content": "You are an SRE bot. Use tools."},
            {"role": "user", "content": "Query Prometheus for the metric up."},
        ],
        "tools": [PROMETHEUS_TOOL],
        "tool_choice": {"type": "function", "function": {"name": "prometheus_query"}},
    }
    async with httpx.AsyncClient(timeout=HELD_TIMEOUT_S) as client:
        response = await client.post(f"{llama_proxy.base_url}/chat/completions", json=request)
    assert response.status_code == 200
    deltas = tool_calls_of(response.content)
    assert len(deltas) > 1
    assert {(d["index"], d["id"], d["function"]["name"]) for d in deltas} == {
        (0, deltas[0]["id"], "prometheus_query")
    }
    arguments = json.loads("".join(d["function"]["arguments"] for d in deltas))
    assert isinstance(arguments, dict)


async def test_a_stop_mid_stream_ends_the_stream_and_sends_nothing_more(
    real_settings, redis_client, llama_proxy: RecordingProxy, slack_api
) -> None:
    settings = real_settings(CHATOPS_TOOL_CHOICE="omit", CHATOPS_MODEL_STREAMING="on")
    llama_proxy.record_as = ["stop-mid-stream"]
    thread = sg.slack_ts()
    llama_proxy.hold_after_first_chunk = True
    async with open_bot(settings, redis_client) as bot:
        worker = await bot.start_worker()
        await bot.post(sg.slack_app_mention(ts=thread))
        assert await asyncio.to_thread(llama_proxy.first_chunk.wait, HELD_TIMEOUT_S)
        await slack_api.wait_for_calls(1, "chat.postMessage")  # the card, with its Stop button
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
        await worker.wait_finished(1)
        llama_proxy.release()

    (only,) = llama_proxy.completions()  # no request after the stop
    assert only.disconnected and not only.complete  # the client closed the stream mid-way
    (record,) = await settles(redis_client, session_of(thread))
    assert record.reason.value == "stopped" and record.model_requests == 1
    final = final_card(slack_api, thread)
    assert not stop_buttons(final)
    assert "Stopped" in card_text(final)
