"""The runtime within a provider's context window, over HTTP, with a real Redis.

Why this way: the promise is what a provider with a small window sees, so the model is the fake
OpenAI-compatible server enforcing a 16,000-token window counted its own way (not with
chatops's estimate) and answering OpenAI's exact `context_length_exceeded` 400 past it, reached
through the real openai SDK and `OpenAIChatModel`. The history lives in a real Redis. The fake
also applies OpenAI's history rules to every request, so "every request valid" is checked by
the rules production would meet; the requests it recorded are checked again here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from agent_core import (
    Completed,
    Failed,
    Runtime,
    Tool,
    ToolContext,
    ToolMessage,
    TurnRequest,
    UserMessage,
    validate_history,
)
from agent_core._context_summary import SUMMARY_INSTRUCTIONS
from tests.fakes import openai_provider as fp

SESSION = "incident-window"
WINDOW = 16_000
RESULT_CHARS = 4_000
_SUMMARY_START = SUMMARY_INSTRUCTIONS.split("{", 1)[0]


async def _query(args: Mapping[str, Any], ctx: ToolContext) -> str:
    query = str(args.get("query", ""))
    line = f"{query} checkout-7f9c pod=checkout-{len(query)} cpu=0.93 mem=71% p99=2.4s errors=5xx\n"
    return (line * (RESULT_CHARS // len(line) + 1))[:RESULT_CHARS]


METRICS = Tool(
    name="prometheus_query",
    description="Run an instant PromQL query.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
    handler=_query,
)


class Script:
    """Answers the analysis's requests in order; summary requests get a summary."""

    def __init__(self) -> None:
        self.replies: list[fp.Reply] = []
        self.summaries = 0
        self.queries = itertools.count()

    def analysis(self, batches: int, per_batch: int, answer: str) -> None:
        for _ in range(batches):
            calls = [
                fp.ToolCall(
                    "prometheus_query", {"query": f"rate(http_errors[{next(self.queries)}m])"}
                )
                for _ in range(per_batch)
            ]
            self.replies.append(fp.ToolCallsReply(calls))
        self.replies.append(fp.TextReply(answer))

    def __call__(self, messages: list[dict[str, Any]]) -> fp.Reply:
        first = messages[0].get("content") or ""
        if str(first).startswith(_SUMMARY_START):
            self.summaries += 1
            return fp.TextReply(f"Summary {self.summaries}: error rates checked, all at 5xx.")
        return self.replies.pop(0)


async def run_turn(runtime: Runtime, n: int, task: str) -> Any:
    request = TurnRequest(
        session_id=SESSION,
        turn_id=f"t{n}",
        inputs=(UserMessage(content=task, author="alice"),),
    )
    return await runtime.run(request)


def check_requests(fake: fp.FakeProvider) -> None:
    for request in fake.requests:
        assert request.status == 200
        assert request.prompt_tokens <= WINDOW
        assert fp.check_history(request.messages) is None


async def test_forty_results_and_five_earlier_analyses_fit_a_16k_window(
    make_runtime: Callable[..., Runtime], fake_llm: fp.FakeProvider
) -> None:
    fake_llm.set_context_window(WINDOW)
    script = Script()
    fake_llm.respond_with(script)
    runtime = make_runtime(METRICS, context_window_tokens=WINDOW, answer_reserve_tokens=4_096)
    for n in range(5):  # five earlier analyses, each with long findings no stub can shrink
        script.analysis(batches=1, per_batch=4, answer=f"Finding {n}: " + "the gateway " * 500)
        outcome = await run_turn(runtime, n, f"incident {n}: why is checkout failing?")
        assert isinstance(outcome.result, Completed), outcome.result
    script.analysis(batches=10, per_batch=4, answer="The payments database is saturated [3].")
    outcome = await run_turn(runtime, 5, "What is going on with checkout now?")

    assert isinstance(outcome.result, Completed), outcome.result
    assert outcome.result.answer == "The payments database is saturated [3]."
    check_requests(fake_llm)
    assert script.replies == []
    assert script.summaries >= 1  # past the stubs, the older turns were summarised
    largest = max(r.prompt_tokens for r in fake_llm.requests)
    assert largest > WINDOW // 2  # the window was used, not merely avoided
    sent_results = [m for r in fake_llm.requests for m in r.messages if m["role"] == "tool"]
    assert any(str(m["content"]).startswith("[result of prometheus_query(") for m in sent_results)
    history = await runtime.store.load(SESSION)
    validate_history(history)
    results = [m for m in history if isinstance(m, ToolMessage)]
    assert len(results) == 5 * 4 + 40
    assert all(RESULT_CHARS <= len(m.content) for m in results)  # the originals, never stubs
    assert not any(m.content.startswith("[result of") for m in results)


async def test_a_context_length_exceeded_gets_one_harder_compaction_and_a_retry(
    make_runtime: Callable[..., Runtime], fake_llm: fp.FakeProvider
) -> None:
    """The runtime believes in 128k; the provider's window is 16k: one 400, then it fits."""
    fake_llm.set_context_window(WINDOW)
    script = Script()
    fake_llm.respond_with(script)
    runtime = make_runtime(METRICS)  # the default window, 128,000 tokens
    script.analysis(batches=5, per_batch=4, answer="The gateway drops connections.")
    outcome = await run_turn(runtime, 0, "Why is checkout failing?")

    assert isinstance(outcome.result, Completed), outcome.result
    statuses = [r.status for r in fake_llm.requests]
    assert statuses.count(400) == 1
    rejected = statuses.index(400)
    assert fake_llm.requests[rejected].prompt_tokens > WINDOW
    assert all(r.prompt_tokens <= WINDOW for r in fake_llm.requests[rejected + 1 :])
    kinds = [entry.kind for entry in outcome.diagnostics.trace]
    assert kinds.count("context_too_long") == 1
    history = await runtime.store.load(SESSION)
    assert len([m for m in history if isinstance(m, ToolMessage)]) == 20


async def test_a_second_context_length_exceeded_fails_the_turn_with_a_clear_message(
    make_runtime: Callable[..., Runtime], fake_llm: fp.FakeProvider
) -> None:
    fake_llm.set_context_window(50)  # not even the system prompt and the tools fit
    fake_llm.respond_with(Script())
    runtime = make_runtime(METRICS)
    outcome = await run_turn(runtime, 0, "Why is checkout failing?")

    assert isinstance(outcome.result, Failed)
    assert outcome.result.error.startswith(
        "the conversation does not fit the model's context window even compacted: "
        "This model's maximum context length is 50 tokens."
    )
    assert "Traceback" not in outcome.result.error
    assert [r.status for r in fake_llm.requests] == [400, 400]
    history = await runtime.store.load(SESSION)
    validate_history(history)
