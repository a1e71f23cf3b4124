"""Tests for the fake OpenAI provider, driven by the real ``openai.AsyncOpenAI`` client.

Why this way: the fake is only worth something if the real SDK accepts its wire format and
reacts to its faults the way it reacts to the real API's. So nothing is mocked. The SDK talks
HTTP to the uvicorn server on a loopback port, and we check what the SDK assembles (streamed
deltas by index, usage, errors and their ``param``), what it does (retries a 429 after
``retry-after``, gives up on the exhausted-script 500, closes a stalled stream), and what the
fake recorded. The history rules are also checked directly on the pure validator for the
cases that are awkward to build through the SDK.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from agent_core import estimate_tokens
from tests.fakes.openai_provider import (
    DUPLICATE_CALL_ID,
    ORPHAN_TOOL_MESSAGE,
    UNANSWERED_CALLS,
    ErrorReply,
    FakeProvider,
    Reply,
    TextReply,
    ToolCall,
    ToolCallsReply,
    check_history,
    count_prompt_tokens,
)
from tests.fakes.openai_provider import _fake_llm_server as _server_fixture  # noqa: F401
from tests.fakes.openai_provider import fake_llm as _fake_llm_fixture  # noqa: F401

USER = {"role": "user", "content": "Why is checkout erroring?"}
ANTHROPIC_UNANSWERED = (
    "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
    "toolu_01. Each `tool_use` block must have a corresponding `tool_result` block in the "
    "next message."
)


@asynccontextmanager
async def sdk(provider: FakeProvider, max_retries: int = 0) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=provider.base_url, api_key="test", max_retries=max_retries
    ) as client:
        yield client


def assistant_calls(*ids: str) -> dict[str, Any]:
    calls = [
        {"id": i, "type": "function", "function": {"name": "get_logs", "arguments": "{}"}}
        for i in ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def tool_result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


async def collect(
    client: openai.AsyncOpenAI, messages: list[dict[str, Any]] | None = None, **kwargs: Any
) -> list[ChatCompletionChunk]:
    stream = await client.chat.completions.create(
        model="gpt-test", messages=messages or [USER], stream=True, **kwargs
    )
    return [chunk async for chunk in stream]


async def test_streamed_text_assembles_from_several_deltas(fake_llm: FakeProvider) -> None:
    fake_llm.script(TextReply("Checkout pods are crash-looping since 10:02."))
    async with sdk(fake_llm) as client:
        chunks = await collect(client)

    deltas = [c.choices[0].delta for c in chunks]
    assert deltas[0].role == "assistant"
    assert (
        "".join(d.content or "" for d in deltas) == "Checkout pods are crash-looping since 10:02."
    )
    assert sum(1 for d in deltas if d.content) > 3
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[0].model == "gpt-test" and chunks[0].system_fingerprint


async def test_streamed_parallel_tool_calls_assemble_by_index(fake_llm: FakeProvider) -> None:
    fake_llm.script(
        ToolCallsReply(
            [
                ToolCall("get_logs", {"service": "checkout", "since": "10m"}),
                ToolCall("get_metrics", {"query": "rate(http_errors[5m])"}, id="call_explicit"),
            ]
        )
    )
    async with sdk(fake_llm) as client:
        chunks = await collect(client, tools=[])

    calls: dict[int, dict[str, Any]] = {}
    fragments: dict[int, int] = {}
    for chunk in chunks:
        for tc in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
            assert tc.function is not None
            call["name"] += tc.function.name or ""
            call["arguments"] += tc.function.arguments or ""
            if tc.id is None:
                assert tc.function.name is None  # fragments carry no id/name
                fragments[tc.index] = fragments.get(tc.index, 0) + 1
    assert calls[0]["name"] == "get_logs"
    assert calls[0]["arguments"] == '{"service":"checkout","since":"10m"}'
    assert calls[0]["id"].startswith("call_") and len(calls[0]["id"]) == 5 + 24
    assert calls[1] == {
        "id": "call_explicit",
        "name": "get_metrics",
        "arguments": '{"query":"rate(http_errors[5m])"}',
    }
    assert fragments[0] > 1 and fragments[1] > 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_text_before_calls_and_raw_arguments_pass_through(fake_llm: FakeProvider) -> None:
    fake_llm.script(
        ToolCallsReply(
            [ToolCall("a", '{"broken": ', id="call_0"), ToolCall("b", id="call_0")],
            text="Let me look.",
        )
    )
    async with sdk(fake_llm) as client:
        chunks = await collect(client)

    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    args = [
        tc.function.arguments
        for c in chunks
        for tc in c.choices[0].delta.tool_calls or []
        if tc.function and tc.function.arguments
    ]
    ids = [tc.id for c in chunks for tc in c.choices[0].delta.tool_calls or [] if tc.id]
    assert content == "Let me look."
    assert "".join(args) == '{"broken": {}'
    assert ids == ["call_0", "call_0"]


async def test_text_after_calls_is_streamed_last(fake_llm: FakeProvider) -> None:
    fake_llm.script(ToolCallsReply([ToolCall("get_logs")], text_after="Done calling."))
    async with sdk(fake_llm) as client:
        chunks = await collect(client)

    kinds = [
        "call" if c.choices[0].delta.tool_calls else "text"
        for c in chunks
        if c.choices[0].delta.tool_calls or c.choices[0].delta.content
    ]
    assert kinds[0] == "call" and kinds[-1] == "text"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Done calling."


async def test_usage_chunk_follows_with_include_usage(fake_llm: FakeProvider) -> None:
    fake_llm.script(TextReply("ok then", prompt_tokens=120, completion_tokens=7))
    async with sdk(fake_llm) as client:
        chunks = await collect(client, stream_options={"include_usage": True})

    *body, last = chunks
    assert all(c.usage is None for c in body)
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (120, 7)
    assert last.usage.total_tokens == 127
    assert body[-1].choices[0].finish_reason == "stop"


async def test_non_streaming_completion(fake_llm: FakeProvider) -> None:
    fake_llm.script(
        TextReply("All green."),
        ToolCallsReply([ToolCall("get_logs", {"service": "api"})], text="Checking."),
    )
    async with sdk(fake_llm) as client:
        text = await client.chat.completions.create(model="m", messages=[USER])
        calls = await client.chat.completions.create(model="m", messages=[USER])

    assert text.object == "chat.completion"
    assert text.choices[0].message.content == "All green."
    assert text.choices[0].finish_reason == "stop"
    assert text.usage is not None and text.usage.total_tokens == 15
    message = calls.choices[0].message
    assert calls.choices[0].finish_reason == "tool_calls"
    assert message.content == "Checking."
    assert message.tool_calls is not None
    (call,) = message.tool_calls
    assert call.type == "function"
    assert (call.function.name, call.function.arguments) == ("get_logs", '{"service":"api"}')
    assert [r.stream for r in fake_llm.requests] == [False, False]


@pytest.mark.parametrize(
    ("messages", "expected", "param"),
    [
        pytest.param(
            [USER, assistant_calls("call_a", "call_b"), tool_result("call_a"), USER],
            UNANSWERED_CALLS.format(ids="call_b"),
            "messages.[3].role",
            id="unanswered",
        ),
        pytest.param(
            [USER, tool_result("call_x")],
            ORPHAN_TOOL_MESSAGE,
            "messages.[1].role",
            id="orphan",
        ),
        pytest.param(
            [USER, assistant_calls("call_a"), tool_result("call_a"), tool_result("call_a")],
            DUPLICATE_CALL_ID.format(id="call_a", first=2, second=3),
            "messages.[3].tool_call_id",
            id="duplicate",
        ),
    ],
)
async def test_broken_history_gets_openai_400(
    fake_llm: FakeProvider, messages: list[dict[str, Any]], expected: str, param: str
) -> None:
    fake_llm.script(TextReply("never served"))
    async with sdk(fake_llm, max_retries=2) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="m", messages=messages)

    assert expected in str(caught.value)
    assert caught.value.param == param
    assert caught.value.type == "invalid_request_error"
    assert [r.status for r in fake_llm.requests] == [400]  # a 400 is not retried by the SDK
    assert fake_llm.remaining == 1  # and it does not consume the script


def test_exact_openai_wording() -> None:
    unanswered = UNANSWERED_CALLS.format(ids="call_x")
    assert unanswered == (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        "call_x"
    )
    assert "a preceeding message with 'tool_calls'." in ORPHAN_TOOL_MESSAGE


@pytest.mark.parametrize(
    ("messages", "fragment"),
    [
        pytest.param(
            [USER, assistant_calls("c1"), USER, tool_result("c1")],
            "did not have response messages: c1",
            id="result-displaced-after-user",
        ),
        pytest.param(
            [USER, assistant_calls("c1"), tool_result("c1"), assistant_calls("c1")],
            "Duplicate value for 'tool_call_id' of 'c1', in messages[1] and messages[3]",
            id="id-reused-across-turns",
        ),
        pytest.param(
            [USER, assistant_calls("c1", "c1"), tool_result("c1")],
            "Duplicate value for 'tool_call_id' of 'c1'",
            id="id-repeated-in-one-message",
        ),
        pytest.param(
            [USER, assistant_calls(""), tool_result("")],
            "empty string",
            id="empty-id",
        ),
        pytest.param(
            [USER, assistant_calls("c1"), tool_result("c2")],
            "preceeding",
            id="answer-to-another-id",
        ),
        pytest.param(
            [USER, assistant_calls("c1"), tool_result("c1"), tool_result("c1")],
            "Duplicate value",
            id="answered-twice",
        ),
    ],
)
def test_history_rules(messages: list[dict[str, Any]], fragment: str) -> None:
    rejection = check_history(messages)
    assert rejection is not None
    assert fragment in rejection.message


async def test_valid_multi_turn_history_passes(fake_llm: FakeProvider) -> None:
    history = [
        {"role": "system", "content": "You are an SRE."},
        USER,
        assistant_calls("call_1", "call_2"),
        tool_result("call_2"),  # answer order within the block is free
        tool_result("call_1"),
        {"role": "assistant", "content": "Two pods restarted."},
        {"role": "user", "content": "And now?"},
        assistant_calls("call_3"),
        tool_result("call_3"),
    ]
    fake_llm.script(TextReply("Stable for 10 minutes."))
    async with sdk(fake_llm) as client:
        reply = await client.chat.completions.create(model="m", messages=history, tools=[])

    assert reply.choices[0].message.content == "Stable for 10 minutes."
    (request,) = fake_llm.requests
    assert request.messages == history and request.status == 200 and request.tools == []


async def test_scripted_400_mimics_a_stricter_provider(fake_llm: FakeProvider) -> None:
    fake_llm.script(ErrorReply(400, ANTHROPIC_UNANSWERED, param="messages"))
    async with sdk(fake_llm, max_retries=2) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await collect(client)

    assert "`tool_use` ids were found without `tool_result` blocks immediately after" in str(
        caught.value
    )
    assert caught.value.type == "invalid_request_error"
    assert [r.status for r in fake_llm.requests] == [400]


async def test_429_with_retry_after_is_retried_by_the_sdk(fake_llm: FakeProvider) -> None:
    fake_llm.script(ErrorReply(429, "Rate limit reached", retry_after="0.05"), TextReply("ok"))
    async with sdk(fake_llm, max_retries=1) as client:
        chunks = await collect(client)

    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "ok"
    first, second = fake_llm.requests
    assert (first.status, second.status) == (429, 200)
    assert second.headers["x-stainless-retry-count"] == "1"
    assert second.arrived_at - first.arrived_at >= 0.05


async def test_429_without_retries_surfaces_rate_limit_error(fake_llm: FakeProvider) -> None:
    fake_llm.script(ErrorReply(429, "Rate limit reached", retry_after="1"))
    async with sdk(fake_llm) as client:
        with pytest.raises(openai.RateLimitError) as caught:
            await collect(client)

    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "1"


async def test_client_closing_a_stalled_stream_counts_as_aborted(fake_llm: FakeProvider) -> None:
    fake_llm.script(TextReply("one two three four five", stall_after=2))
    async with sdk(fake_llm) as client:
        stream = await client.chat.completions.create(model="m", messages=[USER], stream=True)
        seen = [await anext(aiter(stream)), await anext(aiter(stream))]
        await stream.close()
        await fake_llm.wait_for_aborted_streams(1)

    assert [c.choices[0].delta.content for c in seen] == ["", "one"]
    assert fake_llm.aborted_streams == 1


async def test_released_stall_finishes_the_stream(fake_llm: FakeProvider) -> None:
    release = threading.Event()
    fake_llm.script(TextReply("held then done", stall_after=1, release=release))
    async with sdk(fake_llm) as client:
        stream = await client.chat.completions.create(model="m", messages=[USER], stream=True)
        first = await anext(aiter(stream))
        release.set()
        rest = [chunk async for chunk in stream]

    assert first.choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in rest) == "held then done"
    assert fake_llm.aborted_streams == 0


async def test_held_non_streamed_body_times_out_and_counts_as_aborted(
    fake_llm: FakeProvider,
) -> None:
    fake_llm.script(TextReply("too late", stall_after=0))
    async with sdk(fake_llm) as client:
        with pytest.raises(openai.APITimeoutError):
            await client.with_options(timeout=0.2).chat.completions.create(
                model="m", messages=[USER]
            )
        await fake_llm.wait_for_aborted_streams(1)

    assert [r.status for r in fake_llm.requests] == [200]


async def test_chunk_delay_spaces_the_stream(fake_llm: FakeProvider) -> None:
    fake_llm.script(TextReply("a b c", chunk_delay=0.02))
    async with sdk(fake_llm) as client:
        started = time.monotonic()
        chunks = await collect(client)
        elapsed = time.monotonic() - started

    assert len(chunks) == 5  # role, 3 words, finish
    assert elapsed >= 0.02 * 5  # 6 SSE events including [DONE] -> 5 gaps


async def test_exhausted_script_answers_500_once(fake_llm: FakeProvider) -> None:
    async with sdk(fake_llm, max_retries=2) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await collect(client)

    assert "script is exhausted" in str(caught.value)
    assert [r.status for r in fake_llm.requests] == [500]  # x-should-retry: false


async def test_a_responder_answers_each_request_from_its_own_messages(
    fake_llm: FakeProvider,
) -> None:
    seen: list[int] = []

    def respond(messages: list[dict[str, Any]]) -> Reply:
        seen.append(len(messages))
        if messages[-1]["role"] == "tool":
            return TextReply(f"answered {messages[-1]['tool_call_id']}")
        return ToolCallsReply([ToolCall("get_logs", id=f"call_{messages[0]['content']}")])

    fake_llm.respond_with(respond)
    fake_llm.script(TextReply("the script is not used while a responder is set"))
    async with sdk(fake_llm) as client:
        first = await client.chat.completions.create(model="m", messages=[USER])
        again = await client.chat.completions.create(model="m", messages=[USER])  # a repeat
        broken = [USER, assistant_calls("call_a"), USER]
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="m", messages=broken)
        history = [USER, assistant_calls("call_a"), tool_result("call_a")]
        chunks = await collect(client, history)

    assert first.choices[0].message.tool_calls is not None
    assert again.choices[0].message.tool_calls == first.choices[0].message.tool_calls
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "answered call_a"
    assert seen == [1, 1, 3]  # the broken history got its 400 without reaching the responder
    assert [r.status for r in fake_llm.requests] == [200, 200, 400, 200]
    assert fake_llm.remaining == 1


async def test_a_failing_responder_answers_500_without_retries(fake_llm: FakeProvider) -> None:
    def respond(messages: list[dict[str, Any]]) -> Reply:
        raise LookupError("no conversation matches")

    fake_llm.respond_with(respond)
    async with sdk(fake_llm, max_retries=2) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await collect(client)
        fake_llm.respond_with(None)  # back to the (empty) script
        with pytest.raises(openai.InternalServerError) as exhausted:
            await collect(client)

    assert "responder failed" in str(caught.value) and "no conversation matches" in str(
        caught.value
    )
    assert "script is exhausted" in str(exhausted.value)
    assert [r.status for r in fake_llm.requests] == [500, 500]


# --- The context window ----------------------------------------------------------------------


def long_user(chars: int) -> dict[str, Any]:
    return {"role": "user", "content": "x" * chars}


async def test_a_request_over_the_window_gets_openais_context_length_exceeded(
    fake_llm: FakeProvider,
) -> None:
    fake_llm.set_context_window(1_000)
    fake_llm.script(TextReply("never served"))
    messages = [long_user(4_000)]
    async with sdk(fake_llm, max_retries=2) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            await client.chat.completions.create(model="m", messages=messages)

    counted = count_prompt_tokens({"messages": messages})
    assert counted > 1_000
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "messages"
    assert caught.value.type == "invalid_request_error"
    assert caught.value.body == {
        "message": (
            "This model's maximum context length is 1000 tokens. However, your messages "
            f"resulted in {counted} tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    assert [(r.status, r.prompt_tokens) for r in fake_llm.requests] == [(400, counted)]
    assert fake_llm.remaining == 1  # not retried, and no reply consumed


async def test_a_request_within_the_window_reports_its_counted_size(
    fake_llm: FakeProvider,
) -> None:
    fake_llm.set_context_window(2_000)
    fake_llm.script(TextReply("fits", prompt_tokens=10))
    messages = [long_user(4_000)]
    async with sdk(fake_llm) as client:
        chunks = await collect(client, messages, stream_options={"include_usage": True})

    counted = count_prompt_tokens({"messages": messages})
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == counted  # what the fake counted, not the knob
    assert [(r.status, r.prompt_tokens) for r in fake_llm.requests] == [(200, counted)]


async def test_tools_count_and_reset_clears_the_window(fake_llm: FakeProvider) -> None:
    tool = {
        "type": "function",
        "function": {"name": "f", "description": "d" * 4_000, "parameters": {"type": "object"}},
    }
    fake_llm.set_context_window(1_000)
    async with sdk(fake_llm) as client:
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="m", messages=[USER], tools=[tool])
        fake_llm.reset()
        fake_llm.script(TextReply("no window"))
        await collect(client, [long_user(40_000)])
    assert [r.status for r in fake_llm.requests] == [200]


def test_the_fake_counts_tokens_its_own_way() -> None:
    """Not chatops's estimate: JSON framing and escapes count, at 3.3 bytes a token."""
    content = 'a "quoted" line\n' * 200
    counted = count_prompt_tokens({"messages": [{"role": "user", "content": content}]})
    assert counted == math.ceil(
        len(
            json.dumps(
                {"messages": [{"role": "user", "content": content}], "tools": []},
                separators=(",", ":"),
            ).encode()
        )
        / 3.3
    )
    assert counted > estimate_tokens(content) * 1.3
