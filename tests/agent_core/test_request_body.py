"""The request body the model client writes itself (agent_core/_llm/convert.py).

Why this way: what matters is what a provider receives and what building it costs as a turn's
history grows. The requests go through the real openai SDK (it still sends them: auth, base
URL, retries) to a loopback server that records the parsed bodies; the cost is counted, not
timed: how many messages are converted and written as JSON for each request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import openai
import pytest

from agent_core import (
    AssistantMessage,
    OpenAIChatModel,
    SystemMessage,
    Tool,
    ToolCall,
    ToolContext,
    ToolMessage,
    Toolset,
    UserMessage,
)
from agent_core._llm import convert
from tests.fakes.replay_server import Replay, ReplayServer
from tests.fakes.replay_server import _replay_server_process as _replay_process_fixture  # noqa: F401
from tests.fakes.replay_server import replay_client as _replay_client_fixture  # noqa: F401
from tests.fakes.replay_server import replay_server as _replay_fixture  # noqa: F401

LONE = "\ud83d"
"""Half of a surrogate pair, alone: text no UTF-8 writer accepts."""


def tool(name: str, description: str = "") -> Tool:
    async def run(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "ok"

    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    return Tool(
        name=name, description=description or f"{name} tool", parameters=schema, handler=run
    )


@pytest.fixture
def client(replay_client: openai.AsyncOpenAI) -> openai.AsyncOpenAI:
    return replay_client


def grown(history: list[Any], n: int) -> list[Any]:
    """`history` and one more tool round (a call and its result)."""
    call = ToolCall(id=f"c{n}", name="q", arguments=json.dumps({"q": f"{n}"}))
    return [
        *history,
        AssistantMessage(content=f"step {n}", tool_calls=(call,)),
        ToolMessage(call_id=call.id, name="q", content=f"result {n} ü"),
    ]


async def test_the_body_is_the_requests_fields_and_each_request_converts_only_new_messages(
    replay_server: ReplayServer, client: openai.AsyncOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    converted: list[Any] = []
    convert_one = convert._MEMO._convert

    def counting(message: Any) -> Any:
        converted.append(message)
        return convert_one(message)

    written: list[Any] = []
    write = convert.to_json

    def counting_json(value: Any) -> bytes:
        written.append(value)
        return write(value)

    monkeypatch.setattr(convert._MEMO, "_convert", counting)
    monkeypatch.setattr(convert, "to_json", counting_json)
    toolset = Toolset.of([tool("q")])
    model = OpenAIChatModel(client, "m")
    history: list[Any] = [SystemMessage(content="You are an SRE bot."), UserMessage(content="up?")]
    for n in range(40):
        history = grown(history, n)
    replay_server.script(*[Replay.file("llama-cpp-text.sse") for _ in range(3)])

    await model.respond(history, toolset)
    assert len(converted) == len(history) == 82  # the first request converts everything,
    assert len(written) == 82 + 2  # and writes it as JSON, with the fields and the tools
    for n in (40, 41):
        converted.clear()
        written.clear()
        history = grown(history, n)
        await model.respond(history, toolset)
        assert len(converted) == 2  # each later one only its new call and result,
        assert len(written) == 2 + 1  # and its fields: the rest is joined as bytes

    body = replay_server.bodies[-1]
    assert body["model"] == "m"
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in body["tools"]] == ["q"]
    assert len(body["messages"]) == 86
    assert body["messages"][-2] == {
        "role": "assistant",
        "content": "step 41",
        "tool_calls": [
            {"id": "c41", "type": "function", "function": {"name": "q", "arguments": '{"q": "41"}'}}
        ],
    }
    assert body["messages"][-1] == {"role": "tool", "tool_call_id": "c41", "content": "result 41 ü"}


async def test_a_tool_description_with_a_lone_surrogate_is_sent_escaped(
    replay_server: ReplayServer, client: openai.AsyncOpenAI
) -> None:
    """An MCP server's description may carry one: the request is still sent, as valid JSON."""
    replay_server.script(Replay.file("llama-cpp-text.sse"))
    toolset = Toolset.of([tool("q", description=f"query {LONE} metrics")])
    model = OpenAIChatModel(client, "m")
    await model.respond([UserMessage(content="naïve?")], toolset)
    (body,) = replay_server.bodies
    assert body["tools"][0]["function"]["description"] == f"query {LONE} metrics"
    assert body["messages"] == [{"role": "user", "content": "naïve?"}]


def test_a_message_holds_no_lone_surrogate_and_keeps_a_whole_pair() -> None:
    message = UserMessage(content=f"slow {LONE} and \U0001f525 hot")
    assert message.content == "slow \ufffd and \U0001f525 hot"
    call = ToolCall(id=f"c{LONE}", name="q", arguments=f'{{"q": "{LONE}"}}')
    assert (call.id, call.arguments) == ("c\ufffd", '{"q": "\ufffd"}')
    message.model_dump_json()  # writable: no UnicodeEncodeError
    halves = AssistantMessage(content="hot \ud83d\udd25 now")  # a pair split over two chunks
    assert halves.content == "hot \U0001f525 now"
