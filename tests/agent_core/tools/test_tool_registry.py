"""The tool registry: risk, argument schemas and retries, through the real `Runtime`.

Why this way: the promises under test (a bad call is answered with an error the model can act on
and the history stays valid; a flaky idempotent tool is retried, a side-effecting one never; a
stop during a retry's backoff starts nothing new) are about what the model sees next. So each
runs a real turn against the fake OpenAI provider, whose strict history check answers a broken
history with the provider's 400: "the next request is a 200" is checked by the same rules
production applies. Tools are small counting fakes; retries use tiny delays, and the one test that
needs a long backoff waits on events, never on the clock. Rows of docs/reliability.md are named in
the tests' names and docstrings.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import pytest

from agent_core import (
    Completed,
    ConfigError,
    ControlPlane,
    HostAllowlist,
    Interruptibility,
    RetryPolicy,
    Risk,
    Stopped,
    Tool,
    ToolContext,
    ToolFailed,
    Toolset,
    TurnRequest,
    UserMessage,
    http_get_tool,
    validate_history,
)
from tests.fakes import openai_provider as fp
from tests.fakes.resolver import Answering

SESSION = "registry-1"
TINY = RetryPolicy(attempts=3, base_delay_s=0.001, max_delay_s=0.001)
"""Three attempts with waits of at most a millisecond."""
COUNT_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {"count": {"type": "integer"}},
    "required": ["count"],
    "additionalProperties": False,
}


class Counting:
    """A tool that counts its runs and fails its first `failures` runs with `error()`."""

    def __init__(
        self,
        name: str,
        *,
        failures: int = 0,
        error: Callable[[], Exception] = lambda: ToolFailed("flaky", retryable=True),
        **tool: Any,
    ) -> None:
        self.runs = 0
        self.failed = asyncio.Event()
        self._failures = failures
        self._error = error
        tool.setdefault("parameters", {"type": "object", "properties": {}})
        self.tool = Tool(name=name, description="counts its runs", handler=self._handle, **tool)

    async def _handle(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.runs += 1
        if self.runs <= self._failures:
            self.failed.set()
            raise self._error()
        return f"{self.tool.name} ok after {self.runs} run(s)"


def task() -> tuple[UserMessage, ...]:
    return (UserMessage(content="Is checkout healthy?", author="alice"),)


def tool_messages(request: fp.RecordedRequest) -> list[dict[str, Any]]:
    return [m for m in request.messages if m["role"] == "tool"]


def answered_ids(request: fp.RecordedRequest) -> tuple[list[str], list[str]]:
    """The call ids of the last assistant message, and the ids of the tool messages after it."""
    messages = request.messages
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    calls = [c["id"] for c in messages[last]["tool_calls"]]
    return calls, [m["tool_call_id"] for m in messages[last + 1 :] if m["role"] == "tool"]


async def run_turn(runtime: Any) -> Any:
    return await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))


async def answer_batch(
    make_runtime: Callable[..., Any], fake_llm: fp.FakeProvider, tool: Tool, *calls: fp.ToolCall
) -> tuple[Any, list[dict[str, Any]]]:
    """Run a turn whose model makes `calls`, then answers; return its outcome and the tool results.

    The turn must complete with both model requests answered 200 (a 400 would mean the batch
    left the history broken), and the persisted history must be valid.
    """
    fake_llm.script(fp.ToolCallsReply(calls), fp.TextReply("Done."))
    runtime = make_runtime(tool)
    outcome = await run_turn(runtime)
    assert isinstance(outcome.result, Completed)
    assert [r.status for r in fake_llm.requests] == [200, 200]
    validate_history(await runtime.store.load(SESSION))
    return outcome, tool_messages(fake_llm.requests[1])


# --- A2: unknown tools and arguments that break the schema ---


async def test_a2_unknown_tool_and_schema_violations_answer_errors(make_runtime, fake_llm) -> None:
    """docs/reliability.md A2: rejected before execution (allowlist + schema), error tool results.

    An unknown tool, a wrong type, a missing required field and an extra one are each answered
    with an error naming the problem; the handler never runs; the model's next request is a 200.
    """
    typed = Counting("count_pods", parameters=COUNT_SCHEMA)
    _, results = await answer_batch(
        make_runtime,
        fake_llm,
        typed.tool,
        fp.ToolCall("delete_cluster", {"name": "prod"}),
        fp.ToolCall("count_pods", {"count": "three"}),
        fp.ToolCall("count_pods", {}),
        fp.ToolCall("count_pods", {"count": 3, "force": True}),
    )
    assert typed.runs == 0
    unknown, wrong_type, missing, extra = results
    assert "unknown tool 'delete_cluster'" in unknown["content"]
    assert "count_pods" in unknown["content"]  # the offered tools are listed
    assert "$.count" in wrong_type["content"] and "not of type 'integer'" in wrong_type["content"]
    assert "'count' is a required property" in missing["content"]
    assert "'force' was unexpected" in extra["content"]
    for message in results:
        assert message["content"].startswith("error: ")
        assert "Traceback" not in message["content"]


async def test_a2_valid_arguments_reach_the_handler(make_runtime, fake_llm) -> None:
    """docs/reliability.md A2, the other side: arguments that match the schema run the handler."""
    typed = Counting("count_pods", parameters=COUNT_SCHEMA)
    _, results = await answer_batch(
        make_runtime, fake_llm, typed.tool, fp.ToolCall("count_pods", {"count": 3})
    )
    assert typed.runs == 1
    assert [m["content"] for m in results] == ["count_pods ok after 1 run(s)\n[step 1]"]


# --- H2: one call of a parallel batch has invalid JSON ---


async def test_h2_invalid_json_in_a_parallel_batch_answers_every_id(make_runtime, fake_llm) -> None:
    """H2: the bad call gets an error result, the others run, all ids answered."""
    probe = Counting("probe")
    _, results = await answer_batch(
        make_runtime,
        fake_llm,
        probe.tool,
        fp.ToolCall("probe", {}),
        fp.ToolCall("probe", '{"target": "db'),  # cut off mid-string
        fp.ToolCall("probe", {}),
    )
    assert probe.runs == 2
    calls, answered = answered_ids(fake_llm.requests[1])
    assert answered == calls and len(set(calls)) == 3  # in order, each exactly once
    first, bad, third = results
    assert bad["content"].startswith("error: arguments are not valid JSON")
    assert first["content"].startswith("probe ok") and third["content"].startswith("probe ok")


# --- retries ---


@pytest.mark.parametrize(
    "error",
    [lambda: ToolFailed("backend flapped", retryable=True), lambda: TimeoutError()],
    ids=["retryable-ToolFailed", "TimeoutError"],
)
async def test_flaky_idempotent_tool_is_retried_until_it_succeeds(
    make_runtime, fake_llm, error
) -> None:
    """Two retryable failures, then success: three runs, and the model sees only the success."""
    flaky = Counting("flaky_read", failures=2, error=error, retry=TINY)
    outcome, results = await answer_batch(
        make_runtime, fake_llm, flaky.tool, fp.ToolCall("flaky_read")
    )
    assert flaky.runs == 3
    assert [m["content"] for m in results] == ["flaky_read ok after 3 run(s)\n[step 1]"]
    kinds = [e.kind for e in outcome.diagnostics.trace if e.kind in ("tool_start", "tool_retry")]
    assert kinds == ["tool_start", "tool_retry", "tool_retry"]


@pytest.mark.parametrize(
    ("counting", "runs", "answer"),
    [
        # A tool that keeps failing runs `attempts` times; the model sees the last error.
        (lambda: Counting("broken_read", failures=10, retry=TINY), 3, "error: flaky"),
        # A tool that is not idempotent is never retried: a retry could act twice. (A
        # side-effecting tool waits for approval first: tests/bot/control/test_approvals.py.)
        (lambda: Counting("append_note", failures=1, idempotent=False), 1, "error: flaky"),
        # An idempotent tool's plain `ToolFailed` (a refused URL, say) is answered at once.
        (
            lambda: Counting("strict_read", failures=1, error=lambda: ToolFailed("no"), retry=TINY),
            1,
            "error: no",
        ),
    ],
    ids=["attempts-exhausted", "non-idempotent", "not-retryable"],
)
async def test_failed_calls_run_as_often_as_the_policy_allows(
    make_runtime, fake_llm, counting: Callable[[], Counting], runs: int, answer: str
) -> None:
    """Retries only for idempotent tools, only for retryable errors, and at most `attempts`."""
    tool = counting()
    _, results = await answer_batch(make_runtime, fake_llm, tool.tool, fp.ToolCall(tool.tool.name))
    assert tool.runs == runs
    assert [m["content"] for m in results] == [f"{answer}\n[step 1]"]  # its step label last


class FixedDelay(RetryPolicy):
    """A policy whose backoff is always `max_delay_s`: the stop must land inside the wait."""

    def delay_s(self, failed_attempt: int, draw: Callable[[], float] = random.random) -> float:
        return self.max_delay_s


@pytest.mark.parametrize(
    ("interruptibility", "answer"),
    [
        # An abortable call answers "interrupted", like a call cut while it runs.
        (Interruptibility.ABORTABLE, "interrupted by a stop (dana) before it finished"),
        # Not even a must-complete tool's retry starts after a stop: its last error stands.
        (Interruptibility.MUST_COMPLETE, "error: flaky"),
    ],
    ids=["abortable", "must-complete"],
)
async def test_stop_during_backoff_starts_no_new_attempt(
    make_runtime, fake_llm, redis_client, interruptibility: Interruptibility, answer: str
) -> None:
    """docs/design.md §Invariants I3 during a retry: a stop in the backoff starts no new attempt.

    The call is answered (the batch closes, the history stays valid) and no model request
    follows.
    """
    slow = FixedDelay(attempts=3, base_delay_s=60.0, max_delay_s=60.0)
    flaky = Counting("flaky", failures=2, retry=slow, interruptibility=interruptibility)
    fake_llm.script(fp.ToolCallsReply([fp.ToolCall("flaky")]), fp.TextReply("never sent"))
    runtime = make_runtime(flaky.tool)
    run = asyncio.create_task(run_turn(runtime))
    await flaky.failed.wait()
    await ControlPlane(redis_client).stop(SESSION, "t1", by="dana")
    outcome = await run

    assert isinstance(outcome.result, Stopped)
    assert flaky.runs == 1
    assert len(fake_llm.requests) == 1
    history = await runtime.store.load(SESSION)
    validate_history(history)
    assert history[-1].content == answer


# --- construction: limits come from configuration, checked up front ---


async def _noop(args: Mapping[str, Any], ctx: ToolContext) -> str:
    return ""


def make_tool(**fields: Any) -> Tool:
    fields.setdefault("parameters", {"type": "object"})
    return Tool(name="t", description="d", handler=_noop, **fields)


def test_idempotence_defaults_to_the_risk() -> None:
    assert make_tool().idempotent is True
    assert make_tool(risk=Risk.SIDE_EFFECT).idempotent is False
    assert make_tool(risk=Risk.DESTRUCTIVE).idempotent is False
    assert make_tool(risk=Risk.SIDE_EFFECT, idempotent=True).idempotent is True
    assert make_tool().retry.attempts == 1


@pytest.mark.parametrize(
    "build",
    [
        lambda: RetryPolicy(attempts=4),
        lambda: RetryPolicy(attempts=0),
        lambda: RetryPolicy(base_delay_s=5, max_delay_s=1),
        lambda: make_tool(risk=Risk.SIDE_EFFECT, retry=RetryPolicy(attempts=2)),
        lambda: make_tool(idempotent=False, retry=RetryPolicy(attempts=3)),
        lambda: make_tool(timeout_s=0),
        lambda: Toolset.of([make_tool(parameters={"type": "no-such-type"})]),
        lambda: Toolset.of([make_tool(parameters={"required": "count"})]),
    ],
    ids=[
        "4-attempts",
        "0-attempts",
        "base-above-max",
        "retrying-side-effect",
        "retrying-non-idempotent",
        "zero-timeout",
        "bad-type-in-schema",
        "bad-required-in-schema",
    ],
)
def test_invalid_configuration_is_a_config_error(build: Callable[[], object]) -> None:
    with pytest.raises(ConfigError):
        build()


def test_backoff_is_exponential_with_full_jitter() -> None:
    policy = RetryPolicy(attempts=3, base_delay_s=1.0, max_delay_s=3.0)
    assert [policy.delay_s(n, draw=lambda: 0.5) for n in (1, 2, 3)] == [0.5, 1.0, 1.5]
    assert policy.delay_s(1, draw=lambda: 0.0) == 0.0  # full jitter reaches zero


# --- http_get's declaration and which of its failures are retryable ---


def http_get_over(handler: Callable[[httpx.Request], httpx.Response]) -> tuple[Tool, Any]:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    # The name resolves to a documentation address (RFC 5737) the allowlist names explicitly.
    allow = HostAllowlist.parse("svc.internal,192.0.2.10")
    return http_get_tool(allow, client, resolver=Answering("192.0.2.10")), client


def test_http_get_declares_a_read_only_idempotent_retrying_tool() -> None:
    tool, _ = http_get_over(lambda request: httpx.Response(200))
    assert tool.risk is Risk.READ_ONLY and tool.idempotent is True
    assert 2 <= tool.retry.attempts <= 3
    assert tool.timeout_s == 10 and tool.interruptible


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def _read_timeout(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("no answer", request=request)


@pytest.mark.parametrize(
    ("handler", "retryable"),
    [
        (_refuse, True),
        (lambda request: httpx.Response(502, text="bad gateway"), True),
        (lambda request: httpx.Response(504, text="gateway timeout"), True),
        (_read_timeout, False),
    ],
    ids=["connect-error", "502", "504", "read-timeout"],
)
async def test_http_get_failures_retryable_only_when_transient(handler, retryable) -> None:
    tool, client = http_get_over(handler)
    async with client:
        with pytest.raises(ToolFailed) as failed:
            await tool.handler({"url": "http://svc.internal/health"}, None)  # type: ignore[arg-type]
    assert failed.value.retryable is retryable


async def test_http_get_returns_an_apps_own_5xx_as_its_answer() -> None:
    """A 503 from the app is the diagnosis (a health check naming its failing dependency)."""
    tool, client = http_get_over(lambda request: httpx.Response(503, text="payments-db down"))
    async with client:
        text = await tool.handler({"url": "http://svc.internal/health"}, None)  # type: ignore[arg-type]
    assert text.startswith("HTTP 503 Service Unavailable\npayments-db down")


async def test_a_call_past_its_deadline_is_answered_as_a_timeout_and_not_retried(
    make_runtime, fake_llm
) -> None:
    """A hung dependency would make every retry wait the whole timeout again."""

    class Hung(Counting):
        async def _handle(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
            self.runs += 1
            await asyncio.sleep(30)
            return "never"

    hung = Hung("hung_read", retry=TINY, timeout_s=0.05)
    _, results = await answer_batch(make_runtime, fake_llm, hung.tool, fp.ToolCall("hung_read"))
    assert hung.runs == 1
    assert "timed out" in results[0]["content"]


def test_a_subset_of_tools_checks_arguments_without_compiling_a_schema_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Toolset.only` (once per turn that names its tools) shares the compiled schemas."""
    from agent_core.tools import _base

    counted = Counting("count", parameters=COUNT_SCHEMA).tool
    toolset = Toolset.of([counted, Counting("other").tool])
    compiled: list[str] = []
    compile_one = _base.ArgumentSchema  # type: ignore[attr-defined]

    def counting(name: str, schema: Mapping[str, Any]) -> Any:
        compiled.append(name)
        return compile_one(name, schema)

    monkeypatch.setattr(_base, "ArgumentSchema", counting)
    subset = toolset.only(["count"])
    assert compiled == []
    assert [t.name for t in subset] == ["count"] and subset.get("other") is None
    subset.check_arguments("count", {"count": 2})
    with pytest.raises(ToolFailed, match=r"invalid arguments: \$: 'count' is a required property"):
        subset.check_arguments("count", {})
    assert len(toolset) == 2  # the whole set is untouched
