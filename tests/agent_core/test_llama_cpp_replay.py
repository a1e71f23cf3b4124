"""Exchanges recorded from a real llama-cpp-python 0.3.36 server, replayed to `OpenAIChatModel`.

Why this way: `make test-real` runs the bot against the real server (tests/real/), but needs a
source build of llama-cpp-python, so `make test` replays what that run recorded instead
(`make test-real RECORD=1` rewrote tests/data/replay/llama-cpp/: each response's raw bytes as
the server sent them, and the request that produced it). The recorded bytes are served through
an httpx MockTransport to the real openai SDK, and the message assembled must be exactly what
the server streamed: one call with the one id and name it repeated in 27 deltas, the text of a
streamed answer, and for the stream a stop cut after its first chunk, no response at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

import httpx
import openai
import pytest

from agent_core import (
    ModelStreaming,
    ModelUnavailable,
    OpenAIChatModel,
    SystemMessage,
    Tool,
    ToolCall,
    ToolChoice,
    ToolContext,
    Toolset,
    UserMessage,
)
from tests.paths import ROOT

RECORDED = ROOT / "tests" / "data" / "replay" / "llama-cpp"
HISTORY = (SystemMessage(content="You are an SRE bot."), UserMessage(content="Is the api up?"))


def tool(name: str) -> Tool:
    async def run(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "ok"

    return Tool(name=name, description=f"{name} tool", parameters={"type": "object"}, handler=run)


TOOLS = Toolset.of([tool("http_get"), tool("prometheus_query")])


class Recorded:
    """Answers each request with the next recorded response; keeps what was sent."""

    def __init__(self, *names: str) -> None:
        self._answers = [RECORDED / name for name in names]
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(json.loads(request.content))
        path = self._answers.pop(0)
        body = path.read_bytes()
        if body.startswith(b"{"):  # a whole response or an error, as JSON
            status = 500 if b'"error"' in body[:20] else 200
            return httpx.Response(
                status, content=body, headers={"content-type": "application/json"}
            )
        return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


def model(
    answers: Recorded,
    *,
    tool_choice: ToolChoice = ToolChoice.AUTO,
    streaming: ModelStreaming = ModelStreaming.AUTO,
) -> OpenAIChatModel:
    client = openai.AsyncOpenAI(
        base_url="http://llama.test/v1",
        api_key="unused",
        max_retries=0,
        # the SDK's annotations name its own httpx fork; an httpx client is what it drives
        http_client=cast(Any, httpx.AsyncClient(transport=httpx.MockTransport(answers))),
    )
    return OpenAIChatModel(client, "smollm2", tool_choice=tool_choice, streaming=streaming)


def recorded_request(name: str) -> dict[str, Any]:
    request: dict[str, Any] = json.loads((RECORDED / f"{name}.request.json").read_text("utf-8"))
    return request


async def test_a_call_forced_by_name_is_one_call_with_its_repeated_id_and_name() -> None:
    answers = Recorded("forced-by-name.sse")
    response = await model(answers).respond(HISTORY, TOOLS)
    assert response.message.tool_calls == (
        ToolCall(
            id="call__0_prometheus_query_cmpl-b66d6f1f-1466-404d-b11f-60c2b4fa9f31",
            name="prometheus_query",
            arguments='{"query": "SELECT COUNT(*) as total_count, SUM(SUM(10)) AS sum"} ',
        ),
    )
    assert response.message.content == ""
    assert response.usage.estimated  # the server sent no usage chunk
    # what was recorded forced the call by name, which our client does not send
    assert recorded_request("forced-by-name")["tool_choice"] == {
        "type": "function",
        "function": {"name": "prometheus_query"},
    }


async def test_a_streamed_answer_is_its_text() -> None:
    answers = Recorded("text-answer.sse")
    heard: list[str] = []

    async def on_delta(text: str) -> None:
        heard.append(text)

    response = await model(answers, tool_choice=ToolChoice.OMIT).respond(HISTORY, TOOLS, on_delta)
    answer = "Hey there,\nHello! I'm a chat bot. What can I do for you?"
    assert response.message.content == answer and response.message.tool_calls == ()
    assert len(heard) == 19 and "".join(heard) == answer
    assert response.response_id.startswith("chatcmpl-")
    # the request sent now has the recorded one's shape: tools offered, no tool_choice
    (sent,) = answers.sent
    before = recorded_request("text-answer")
    assert {k: sent[k] for k in ("model", "stream", "stream_options")} == {
        k: before[k] for k in ("model", "stream", "stream_options")
    }
    assert "tool_choice" not in sent and "tool_choice" not in before


async def test_a_stream_cut_by_a_stop_is_no_response() -> None:
    # the proxy held this stream after its first chunk (the role) until the stop closed it
    assert (RECORDED / "stop-mid-stream.sse").read_bytes().count(b"data: ") == 1
    answers = Recorded("stop-mid-stream.sse")
    with pytest.raises(ModelUnavailable, match="ended before the response was complete"):
        await model(answers, tool_choice=ToolChoice.OMIT, streaming=ModelStreaming.ON).respond(
            HISTORY, TOOLS
        )


async def test_tool_choice_required_is_refused_streamed_and_whole() -> None:
    # llama-cpp-python 0.3.36 asserts tool_choice == "auto" unless a function is named: a stream
    # answered 200 and closed with no byte, then the whole request answered 500.
    assert (RECORDED / "required-stream.sse").read_bytes() == b""
    answers = Recorded("required-stream.sse", "required-whole.sse")
    with pytest.raises(ModelUnavailable):
        await model(answers, tool_choice=ToolChoice.REQUIRED).respond(HISTORY, TOOLS)
    assert [(s["stream"], s["tool_choice"]) for s in answers.sent] == [
        (True, "required"),
        (False, "required"),
    ]
    assert [recorded_request(n)["stream"] for n in ("required-stream", "required-whole")] == [
        True,
        False,
    ]
