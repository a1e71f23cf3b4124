"""A 5xx that is a validation error of our request: not retried, mapped like a 400, one line.

Why this way: llama-cpp-python's server validates the request with FastAPI inside a route that
answers every exception as HTTP 500 `{"error": {"message": str(exc), ...}}`
(`llama_cpp/server/errors.py`). The body here is not written by hand: a FastAPI app with that
route class and request models of the same shape (`content: NotRequired[str]` on the assistant
message) answers the captured request (tests/data/streams/llama-cpp-request-null-content.json),
so the dump is whatever this FastAPI and pydantic produce. It is then served by the replay server
to the real openai SDK, which would retry a 500 on its own. Whether the response hook reads a
body at all (a compressed one it must not) is asked of the hook alone, behind httpx's
`MockTransport` with a body that records being read.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Literal, NotRequired

import httpx
import openai
import pytest
import redis.asyncio as aioredis
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

from agent_core import (
    Failed,
    HistoryRejected,
    ModelRejected,
    ModelUnavailable,
    OpenAIChatModel,
    Runtime,
    Toolset,
    TurnRequest,
    UserMessage,
    openai_http_client,
)
from agent_core._llm.provider_errors import (
    MESSAGE_CHARS,
    _refuse_retry_of_invalid_request,
    invalid_request,
)
from tests.fakes.replay_server import (
    STREAMS,
    Replay,
    ReplayServer,
    Status,
)
from tests.fakes.replay_server import _replay_server_process as _replay_process_fixture  # noqa: F401
from tests.fakes.replay_server import replay_server as _replay_fixture  # noqa: F401


class _System(TypedDict):
    role: Literal["system"]
    content: str | None


class _User(TypedDict):
    role: Literal["user"]
    content: str | None


class _Function(TypedDict):
    name: str
    arguments: str


class _Call(TypedDict):
    id: str
    type: Literal["function"]
    function: _Function


class _Assistant(TypedDict):
    role: Literal["assistant"]
    content: NotRequired[str]
    tool_calls: NotRequired[list[_Call]]


class _Tool(TypedDict):
    role: Literal["tool"]
    content: str | None
    tool_call_id: str


class _ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[_System | _User | _Assistant | _Tool]


class _ErrorRoute(APIRoute):
    """llama-cpp-python's `RouteErrorHandler`: any exception becomes a 500 of its text."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except Exception as exc:
                error = {
                    "message": str(exc),
                    "type": "internal_server_error",
                    "param": None,
                    "code": None,
                }
                return JSONResponse({"error": error}, status_code=500)

        return route


async def _llama_cpp_answer(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    app = FastAPI()
    app.router.route_class = _ErrorRoute

    @app.post("/v1/chat/completions")
    async def chat(request: _ChatRequest) -> dict[str, str]:
        return {"ok": "yes"}

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://llama"
    ) as http:
        answer = await http.post("/v1/chat/completions", json=body)
    return answer.status_code, answer.json()


@pytest.fixture
async def null_content_500() -> dict[str, Any]:
    captured = json.loads((STREAMS / "llama-cpp-request-null-content.json").read_text())
    status, body = await _llama_cpp_answer(captured)
    assert status == 500
    message = body["error"]["message"]
    assert "validation error" in message and "Input should be a valid string" in message
    assert message.count("\n") > 1, "FastAPI's dump is many lines"
    fixed = captured | {"messages": [dict(m) for m in captured["messages"]]}
    fixed["messages"][2]["content"] = ""
    assert (await _llama_cpp_answer(fixed))[0] == 200, "the same request with '' is accepted"
    return body


def client_for(server: ReplayServer, *, hook: bool = True, retries: int = 2) -> openai.AsyncOpenAI:
    extra: dict[str, Any] = {"http_client": openai_http_client()} if hook else {}
    return openai.AsyncOpenAI(
        base_url=server.base_url, api_key="test", max_retries=retries, **extra
    )


HISTORY = (UserMessage(content="Is the api up?"),)


async def test_the_500_is_not_retried_and_is_one_line_about_the_history(
    replay_server: ReplayServer, null_content_500: dict[str, Any]
) -> None:
    replay_server.script(Status(500, null_content_500), Status(500, null_content_500))
    async with client_for(replay_server) as client:
        with pytest.raises(HistoryRejected) as caught:
            await OpenAIChatModel(client, "m").respond(HISTORY, Toolset())
    assert len(replay_server.bodies) == 1, "the SDK did not ask again"
    error = caught.value
    assert error.status == 500
    said = str(error)
    assert "\n" not in said and len(said) <= MESSAGE_CHARS
    assert said.startswith("the model provider could not read the request (HTTP 500): ")
    # the error named is the assistant branch's, not the first union branch's mismatch
    assert "body.messages.2._Assistant.content: Input should be a valid string" in said
    assert said.endswith("(and 4 more)") and "'input'" not in said


async def test_without_the_hook_the_sdk_retries_it_the_mapping_still_holds(
    replay_server: ReplayServer, null_content_500: dict[str, Any]
) -> None:
    """What the hook is for: the SDK's own `_should_retry` retries any 5xx."""
    replay_server.script(Status(500, null_content_500), Status(500, null_content_500))
    async with client_for(replay_server, hook=False, retries=1) as client:
        with pytest.raises(HistoryRejected):
            await OpenAIChatModel(client, "m").respond(HISTORY, Toolset())
    assert len(replay_server.bodies) == 2


async def test_an_ordinary_500_is_still_retried_and_unavailable(
    replay_server: ReplayServer,
) -> None:
    busy = {"error": {"message": "Internal Server Error", "type": "internal_server_error"}}
    replay_server.script(Status(500, busy), Replay.file("llama-cpp-text.sse"))
    async with client_for(replay_server, retries=1) as client:
        response = await OpenAIChatModel(client, "m").respond(HISTORY, Toolset())
    assert response.message.content.startswith("Dear Dr.")
    assert len(replay_server.bodies) == 2


def test_a_validation_error_not_about_messages_is_model_rejected() -> None:
    dump = (
        "1 validation error:\n  {'type': 'float_parsing', 'loc': ('body', 'temperature'), "
        "'msg': 'Input should be a valid number', 'input': 'hot'}"
    )
    error = invalid_request(500, dump)
    assert type(error) is ModelRejected
    assert str(error).endswith("body.temperature: Input should be a valid number")
    assert invalid_request(500, "Internal Server Error") is None
    assert invalid_request(400, dump) is None


async def test_the_runtime_repairs_once_then_fails_with_one_line(
    replay_server: ReplayServer, null_content_500: dict[str, Any], redis_client: aioredis.Redis
) -> None:
    replay_server.script(Status(500, null_content_500), Status(500, null_content_500))
    async with client_for(replay_server) as client:
        runtime = Runtime(model=OpenAIChatModel(client, "m"), redis=redis_client, toolset=Toolset())
        outcome = await runtime.run(TurnRequest(session_id="s", turn_id="t1", inputs=HISTORY))
    assert isinstance(outcome.result, Failed)
    assert len(replay_server.bodies) == 2, "asked again once, after the repair"
    error = outcome.result.error
    assert "\n" not in error and len(error) < 2 * MESSAGE_CHARS
    assert error.startswith("the model provider rejected the conversation history: ")
    assert "Input should be a valid string" in error and "{'type'" not in error
    assert [m.role for m in await runtime.store.load("s")] == ["user"]


# A gateway (LiteLLM, a FastAPI proxy) that could not parse the upstream's answer: pydantic's own
# str() of the error, about the response model, not our request's body.
RESPONSE_MODEL_ERROR = (
    "1 validation error for ModelResponse\nchoices.0.message\n  Field required "
    "[type=missing, input_value={'index': 0}, input_type=dict]"
)


def test_a_validation_error_about_the_response_is_not_our_request() -> None:
    assert invalid_request(500, RESPONSE_MODEL_ERROR) is None
    flattened = "1 validation error:\nbody.messages.2.content: Input should be a valid string"
    assert type(invalid_request(500, flattened)) is HistoryRejected


async def test_a_gateways_response_validation_500_is_retried_and_unavailable(
    replay_server: ReplayServer,
) -> None:
    failing = {"error": {"message": RESPONSE_MODEL_ERROR, "type": "internal_server_error"}}
    replay_server.script(Status(500, failing), Replay.file("llama-cpp-text.sse"))
    async with client_for(replay_server, retries=1) as client:
        response = await OpenAIChatModel(client, "m").respond(HISTORY, Toolset())
    assert response.message.content.startswith("Dear Dr.")
    assert len(replay_server.bodies) == 2, "the SDK asked again"
    replay_server.script(Status(500, failing), Status(500, failing))
    async with client_for(replay_server, retries=1) as client:
        with pytest.raises(ModelUnavailable) as caught:
            await OpenAIChatModel(client, "m").respond(HISTORY, Toolset())
    assert type(caught.value) is ModelUnavailable and caught.value.status == 500


class _Body(httpx.AsyncByteStream):
    """A response body that records whether anyone read it."""

    def __init__(self, content: bytes) -> None:
        self.content, self.read = content, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.read = True
        yield self.content


def _hooked(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.MockTransport(handler),
        event_hooks={"response": [_refuse_retry_of_invalid_request]},
    )


@pytest.mark.parametrize("encoding", [None, "identity", "gzip"])
async def test_the_hook_reads_only_an_uncompressed_body(
    null_content_500: dict[str, Any], encoding: str | None
) -> None:
    """A compressed body's declared length says nothing of what `aread` would decompress."""
    raw = json.dumps(null_content_500).encode()
    content = gzip.compress(raw) if encoding == "gzip" else raw
    headers = {"content-type": "application/json", "content-length": str(len(content))}
    if encoding is not None:
        headers["content-encoding"] = encoding

    body = _Body(content)

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, headers=headers, stream=body)

    async with _hooked(answer) as http:
        request = http.build_request("POST", "http://llama/v1/chat/completions")
        response = await http.send(request, stream=True)
        refused, read = response.headers.get("x-should-retry"), body.read
        await response.aclose()
    if encoding == "gzip":
        assert (refused, read) == (None, False), "left to the SDK's retries, unread"
    else:
        assert (refused, read) == ("false", True)
