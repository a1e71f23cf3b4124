"""The runtime under faults: outside cancellation, Redis blips, odd tools, cut streams.

Why this way: each test reproduces a failure found in review (of the runtime's own code, with
real Redis and the real openai SDK), and asserts what docs/design.md requires rather than what the
code happened to do. Models are in-process (`ScriptedModel` or a small scripted class) where the
point is the loop's control flow, and the fake provider where the point is the wire.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import openai
import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from agent_core import (
    BellHub,
    Completed,
    ControlPlane,
    Drained,
    Failed,
    IntentCheck,
    Interruptibility,
    LoopLimits,
    Message,
    ModelResponse,
    OpenAIChatModel,
    RunEvent,
    Runtime,
    Tool,
    ToolContext,
    ToolMessage,
    Toolset,
    ToolStatus,
    TurnRequest,
    Usage,
    UserMessage,
    validate_history,
)
from agent_core._llm.client import DeltaSink
from agent_core.testing import ScriptedModel, calls, text
from tests.fakes import openai_provider as fp

GO = (UserMessage(content="go"),)


def tool(
    name: str = "p",
    handler: Any = None,
    kind: Interruptibility = Interruptibility.ABORTABLE,
    timeout: float = 5.0,
) -> Tool:
    async def quick(args: Mapping[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(0)
        return "real data"

    return Tool(
        name=name,
        description="",
        parameters={"type": "object"},
        handler=handler or quick,
        interruptibility=kind,
        timeout_s=timeout,
    )


async def results_of(runtime: Runtime, session: str = "s") -> list[ToolMessage]:
    return [m for m in await runtime.store.load(session) if isinstance(m, ToolMessage)]


async def test_stale_steer_ring_does_not_abort_a_turn_whose_script_must_be_reloaded(
    redis_client: aioredis.Redis,
) -> None:
    """A steer queued between turns, and a Redis that lost its script cache (restart)."""
    await asyncio.gather(*(redis_client.ping() for _ in range(4)))  # a warm pool, as in a worker
    await ControlPlane(redis_client).steer("s", "also check the CDN", author="bob")
    await redis_client.script_flush()
    runtime = Runtime(
        model=ScriptedModel(script=[calls(("p", "{}")), text("done")]),
        redis=redis_client,
        toolset=Toolset.of([tool()]),
    )
    outcome = await runtime.run(TurnRequest(session_id="s", turn_id="t2", inputs=GO))
    assert isinstance(outcome.result, Completed)
    assert [m.status for m in await results_of(runtime)] == [ToolStatus.OK]


class SlowFirstModel:
    """Answers the first request after `delay` seconds with one call, then with text."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests = 0
        self.asked = asyncio.Event()

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        self.requests += 1
        self.asked.set()
        if self.requests == 1:
            await asyncio.sleep(self.delay)
            return ModelResponse(message=calls(("p", "{}")), usage=Usage(), response_id="r1")
        return ModelResponse(message=text("done"), usage=Usage(), response_id="r2")


async def test_a_redis_blip_while_handling_a_stop_ring_still_stops(
    redis_server: str, redis_client: aioredis.Redis
) -> None:
    class FlakyGet(aioredis.Redis):
        failed = False

        async def get(self, name: Any) -> Any:
            if not FlakyGet.failed and ":tomb:" in str(name):
                FlakyGet.failed = True
                raise RedisConnectionError("blip")
            return await super().get(name)

    started: list[int] = []

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        started.append(1)
        return "ok"

    flaky = FlakyGet.from_url(redis_server)
    model = SlowFirstModel(delay=0.5)
    runtime = Runtime(model=model, redis=flaky, toolset=Toolset.of([tool(handler=handler)]))
    run = asyncio.create_task(runtime.run(TurnRequest(session_id="s", turn_id="t1", inputs=GO)))
    await model.asked.wait()
    await ControlPlane(redis_client).stop("s", "t1", by="dave")
    outcome = await run
    await flaky.aclose()
    assert FlakyGet.failed
    assert started == [], "no tool may start after the stop"
    assert outcome.reason == "stopped"


async def test_a_must_complete_tool_ending_cancelled_still_closes_its_call(
    redis_client: aioredis.Redis,
) -> None:
    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        future = asyncio.get_running_loop().create_future()
        future.cancel()
        return await future  # type: ignore[no-any-return]

    runtime = Runtime(
        model=ScriptedModel(script=[calls(("m", "{}"), ("p", "{}")), text("done")]),
        redis=redis_client,
        toolset=Toolset.of(
            [tool("m", handler, Interruptibility.MUST_COMPLETE), tool("p", handler)]
        ),
    )
    async with asyncio.timeout(10):
        outcome = await runtime.run(TurnRequest(session_id="s", turn_id="t1", inputs=GO))
    assert isinstance(outcome.result, Completed)
    results = await results_of(runtime)
    assert [m.status for m in results] == [ToolStatus.ERROR, ToolStatus.ERROR]
    assert "cancelled" in results[0].content and "cancelled" in results[1].content
    assert "interrupted" not in results[1].content, "no stop happened: not an interrupt"


async def test_an_outside_cancel_at_any_step_propagates_and_starts_nothing_more(
    redis_client: aioredis.Redis,
) -> None:
    """Cancel the run at every step in turn (Python 3.11's wait_for may swallow a cancel)."""
    step = 0
    while True:
        step += 1
        model = ScriptedModel(script=[calls(("p", "{}")), calls(("p", "{}")), text("done")])
        runtime = Runtime(model=model, redis=redis_client, toolset=Toolset.of([tool()]))
        run = asyncio.create_task(
            runtime.run(TurnRequest(session_id=f"s{step}", turn_id="t", inputs=GO))
        )
        for _ in range(step):
            await asyncio.sleep(0)
        if run.done():
            break  # the run finished before this many steps: every step was covered
        requests = len(model.requests)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):  # a swallowed cancel would run to the end
            await run
        # A request task created just before the cancel was delivered may still take its
        # first step; nothing beyond it may start.
        assert len(model.requests) <= requests + 1, f"requests went on after step {step}"
        validate_history(await runtime.store.load(f"s{step}"))
    assert step > 10


async def test_a_resumed_drained_turn_runs_on(redis_client: aioredis.Redis) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def held(args: Mapping[str, Any], ctx: ToolContext) -> str:
        started.set()
        await release.wait()
        return "done"

    runtime = Runtime(
        model=ScriptedModel(script=[calls(("p", "{}")), text("resumed")]),
        redis=redis_client,
        toolset=Toolset.of([tool(handler=held)]),
    )
    request = TurnRequest(session_id="s", turn_id="t1", inputs=GO)
    run = asyncio.create_task(runtime.run(request))
    await started.wait()
    await ControlPlane(redis_client).drain("s", "t1")
    release.set()
    assert isinstance((await run).result, Drained)
    again = await runtime.run(request)  # another worker resumes the same turn id
    assert isinstance(again.result, Completed), again.diagnostics.probes
    assert [m.role for m in await runtime.store.load("s")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_a_failing_event_sink_does_not_end_the_run(redis_client: aioredis.Redis) -> None:
    async def sink(event: RunEvent) -> None:
        raise RuntimeError("card update failed")

    runtime = Runtime(
        model=ScriptedModel(script=[calls(("p", "{}")), text("done")]),
        redis=redis_client,
        toolset=Toolset.of([tool()]),
        sink=sink,
    )
    outcome = await runtime.run(TurnRequest(session_id="s", turn_id="t1", inputs=GO))
    assert isinstance(outcome.result, Completed)
    assert outcome.diagnostics.sink_failures == outcome.diagnostics.events > 0


async def test_the_watcher_never_outlives_its_run(redis_client: aioredis.Redis) -> None:
    runtime = Runtime(
        model=ScriptedModel(script=[calls(("p", "{}")), text("done")]),
        redis=redis_client,
        toolset=Toolset.of([tool()]),
    )
    before = asyncio.all_tasks()
    await runtime.run(TurnRequest(session_id="s", turn_id="t1", inputs=GO))
    leftover = [t for t in asyncio.all_tasks() - before if "_watch" in repr(t.get_coro())]
    assert leftover == []
    hub = BellHub.of(redis_client, runtime._keys.prefix)
    assert (hub.waiting, hub.subscriptions) == (0, 1), "heard on the hub, which let go after"
    listeners = [t for t in asyncio.all_tasks() - before if "_listen" in repr(t.get_coro())]
    assert listeners == []
    assert await redis_client.exists(runtime._keys.bell("s")) == 0, "a bell stores nothing"


async def test_a_stream_cut_before_it_finished_is_never_persisted(
    fake_llm: fp.FakeProvider, redis_client: aioredis.Redis
) -> None:
    fake_llm.script(fp.TextReply("The root cause is the conn", cut_after=3))
    client = openai.AsyncOpenAI(base_url=fake_llm.base_url, api_key="test", max_retries=0)
    runtime = Runtime(
        model=OpenAIChatModel(client, "m"), redis=redis_client, toolset=Toolset.of([])
    )
    outcome = await runtime.run(TurnRequest(session_id="s", turn_id="t1", inputs=GO))
    await client.close()
    assert isinstance(outcome.result, Failed)
    assert "ended before the response was complete" in outcome.result.error
    assert [m.role for m in await runtime.store.load("s")] == ["user"]


@pytest.mark.parametrize("mode", [IntentCheck.OFF, IntentCheck.ALWAYS])
@pytest.mark.parametrize("depth", [200_000, 5_000])
async def test_arguments_nested_absurdly_deep_are_a_tool_error_not_a_failed_turn(
    redis_client: aioredis.Redis, mode: IntentCheck, depth: int
) -> None:
    """Deeper than the JSON decoder recurses: answered as the call's error, the turn goes on."""
    ran: list[Mapping[str, Any]] = []

    async def query(args: Mapping[str, Any], ctx: Any) -> str:
        ran.append(args)
        return "ok"

    tool = Tool(name="db_query", description="q", parameters={"type": "object"}, handler=query)
    deep = '{"a":' + "[" * depth + "]" * depth + "}"
    model = ScriptedModel([calls(("db_query", deep)), text("done")])
    runtime = Runtime(
        model=model,
        redis=redis_client,
        toolset=Toolset.of([tool]),
        limits=LoopLimits(intent_check=mode),
    )
    session = f"deep-{mode}-{depth}"
    outcome = await runtime.run(
        TurnRequest(session_id=session, turn_id="t1", inputs=(UserMessage(content="go"),))
    )

    assert isinstance(outcome.result, Completed), outcome.result
    history = await runtime.store.load(session)
    validate_history(history)
    answers = [m for m in history if isinstance(m, ToolMessage)]
    assert len(answers) == 1 and "nest too deeply" in answers[0].content
    assert not ran, "a call whose arguments cannot be read never runs"
