"""Real servers' stream shapes, replayed through the openai SDK to `OpenAIChatModel`.

Why this way: each provider breaks a different assumption of OpenAI's own shape (llama-cpp-python
repeats the id and name in every delta, Ollama sends whole calls without an index and finishes
with `stop`, LiteLLM numbers parallel calls all 0, vLLM and llama-cpp differ on usage), and a
unit test of the assembler would only restate what we believe. The bytes in tests/data/streams/
(README there: which are captured, which written from the documented shape) go over real HTTP
from a loopback server to the real SDK, and the calls assembled must be exactly the calls sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import openai
import pytest
import redis.asyncio as aioredis

from agent_core import (
    AssistantMessage,
    Budget,
    Completed,
    ForcedTool,
    LoopLimits,
    ModelStreaming,
    ModelUnavailable,
    OpenAIChatModel,
    Runtime,
    SettleRecord,
    SystemMessage,
    Tool,
    ToolCall,
    ToolChoice,
    ToolContext,
    ToolMessage,
    Toolset,
    TurnRequest,
    UserMessage,
)
from agent_core._llm.convert import MAX_CALLS, ToolCallAssembler
from agent_core._tokens import estimate_tokens, message_tokens
from tests.fakes.replay_server import (
    STREAMS,
    Cut,
    Empty,
    Hold,
    Replay,
    ReplayServer,
    Whole,
)
from tests.fakes.replay_server import _replay_server_process as _replay_process_fixture  # noqa: F401
from tests.fakes.replay_server import replay_client as _replay_client_fixture  # noqa: F401
from tests.fakes.replay_server import replay_server as _replay_fixture  # noqa: F401

LLAMA_ID = "call__0_prometheus_query_cmpl-bf83fcec-043f-4ea7-8611-0daff7dc3ff2"
LLAMA_TEXT = "Dear Dr. Johnson,\n\nI hope this message finds you well. I\u2019m Dr."
HISTORY = (SystemMessage(content="You are an SRE bot."), UserMessage(content="Is the api up?"))


def tool(name: str) -> Tool:
    async def run(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "ok"

    return Tool(name=name, description=f"{name} tool", parameters={"type": "object"}, handler=run)


TOOLS = Toolset.of([tool(n) for n in ("http_get", "http_probe", "prometheus_query")])


@pytest.fixture
def client(replay_client: openai.AsyncOpenAI) -> openai.AsyncOpenAI:
    return replay_client


def call(id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=id, name=name, arguments=arguments)


SHAPES = {
    "llama-cpp-tools-forced.sse": (
        "",
        [call(LLAMA_ID, "prometheus_query", '{"query": "setMetric(" } ')],
        None,
    ),
    "openai-interleaved-calls.sse": (
        "",
        [
            call("call_Qx1", "http_get", '{"url": "http://a/x"}'),
            call("call_Qx2", "http_probe", '{"url": "https://b/"}'),
        ],
        (88, 30),
    ),
    "vllm-streamed-arguments.sse": (
        "",
        [
            call("chatcmpl-tool-4c1d", "http_get", '{"url": "http://api.internal/healthz"}'),
            call(
                "chatcmpl-tool-9a2b",
                "prometheus_query",
                '{"query": "rate(http_requests_total[5m])"}',
            ),
        ],
        (377, 54),
    ),
    "ollama-whole-calls.sse": (
        "",
        [
            call("call_wteop8bt", "http_get", '{"url":"http://api.internal/healthz"}'),
            call("call_rk2xye1l", "prometheus_query", '{"query":"up{job=\\"api\\"}"}'),
        ],
        (212, 41),
    ),
    "ollama-no-index-stop.sse": (
        "",
        [
            call("call_a1b2c3d4", "http_get", '{"url":"http://api.internal/a"}'),
            call("call_e5f6g7h8", "http_get", '{"url":"http://api.internal/b"}'),
        ],
        None,
    ),
    "litellm-ollama-index-zero.sse": (
        "",
        [
            call(
                "4d1f9c2e-6a0b-4f57-9d3e-1c2b3a4d5e6f",
                "http_get",
                '{"url": "http://api.internal/a"}',
            ),
            call(
                "8e7d6c5b-4a39-4281-b7f6-e5d4c3b2a190",
                "http_get",
                '{"url": "http://api.internal/b"}',
            ),
        ],
        (190, 38),
    ),
    "llama-cpp-text.sse": (LLAMA_TEXT, [], None),
    "llama-cpp-text-pings.sse": (LLAMA_TEXT, [], None),
}


@pytest.mark.parametrize("name", list(SHAPES))
async def test_each_servers_stream_assembles_exactly_the_calls_it_sent(
    replay_server: ReplayServer, client: openai.AsyncOpenAI, name: str
) -> None:
    text, calls, usage = SHAPES[name]
    replay_server.script(Replay.file(name))
    deltas: list[str] = []

    async def on_delta(piece: str) -> None:
        deltas.append(piece)

    response = await OpenAIChatModel(client, "m").respond(HISTORY, TOOLS, on_delta)
    assert response.message.content == text
    assert "".join(deltas) == text
    assert list(response.message.tool_calls) == calls
    if usage is None:  # the server reported none: estimated, and said so
        assert response.usage.estimated
        assert response.usage.completion_tokens == message_tokens(response.message)
    else:
        assert (response.usage.prompt_tokens, response.usage.completion_tokens) == usage
        assert not response.usage.estimated
    assert len(replay_server.bodies) == 1


async def test_an_estimated_prompt_counts_the_messages_and_the_tools(
    replay_server: ReplayServer, client: openai.AsyncOpenAI
) -> None:
    replay_server.script(Replay.file("llama-cpp-text.sse"), Replay.file("llama-cpp-text.sse"))
    model = OpenAIChatModel(client, "m")
    with_tools = await model.respond(HISTORY, TOOLS)
    without = await model.respond(HISTORY, Toolset())
    messages = sum(message_tokens(m) for m in HISTORY)
    assert without.usage.prompt_tokens == messages
    sent = replay_server.bodies[0]["tools"]  # as sent: compact, UTF-8
    tools = estimate_tokens(json.dumps(sent, separators=(",", ":"), ensure_ascii=False))
    assert with_tools.usage.prompt_tokens == messages + tools


async def test_the_no_usage_warning_is_logged_once(
    replay_server: ReplayServer, client: openai.AsyncOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    replay_server.script(*[Replay.file("llama-cpp-text.sse")] * 3)
    model = OpenAIChatModel(client, "m")
    for _ in range(3):
        await model.respond(HISTORY, Toolset())
    warned = [r for r in caplog.records if "reports no token usage" in r.getMessage()]
    assert len(warned) == 1


# --- the request body -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "sent"),
    [(ToolChoice.AUTO, "auto"), (ToolChoice.REQUIRED, "required"), (ToolChoice.OMIT, None)],
)
async def test_tool_choice_is_sent_only_with_tools_and_omitted_when_asked(
    replay_server: ReplayServer, client: openai.AsyncOpenAI, choice: ToolChoice, sent: str | None
) -> None:
    replay_server.script(Replay.file("llama-cpp-text.sse"), Replay.file("llama-cpp-text.sse"))
    model = OpenAIChatModel(client, "m", tool_choice=choice)
    await model.respond(HISTORY, TOOLS)
    await model.respond(HISTORY, Toolset())
    with_tools, without = replay_server.bodies
    assert with_tools.get("tool_choice") == sent
    assert ("tool_choice" in with_tools) is (sent is not None)
    assert [t["function"]["name"] for t in with_tools["tools"]] == [t.name for t in TOOLS]
    assert "tool_choice" not in without and "tools" not in without


async def test_a_forced_tool_is_named_only_in_requests_that_offer_it(
    replay_server: ReplayServer, client: openai.AsyncOpenAI
) -> None:
    replay_server.script(*[Replay.file("llama-cpp-text.sse")] * 3)
    model = OpenAIChatModel(client, "m", tool_choice=ForcedTool("prometheus_query"))
    await model.respond(HISTORY, TOOLS)
    await model.respond(HISTORY, TOOLS.only(["http_get", "http_probe"]))
    await model.respond(HISTORY, Toolset())
    offered, others, without = replay_server.bodies
    assert offered["tool_choice"] == {"type": "function", "function": {"name": "prometheus_query"}}
    assert "prometheus_query" in [t["function"]["name"] for t in offered["tools"]]
    # another toolset: the tools are offered and the provider's default applies (no field)
    assert [t["function"]["name"] for t in others["tools"]] == ["http_get", "http_probe"]
    assert "tool_choice" not in others
    assert "tool_choice" not in without and "tools" not in without


@pytest.mark.parametrize("name", ["", " ", " http_get"])
def test_a_forced_tool_needs_a_name(name: str) -> None:
    with pytest.raises(ValueError, match="needs a tool's name"):
        ForcedTool(name)


async def test_an_assistant_turn_of_calls_only_is_sent_with_empty_content_never_null(
    replay_server: ReplayServer, client: openai.AsyncOpenAI
) -> None:
    """The captured request llama-cpp-python refused (null), as we now send it ("")."""
    captured = json.loads((STREAMS / "llama-cpp-request-null-content.json").read_text())
    history = (
        SystemMessage(content="s"),
        UserMessage(content="u"),
        AssistantMessage(content="", tool_calls=(call("call_1", "http_get", '{"url": "x"}'),)),
        ToolMessage(call_id="call_1", name="http_get", content="result"),
    )
    replay_server.script(Replay.file("llama-cpp-text.sse"))
    await OpenAIChatModel(client, "m").respond(history, TOOLS)
    sent = replay_server.bodies[0]["messages"]
    expected = captured["messages"]
    expected[2]["content"] = ""
    assert sent == expected


# --- streaming off and the fallback -----------------------------------------------------------


def completion(text: str, calls: list[ToolCall], usage: bool = False) -> Whole:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-whole",
        "object": "chat.completion",
        "created": 1736000000,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}
    return Whole(body)


WHOLE_CALLS = [
    call("call_w1", "http_get", '{"url": "http://a/"}'),
    call("call_w2", "http_get", "{}"),
]


async def test_streaming_off_sends_whole_requests_and_hears_the_text_once(
    replay_server: ReplayServer, client: openai.AsyncOpenAI
) -> None:
    replay_server.script(completion("Checking both.", WHOLE_CALLS, usage=True))
    deltas: list[str] = []

    async def on_delta(piece: str) -> None:
        deltas.append(piece)

    model = OpenAIChatModel(client, "m", streaming=ModelStreaming.OFF)
    response = await model.respond(HISTORY, TOOLS, on_delta)
    (body,) = replay_server.bodies
    assert body["stream"] is False and "stream_options" not in body
    assert deltas == ["Checking both."]
    assert list(response.message.tool_calls) == WHOLE_CALLS
    assert (
        response.usage.prompt_tokens,
        response.usage.completion_tokens,
        response.usage.estimated,
    ) == (50, 7, False)


@pytest.mark.parametrize("empty", [(Empty(),), (Cut(), Cut())], ids=["ended", "cut-twice"])
async def test_auto_falls_back_once_a_stream_with_tools_ends_empty_and_remembers(
    replay_server: ReplayServer,
    client: openai.AsyncOpenAI,
    caplog: pytest.LogCaptureFixture,
    empty: tuple[Empty | Cut, ...],
) -> None:
    """A clean empty end switches at once; cuts before any data only when two come in a row."""
    model = OpenAIChatModel(client, "m")
    for earlier in empty[:-1]:  # each asked again whole, streaming kept
        replay_server.script(earlier, completion("", WHOLE_CALLS[:1]))
        assert list((await model.respond(HISTORY, TOOLS)).message.tool_calls) == WHOLE_CALLS[:1]
    assert [b["stream"] for b in replay_server.bodies] == [True, False] * (len(empty) - 1)
    replay_server.reset()
    replay_server.script(
        empty[-1],
        completion("", WHOLE_CALLS),
        completion("", WHOLE_CALLS[:1]),
        Replay.file("llama-cpp-text.sse"),
    )
    first = await model.respond(HISTORY, TOOLS)
    second = await model.respond(HISTORY, TOOLS)
    text = await model.respond(HISTORY, Toolset())
    assert list(first.message.tool_calls) == WHOLE_CALLS
    assert list(second.message.tool_calls) == WHOLE_CALLS[:1]
    assert text.message.content == LLAMA_TEXT
    streamed = [b["stream"] for b in replay_server.bodies]
    assert streamed == [True, False, False, True]  # tools: whole from then on; no tools: streamed
    a, b = replay_server.bodies[:2]
    assert {k: v for k, v in a.items() if not k.startswith("stream")} == {
        k: v for k, v in b.items() if not k.startswith("stream")
    }
    assert len([r for r in caplog.records if "from now on" in r.getMessage()]) == 1


async def test_auto_keeps_streaming_after_one_cut_before_any_data(
    replay_server: ReplayServer, client: openai.AsyncOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """One cut (a proxy's idle timeout, a reset) is asked again whole; streaming stays on.

    A good stream between two cuts starts the count over, so two cuts apart never switch.
    """
    interleaved = SHAPES["openai-interleaved-calls.sse"][1]
    replay_server.script(
        Cut(),
        completion("", WHOLE_CALLS),
        Replay.file("openai-interleaved-calls.sse"),
        Cut(),
        completion("", WHOLE_CALLS[:1]),
        Replay.file("openai-interleaved-calls.sse"),
    )
    model = OpenAIChatModel(client, "m")
    answers = [list((await model.respond(HISTORY, TOOLS)).message.tool_calls) for _ in range(4)]
    assert answers == [WHOLE_CALLS, interleaved, WHOLE_CALLS[:1], interleaved]
    assert [b["stream"] for b in replay_server.bodies] == [True, False, True, True, False, True]
    assert not [r for r in caplog.records if "from now on" in r.getMessage()]
    assert len([r for r in caplog.records if "cut before any data" in r.getMessage()]) == 2


@pytest.mark.parametrize(
    ("streaming", "tools"),
    [(ModelStreaming.ON, TOOLS), (ModelStreaming.AUTO, Toolset())],
    ids=["streaming-on", "no-tools"],
)
async def test_an_empty_stream_fails_without_a_second_request_when_no_fallback_applies(
    replay_server: ReplayServer,
    client: openai.AsyncOpenAI,
    streaming: ModelStreaming,
    tools: Toolset,
) -> None:
    replay_server.script(Empty())
    with pytest.raises(ModelUnavailable, match="ended before the response was complete"):
        await OpenAIChatModel(client, "m", streaming=streaming).respond(HISTORY, tools)
    assert len(replay_server.bodies) == 1


@pytest.mark.parametrize("streaming", [ModelStreaming.ON, ModelStreaming.OFF])
async def test_a_cancel_aborts_the_request_in_either_mode(
    replay_server: ReplayServer, client: openai.AsyncOpenAI, streaming: ModelStreaming
) -> None:
    replay_server.script(Hold())
    model = OpenAIChatModel(client, "m", streaming=streaming)
    task = asyncio.create_task(model.respond(HISTORY, TOOLS))
    assert await asyncio.to_thread(replay_server.wait_for_requests, 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(replay_server.wait_for_disconnect) == 1
    assert replay_server.bodies[0]["stream"] is (streaming is ModelStreaming.ON)


# --- the assembler on its own ------------------------------------------------------------------


def test_two_whole_calls_without_an_index_are_two_calls() -> None:
    calls = ToolCallAssembler()
    calls.feed(None, id="a", name="http_get", arguments="{}")
    calls.feed(None, id="b", name="http_get", arguments="{}")
    assert [c.id for c in calls.calls("r")] == ["a", "b"]


def test_an_id_less_fragment_without_an_index_continues_the_latest_call() -> None:
    calls = ToolCallAssembler()
    calls.feed(None, id=None, name="http_get", arguments='{"url": ')
    calls.feed(None, id=None, name=None, arguments='"x"}')
    (only,) = calls.calls("r")
    assert (only.name, only.arguments) == ("http_get", '{"url": "x"}')
    assert only.id.startswith("call_")  # synthetic, stable


def test_a_name_repeated_in_every_delta_is_one_name_and_a_split_name_is_joined() -> None:
    calls = ToolCallAssembler()
    for piece in ("{", "}"):
        calls.feed(0, id="c", name="http_get", arguments=piece)
    calls.feed(1, id="d", name="http_", arguments="")
    calls.feed(1, id=None, name="probe", arguments="{}")
    assert [(c.name, c.arguments) for c in calls.calls("r")] == [
        ("http_get", "{}"),
        ("http_probe", "{}"),
    ]


def test_a_response_of_too_many_calls_is_a_broken_stream() -> None:
    calls = ToolCallAssembler()
    for n in range(MAX_CALLS):
        calls.feed(None, id=f"c{n}", name="t", arguments="{}")
    with pytest.raises(ModelUnavailable, match="more than"):
        calls.feed(None, id="one-more", name="t", arguments="{}")


# --- through the runtime ---------------------------------------------------------------------


async def test_calls_finished_with_stop_still_run_and_an_estimate_trips_the_token_budget(
    replay_server: ReplayServer, client: openai.AsyncOpenAI, redis_client: aioredis.Redis
) -> None:
    """Older Ollama: two index-less calls and `finish_reason: "stop"`, no usage anywhere."""
    ran: list[str] = []

    async def get(args: Mapping[str, Any], ctx: ToolContext) -> str:
        ran.append(args["url"])
        return "HTTP 200"

    http_get = Tool(name="http_get", description="GET", parameters={"type": "object"}, handler=get)
    replay_server.script(Replay.file("ollama-no-index-stop.sse"), Replay.file("llama-cpp-text.sse"))
    runtime = Runtime(
        model=OpenAIChatModel(client, "m"),
        redis=redis_client,
        toolset=Toolset.of([http_get]),
        limits=LoopLimits(budget=Budget(max_tokens=50)),
    )
    outcome = await runtime.run(TurnRequest(session_id="s", turn_id="t1", inputs=HISTORY[1:]))
    assert ran == ["http://api.internal/a", "http://api.internal/b"]
    assert isinstance(outcome.result, Completed) and outcome.result.cutoff
    assert "budget_spent" in [t.kind for t in outcome.diagnostics.trace]
    assert outcome.diagnostics.usage.estimated and outcome.diagnostics.usage.total_tokens >= 50
    assert SettleRecord.from_outcome(outcome).usage_estimated
    first, wrap_up = replay_server.bodies
    assert "tools" in first and "tools" not in wrap_up


def test_one_id_at_two_indexes_or_in_two_whole_calls_is_two_calls() -> None:
    """A model reusing an id (docs/reliability.md H4): kept apart, renamed later."""
    calls = ToolCallAssembler()
    calls.feed(0, id="call_0", name="http_get", arguments='{"a": 1}')
    calls.feed(1, id="call_0", name="http_get", arguments='{"b": 2}')
    calls.feed(None, id="x", name="http_get", arguments="{}")
    calls.feed(None, id="x", name="http_get", arguments="{}")
    assert [(c.id, c.arguments) for c in calls.calls("r")] == [
        ("call_0", '{"a": 1}'),
        ("call_0", '{"b": 2}'),
        ("x", "{}"),
        ("x", "{}"),
    ]
