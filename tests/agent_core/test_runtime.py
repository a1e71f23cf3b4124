"""The runtime through its public API, against the fake provider and a real Redis.

Why this way: the promises under test (a steer or stop never corrupts the history, nothing starts
after a stop, a tombstoned turn never calls the model) are about ordering between three real
parties: the openai SDK streaming from an HTTP server, Redis, and tools doing real HTTP. The fake
provider rejects any broken history with the provider's own 400, so "no 400 ever" is checked by
the same rules production would apply. Nothing of our own is mocked; tests wait on events
(requests arriving at the slow service, the provider's records), never on wall-clock sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import openai
import pytest
import redis.asyncio as aioredis

from agent_core import (
    Cancelled,
    Completed,
    ControlPlane,
    Dispatched,
    Drained,
    Failed,
    HostAllowlist,
    Interruptibility,
    Keys,
    OpenAIChatModel,
    RunEvent,
    Runtime,
    Steered,
    Stopped,
    Tool,
    ToolContext,
    ToolMessage,
    Toolset,
    ToolStatus,
    TurnRequest,
    UserKind,
    UserMessage,
    http_get_tool,
    validate_history,
)
from agent_core._outcome import Awaiting
from tests.fakes import openai_provider as fp

SESSION = "incident-42"


def task(text: str = "Why is checkout returning 503?") -> tuple[UserMessage, ...]:
    return (UserMessage(content=text, author="alice"),)


def get(url: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": url})


class Probe:
    """A must-complete (or abortable) tool that holds until released, and counts its runs."""

    def __init__(self, name: str, interruptibility: Interruptibility) -> None:
        self.runs = 0
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.tool = Tool(
            name=name,
            description="waits for the test",
            parameters={"type": "object", "properties": {}},
            handler=self._handle,
            interruptibility=interruptibility,
        )

    async def _handle(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.runs += 1
        self.started.set()
        await self.release.wait()
        return "done"


@pytest.fixture
def control(redis_client: aioredis.Redis) -> ControlPlane:
    return ControlPlane(redis_client)


def statuses(fake: fp.FakeProvider) -> list[int]:
    return [r.status for r in fake.requests]


def tool_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "tool"]


async def test_plain_answer_completes(make_runtime, fake_llm) -> None:
    fake_llm.script(fp.TextReply("Checkout is fine."))
    runtime = make_runtime()
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    assert outcome.result.answer == "Checkout is fine."
    assert outcome.diagnostics.usage.total_tokens == 15
    history = await runtime.store.load(SESSION)
    assert [m.role for m in history] == ["user", "assistant"]


async def test_steer_during_three_parallel_probes(
    make_runtime, fake_llm, slow_service, control
) -> None:
    """The acceptance scenario: a steer while 3 http_get calls are in flight."""
    fake_llm.script(
        fp.ToolCallsReply([get(slow_service.url(f"/hold/{n}")) for n in ("a", "b", "c")]),
        fp.TextReply("The gateway is dropping connections."),
    )
    runtime = make_runtime()
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await slow_service.wait_for_hits(3)
    await control.steer(SESSION, "Forget the DB, look at the gateway.", author="bob")
    first = await run

    assert isinstance(first.result, Steered)
    assert first.diagnostics.steered and first.reason == "steered"
    assert [h.outcome for h in slow_service.hits] == ["abandoned"] * 3

    second = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t2"))
    assert isinstance(second.result, Completed)
    assert statuses(fake_llm) == [200, 200]  # never a 400
    sent = fake_llm.requests[1].messages
    roles = [m["role"] for m in sent]
    assert roles == ["system", "user", "assistant", "tool", "tool", "tool", "user"]
    assert all("interrupted by a steer" in m["content"] for m in tool_messages(sent))
    assert "bob" in sent[-1]["content"] and "look at the gateway" in sent[-1]["content"]
    validate_history(await runtime.store.load(SESSION))


async def test_steer_without_cancelling_tools_waits_for_the_batch(
    make_runtime, fake_llm, slow_service, control
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([get(slow_service.url(f"/hold/{n}")) for n in ("a", "b")]),
        fp.TextReply("done"),
    )
    runtime = make_runtime(steer_cancels_tools=False)
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await slow_service.wait_for_hits(2)
    await control.steer(SESSION, "also check the CDN", author="carol")
    slow_service.release("a")
    slow_service.release("b")
    outcome = await run
    assert isinstance(outcome.result, Steered)
    history = await runtime.store.load(SESSION)
    results = [m for m in history if isinstance(m, ToolMessage)]
    assert [r.status for r in results] == [ToolStatus.OK, ToolStatus.OK]
    assert "connection pool exhausted" in results[0].content


async def test_stop_mid_batch_starts_nothing_new(
    make_runtime, fake_llm, slow_service, control
) -> None:
    keeper = Probe("snapshot_disk", Interruptibility.MUST_COMPLETE)
    fake_llm.script(
        fp.ToolCallsReply(
            [
                get(slow_service.url("/hold/a")),
                get(slow_service.url("/hold/b")),
                fp.ToolCall("snapshot_disk", {}),
            ]
        ),
        fp.TextReply("should never be requested"),
    )
    runtime = make_runtime(keeper.tool)
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await slow_service.wait_for_hits(2)
    await keeper.started.wait()
    await control.stop(SESSION, "t1", by="dave")
    await slow_service.wait_for_outcomes("abandoned", 2)  # the abortable probes were cut
    assert not run.done(), "a must-complete tool finishes before the turn ends"
    keeper.release.set()
    outcome = await run

    assert isinstance(outcome.result, Stopped) and outcome.result.by == "dave"
    assert len(fake_llm.requests) == 1
    trace = [e.kind for e in outcome.diagnostics.trace]
    after_stop = trace[trace.index("stop_accepted") :]
    assert "model_request" not in after_stop and "tool_start" not in after_stop
    history = await runtime.store.load(SESSION)
    validate_history(history)
    results = {m.name + str(i): m for i, m in enumerate(history) if isinstance(m, ToolMessage)}
    assert [m.status for m in results.values()] == [
        ToolStatus.INTERRUPTED,
        ToolStatus.INTERRUPTED,
        ToolStatus.OK,
    ]
    assert "interrupted by a stop (dave)" in history[2].content
    assert keeper.runs == 1


async def test_stop_during_model_stream_discards_partial(make_runtime, fake_llm, control) -> None:
    fake_llm.script(fp.TextReply("The root cause is probably the ", stall_after=3))
    runtime = make_runtime()
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await fake_llm.wait_for_requests(1)
    await control.stop(SESSION, "t1", by="erin")
    outcome = await run
    assert isinstance(outcome.result, Stopped)
    await fake_llm.wait_for_aborted_streams(1)
    history = await runtime.store.load(SESSION)
    assert [m.role for m in history] == ["user"], "a partial response is never persisted"


async def test_tombstoned_turn_never_calls_the_model(make_runtime, fake_llm, control) -> None:
    await control.stop(SESSION, "t9", by="frank")
    runtime = make_runtime()
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t9", inputs=task()))
    assert isinstance(outcome.result, Cancelled)
    assert outcome.reason == "cancelled"
    assert fake_llm.requests == []
    assert await runtime.store.load(SESSION) == []
    ttl = await runtime._redis.ttl(Keys().tombstone(SESSION, "t9"))
    assert ttl > 23 * 3600, "a tombstone outlives a start event that arrives hours late"


@pytest.mark.parametrize(
    ("method", "expected"), [("raise_dispatch", Dispatched), ("raise_await", Awaiting)]
)
async def test_dispatch_and_await_end_the_turn_at_the_cut(
    make_runtime, fake_llm, slow_service, method, expected
) -> None:
    async def hand_off(args: Mapping[str, Any], ctx: ToolContext) -> str:
        getattr(ctx, method)()
        return "child started: child-1"

    tool = Tool(name="hand_off", description="", parameters={"type": "object"}, handler=hand_off)
    fake_llm.script(fp.ToolCallsReply([fp.ToolCall("hand_off", {}), get(slow_service.url("/ok"))]))
    runtime = make_runtime(tool)
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, expected)
    assert len(fake_llm.requests) == 1  # no busy-waiting model request
    history = await runtime.store.load(SESSION)
    validate_history(history)
    assert [m.role for m in history] == ["user", "assistant", "tool", "tool"]


async def test_drain_suspends_at_the_cut_and_the_next_turn_resumes(
    make_runtime, fake_llm, slow_service, control
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([get(slow_service.url("/hold/a"))]), fp.TextReply("resumed and done")
    )
    runtime = make_runtime()
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await slow_service.wait_for_hits(1)
    await control.drain(SESSION, "t1")
    slow_service.release("a")  # drain does not cancel tools: the batch finishes
    first = await run
    assert isinstance(first.result, Drained)
    second = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1-resume"))
    assert isinstance(second.result, Completed)
    assert tool_messages(fake_llm.requests[1].messages)[0]["content"].startswith("HTTP 200")


async def test_steer_wins_over_drain_at_the_same_cut(
    make_runtime, fake_llm, slow_service, control
) -> None:
    fake_llm.script(fp.ToolCallsReply([get(slow_service.url("/hold/a"))]))
    runtime = make_runtime(steer_cancels_tools=False)
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await slow_service.wait_for_hits(1)
    await control.drain(SESSION, "t1")
    await control.steer(SESSION, "it is the gateway", author="bob")
    slow_service.release("a")
    outcome = await run
    assert isinstance(outcome.result, Steered)
    assert [p.found for p in outcome.diagnostics.probes] == [None, "steer"]


async def test_bad_calls_become_error_results_the_model_reads(
    make_runtime, fake_llm, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply(
            [
                get("http://example.com/admin"),
                fp.ToolCall("http_get", '{"url": '),
                fp.ToolCall("kubectl_delete", {"pod": "db-0"}),
                get(slow_service.url("/ok")),
            ]
        ),
        fp.TextReply("Only the service probe worked."),
    )
    runtime = make_runtime()
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    results = [m["content"] for m in tool_messages(fake_llm.requests[1].messages)]
    assert "not in CHATOPS_HTTP_ALLOWLIST" in results[0]
    assert "not valid JSON" in results[1]
    assert "unknown tool 'kubectl_delete'" in results[2]
    assert results[3].startswith("HTTP 200 OK\nservice healthy")


async def test_duplicate_call_ids_are_renamed_before_persisting(
    make_runtime, fake_llm, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("http_get", {"url": slow_service.url("/ok")}, id="call_0"),
                fp.ToolCall("http_get", {"url": slow_service.url("/ok")}, id="call_0"),
            ]
        ),
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")}, id="call_0")]),
        fp.TextReply("done"),
    )
    runtime = make_runtime()
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    assert statuses(fake_llm) == [200, 200, 200]
    ids = [m["tool_call_id"] for m in tool_messages(fake_llm.requests[2].messages)]
    assert ids == ["call_0", "call_0~2", "call_0~3"]


async def test_legacy_broken_history_is_repaired_before_the_request(
    make_runtime, fake_llm, redis_client
) -> None:
    from agent_core import AssistantMessage, ToolCall, dump_message

    dangling = AssistantMessage(
        tool_calls=(ToolCall(id="call_old", name="http_get", arguments='{"url": "http://x"}'),)
    )
    await redis_client.rpush(
        Keys().history(SESSION),
        dump_message(UserMessage(content="earlier question")),
        dump_message(dangling),
    )
    fake_llm.script(fp.TextReply("fresh answer"))
    runtime = make_runtime()
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    assert statuses(fake_llm) == [200]
    assert outcome.diagnostics.repairs
    validate_history(await runtime.store.load(SESSION))


async def test_history_400_is_repaired_once_then_fails_clearly(make_runtime, fake_llm) -> None:
    anthropic = (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
        "after: toolu_01. Each `tool_use` block must have a corresponding `tool_result` "
        "block in the next message."
    )
    fake_llm.script(fp.ErrorReply(400, anthropic), fp.ErrorReply(400, anthropic))
    runtime = make_runtime(max_retries=2)
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Failed)
    assert "rejected the conversation history" in outcome.result.error
    assert "tool_use" in outcome.result.error
    assert statuses(fake_llm) == [400, 400]  # one retry after the repair, never a blind loop


async def test_rate_limit_is_retried_by_the_client(make_runtime, fake_llm) -> None:
    fake_llm.script(
        fp.ErrorReply(429, "Rate limit reached", retry_after="0.01"), fp.TextReply("ok")
    )
    runtime = make_runtime(max_retries=2)
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    assert statuses(fake_llm) == [429, 200]


async def test_unavailable_model_fails_the_turn_with_a_message(make_runtime, fake_llm) -> None:
    fake_llm.script(fp.ErrorReply(503, "overloaded"))
    runtime = make_runtime(max_retries=0)
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Failed)
    assert "overloaded" in outcome.result.error


async def test_journal_keeps_finished_results_of_the_open_batch(
    fake_llm, redis_client, slow_service, http
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([get(slow_service.url("/ok")), get(slow_service.url("/hold/a"))]),
        fp.TextReply("done"),
    )
    first_result = asyncio.Event()

    async def sink(event: RunEvent) -> None:
        if event.responses:
            first_result.set()

    client = openai.AsyncOpenAI(base_url=fake_llm.base_url, api_key="test", max_retries=0)
    allow = HostAllowlist.parse(f"127.0.0.1:{slow_service.port}")
    runtime = Runtime(
        model=OpenAIChatModel(client, "m"),
        redis=redis_client,
        toolset=Toolset.of([http_get_tool(allow, http)]),
        sink=sink,
    )
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await first_result.wait()  # results are journaled before the sink hears of them
    batch, results = await runtime.store.journal(SESSION, "t1")
    assert batch is not None and len(batch.tool_calls) == 2
    assert [r.content.split("\n")[0] for r in results.values()] == ["HTTP 200 OK"]
    assert await runtime.store.load(SESSION) == list(task()), "open batch not in the history"
    slow_service.release("a")
    assert isinstance((await run).result, Completed)
    assert await redis_client.exists(Keys().journal(SESSION, "t1")) == 0
    await client.close()


async def test_steer_is_delivered_as_a_correction_from_a_named_person(
    make_runtime, fake_llm, control
) -> None:
    await control.steer(SESSION, "first", author="bob")
    await control.steer(SESSION, "second", author="carol")
    fake_llm.script(fp.TextReply("ok"))
    runtime = make_runtime()
    await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    sent = fake_llm.requests[0].messages
    assert [m["role"] for m in sent] == ["system", "user", "user", "user"]
    assert "Correction from bob" in sent[2]["content"] and sent[2]["content"].endswith("first")
    assert "original task still stands" in sent[3]["content"]
    history = await runtime.store.load(SESSION)
    assert [m.kind for m in history if isinstance(m, UserMessage)] == [
        UserKind.TASK,
        UserKind.STEER,
        UserKind.STEER,
    ]


async def test_a_steer_absorbed_at_turn_start_does_not_cancel_that_turns_tools(
    make_runtime, fake_llm, slow_service, control
) -> None:
    """Regression: the steer's wake-up ring outlived the steer and aborted every later tool."""
    await control.steer(SESSION, "quick follow-up while nothing ran", author="bob")
    fake_llm.script(
        fp.ToolCallsReply([get(slow_service.url("/ok"))]),
        fp.ToolCallsReply([get(slow_service.url("/ok"))]),
        fp.TextReply("done"),
    )
    runtime = make_runtime()
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    history = await runtime.store.load(SESSION)
    results = [m for m in history if isinstance(m, ToolMessage)]
    assert [r.status for r in results] == [ToolStatus.OK, ToolStatus.OK]
    assert [p.found for p in outcome.diagnostics.probes] == [None, None, None]


async def test_intent_check_a_stop_during_the_model_request_means_its_calls_never_start(
    make_runtime, fake_llm, slow_service, control
) -> None:
    """The batch a response asks for does not start when a stop came while it was requested.

    (Issue 7, intent check: "the fetch still ran after I said stop".) The response has streamed
    its tool calls but not finished when the person stops; none of its calls may run.
    """
    calls = [get(slow_service.url("/ok")), get(slow_service.url("/ok"))]
    fake_llm.script(fp.ToolCallsReply(calls, stall_after=6))
    runtime = make_runtime()
    run = asyncio.create_task(
        runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    )
    await fake_llm.wait_for_requests(1)
    await control.stop(SESSION, "t1", by="gina")
    outcome = await run
    assert isinstance(outcome.result, Stopped) and outcome.result.by == "gina"
    assert slow_service.hits == []  # not one of the calls started
    assert "tool_start" not in [e.kind for e in outcome.diagnostics.trace]
    validate_history(await runtime.store.load(SESSION))
