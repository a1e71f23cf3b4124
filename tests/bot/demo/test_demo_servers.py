"""The two `make demo` servers: the failing "checkout" service and the rehearsal model.

Why this way: the rehearsal stands in for a real model, so it is driven the ways a real model
is: through the openai SDK's own request building and SSE parsing over real loopback HTTP, and
through our runtime (`OpenAIChatModel`, the real `http_get` tool, a real Redis). The demo
service is reached in process (httpx `ASGITransport`) behind a small recording gate, so a test
knows which URLs were called in which order and can hold a batch in flight to steer it, waiting
on arrivals rather than on the clock. Assertions are about what a person sees: the answer text,
the probes, their order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator, Sequence

import httpx
import openai
import pytest
import redis.asyncio as aioredis
from openai.types.chat import ChatCompletionMessageParam
from starlette.types import ASGIApp, Receive, Scope, Send

import bot.demo
from agent_core import (
    AssistantMessage,
    Completed,
    ControlPlane,
    HostAllowlist,
    Message,
    OpenAIChatModel,
    Runtime,
    Steered,
    Toolset,
    TurnRequest,
    UserMessage,
    http_get_tool,
    validate_history,
)
from bot.demo import (
    FAILING_DEPENDENCY,
    KEY_LOG_LINE,
    LABEL,
    REHEARSAL_MODEL,
    demo_service_app,
    rehearsal_app,
)
from bot.demo.openai_rules import ORPHAN_TOOL_MESSAGE
from tests.fakes.loopback_server import LoopbackServer
from tests.fakes.resolver import Answering

SERVICE_URL = "http://checkout.demo:8080"
SESSION = "incident-7"
FIRST_BATCH = ["/health", "/logs", "/metrics"]


class Gate:
    """Wraps the demo service: records each request's path on arrival, holds it while closed."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self.paths: list[str] = []
        self.open = asyncio.Event()
        self.open.set()
        self._arrivals = asyncio.Condition()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self._arrivals:
            self.paths.append(scope["path"])
            self._arrivals.notify_all()
        await self.open.wait()
        await self._app(scope, receive, send)

    async def wait_for_arrivals(self, count: int) -> None:
        async with asyncio.timeout(10.0), self._arrivals:
            await self._arrivals.wait_for(lambda: len(self.paths) >= count)


@pytest.fixture(scope="module")
def rehearsal() -> Iterator[str]:
    """The rehearsal model on a loopback port; yields its `/v1` base URL."""
    server = LoopbackServer(rehearsal_app(SERVICE_URL))
    server.start()
    yield f"http://127.0.0.1:{server.port}/v1"
    server.stop()


@pytest.fixture
def service() -> Gate:
    return Gate(demo_service_app(scale=0))


@pytest.fixture
async def model_client(rehearsal: str) -> AsyncIterator[openai.AsyncOpenAI]:
    client = openai.AsyncOpenAI(base_url=rehearsal, api_key="unused", max_retries=0)
    yield client
    await client.close()


@pytest.fixture
async def runtime(
    service: Gate, model_client: openai.AsyncOpenAI, redis_client: aioredis.Redis
) -> AsyncIterator[Runtime]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=service)) as http:
        # In process (ASGI): the name resolves to a loopback address the allowlist names.
        allow = HostAllowlist.parse("checkout.demo:8080,127.0.0.1:8080")
        resolver = Answering("127.0.0.1")
        yield Runtime(
            model=OpenAIChatModel(model_client, REHEARSAL_MODEL),
            redis=redis_client,
            toolset=Toolset.of([http_get_tool(allow, http, resolver=resolver)]),
            instructions="You are an SRE assistant.",
        )


def task() -> tuple[UserMessage, ...]:
    return (UserMessage(content="checkout is returning 500s, why?", author="alice"),)


def called_urls(history: Sequence[Message]) -> list[list[str]]:
    """The `http_get` URLs of each assistant batch, in order."""
    return [
        [json.loads(call.arguments)["url"].removeprefix(SERVICE_URL) for call in m.tool_calls]
        for m in history
        if isinstance(m, AssistantMessage) and m.tool_calls
    ]


def test_package_exports_exactly_its_all() -> None:
    public = {name for name in dir(bot.demo) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(bot.demo, name)).__name__ == "module"}
    assert public - modules == set(bot.demo.__all__)
    assert {"demo_service_app", "rehearsal_app", "REHEARSAL_MODEL"} <= set(bot.demo.__all__)


async def test_the_service_tells_a_consistent_story() -> None:
    transport = httpx.ASGITransport(app=demo_service_app(scale=0))
    async with httpx.AsyncClient(transport=transport, base_url=SERVICE_URL) as http:
        health = await http.get("/health")
        logs = await http.get("/logs")
        metrics = await http.get("/metrics")
        database = (await http.get("/dependencies/payments-db")).json()
        deploys = (await http.get("/deploys")).json()["deploys"]
    assert health.status_code == 503
    assert health.json() == {
        "service": "checkout",
        "status": "degraded",
        "failing": [FAILING_DEPENDENCY],
    }
    assert KEY_LOG_LINE in logs.text and logs.text.count(" ERROR ") >= 3
    assert 'db_pool_connections_in_use_ratio{service="checkout",pool="payments-db"} 1.0' in (
        metrics.text
    )
    assert database["pool"]["active_connections"] == database["pool"]["max_connections"]
    assert database["waiting_clients"] > 0 and "timeout" in database["last_error"]["message"]
    assert "acquire_timeout_ms" in deploys[0]["change"]


async def test_rehearsal_speaks_the_protocol_to_the_openai_sdk(
    model_client: openai.AsyncOpenAI,
) -> None:
    asked: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "why is checkout failing?"}
    ]
    plain = await model_client.chat.completions.create(model="any", messages=asked)
    assert plain.model == REHEARSAL_MODEL and plain.choices[0].finish_reason == "tool_calls"
    message = plain.choices[0].message
    assert message.content == LABEL + "Checking health, logs and metrics in parallel."
    assert [c.function.arguments for c in message.tool_calls or [] if c.type == "function"] == [
        json.dumps({"url": SERVICE_URL + path}, separators=(",", ":")) for path in FIRST_BATCH
    ]

    stream = await model_client.chat.completions.create(
        model="any", messages=asked, stream=True, stream_options={"include_usage": True}
    )
    text, finish, usage, headers = "", None, None, []
    async for chunk in stream:
        assert chunk.model == REHEARSAL_MODEL
        usage = chunk.usage or usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            headers += [
                c.function and c.function.name for c in choice.delta.tool_calls or [] if c.id
            ]
    assert text == message.content and finish == "tool_calls"
    assert headers == ["http_get"] * 3
    assert usage is not None and usage.total_tokens > 0


async def test_a_whole_turn_probes_in_parallel_then_quotes_the_failure(
    runtime: Runtime, service: Gate
) -> None:
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))

    assert isinstance(outcome.result, Completed)
    answer = outcome.result.answer
    assert answer.startswith(LABEL)
    assert f"checkout is degraded because {FAILING_DEPENDENCY} is failing" in answer
    assert "key log line" in answer and f"ERROR checkout {KEY_LOG_LINE}" in answer
    assert "Next step:" in answer
    assert sorted(service.paths) == sorted(FIRST_BATCH)
    history = await runtime.store.load(SESSION)
    assert called_urls(history) == [FIRST_BATCH]
    validate_history(history)


@pytest.mark.parametrize(
    ("redirect", "followed"),
    [
        ("Check what was deployed in the last hour.", "/deploys"),
        ("Focus on the payments database.", "/dependencies/payments-db"),
        ("Look somewhere else.", "/deploys"),
    ],
)
async def test_a_steer_mid_batch_is_followed_by_the_next_request(
    runtime: Runtime, service: Gate, redis_client: aioredis.Redis, redirect: str, followed: str
) -> None:
    service.open.clear()
    first = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await service.wait_for_arrivals(3)  # the first batch is in flight
    await ControlPlane(redis_client).steer(SESSION, redirect, author="bob")
    assert isinstance((await first).result, Steered)

    service.open.set()
    second = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t2"))

    assert isinstance(second.result, Completed)
    history = await runtime.store.load(SESSION)
    assert called_urls(history) == [FIRST_BATCH, [followed]]
    assert service.paths[3:] == [followed]
    redirected = [m for m in history if isinstance(m, AssistantMessage) and m.tool_calls][1]
    assert redirected.content == f"{LABEL}Following bob's redirect: checking {followed}."
    answer = second.result.answer
    assert answer.startswith(LABEL) and "interrupted" in answer and "Next step:" in answer
    assert "v2.14.0" in answer if followed == "/deploys" else "20/20 connections active" in answer
    validate_history(history)


async def test_paced_streams_and_repeated_requests_get_the_same_answer() -> None:
    """Stateless: a request repeated (a resumed turn) gets the same reply, paced or not."""
    server = LoopbackServer(rehearsal_app(SERVICE_URL, token_delay_s=0.001))
    server.start()
    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="x")
    asked: list[ChatCompletionMessageParam] = [{"role": "user", "content": "checkout is down"}]
    try:
        texts = []
        for _ in range(2):
            stream = await client.chat.completions.create(model="m", messages=asked, stream=True)
            texts.append("".join([c.choices[0].delta.content or "" async for c in stream]))
        with pytest.raises(openai.BadRequestError, match="messages"):
            await client.chat.completions.create(model="m", messages=[])
    finally:
        await client.close()
        server.stop()
    assert texts == [LABEL + "Checking health, logs and metrics in parallel."] * 2


def test_a_negative_delay_scale_is_refused() -> None:
    with pytest.raises(ValueError, match="scale"):
        demo_service_app(scale=-1)


async def test_the_rehearsal_refuses_a_broken_history_as_the_real_api_does() -> None:
    """A tool message that answers nothing gets OpenAI's own 400, and is counted."""
    app = rehearsal_app(SERVICE_URL)
    broken = [
        {"role": "user", "content": "checkout is down"},
        {"role": "tool", "tool_call_id": "call_x", "content": "an orphan"},
    ]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://rehearsal"
    ) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": "m", "messages": broken}
        )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == ORPHAN_TOOL_MESSAGE
    assert app.state.rejected == 1
