"""Budgets end a runaway turn with one tool-less wrap-up request (docs/reliability.md H12, A8).

Through the real runtime, the fake OpenAI provider (which refuses a broken history with
OpenAI's own 400) and a real Redis: the model is scripted to loop, to ask for too much at once,
or to burn tokens, and the tests count what ran and what the provider was sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core import Completed, TurnRequest, UserMessage, validate_history
from agent_core._budget import Budget
from agent_core._errors import ConfigError
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import open_bot
from tests.slack_view import card_text, final_card

SESSION = "budget-session"


def probe(slow_service: Any, path: str = "/health") -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": slow_service.url(path)})


async def run_turn(runtime: Any) -> Any:
    task = (UserMessage(content="Why is checkout slow?", author="alice"),)
    return await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task))


def tool_results(request: fp.RecordedRequest) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "tool"]


async def assert_wrapped_up(
    runtime: Any, fake_llm: fp.FakeProvider, outcome: Any, why: str
) -> None:
    """The last request offered no tools and asked for the answer; the turn completed with it."""
    last = fake_llm.requests[-1]
    assert not last.tools  # the wrap-up request offers no tool at all
    assert last.messages[-1]["role"] == "user" and why in last.messages[-1]["content"]
    assert all(r.status == 200 for r in fake_llm.requests)  # every history was valid
    assert isinstance(outcome.result, Completed)
    assert why in outcome.result.cutoff
    validate_history(await runtime.store.load(SESSION))


async def test_h12_step_limit_wraps_up_with_one_tool_less_request(
    make_runtime, fake_llm, slow_service
) -> None:
    fake_llm.script(
        *(fp.ToolCallsReply([probe(slow_service, f"/health?n={n}")]) for n in range(3)),
        fp.TextReply("Checkout is slow because of the database."),
    )
    runtime = make_runtime(budget=Budget(max_model_requests=3))
    outcome = await run_turn(runtime)

    assert len(fake_llm.requests) == 4  # three steps with tools, then the wrap-up
    assert [bool(r.tools) for r in fake_llm.requests] == [True, True, True, False]
    assert len(slow_service.hits) == 3
    await assert_wrapped_up(runtime, fake_llm, outcome, "step limit reached (3 model requests)")
    assert outcome.result.answer == "Checkout is slow because of the database."


async def test_a_request_caps_its_own_steps_below_the_runtime_budget(
    make_runtime, fake_llm, slow_service
) -> None:
    """An alert's triage asks for fewer steps than the worker's budget: two, then the wrap-up."""
    fake_llm.script(
        *(fp.ToolCallsReply([probe(slow_service, f"/health?n={n}")]) for n in range(2)),
        fp.TextReply("Triage: the database is slow."),
    )
    runtime = make_runtime(budget=Budget(max_model_requests=10))
    task = (UserMessage(content="Why is checkout slow?", author="alice"),)
    request = TurnRequest(session_id=SESSION, turn_id="t1", inputs=task, max_model_requests=2)
    outcome = await runtime.run(request)

    assert [bool(r.tools) for r in fake_llm.requests] == [True, True, False]
    await assert_wrapped_up(runtime, fake_llm, outcome, "step limit reached (2 model requests)")


async def test_a_request_cannot_raise_the_runtime_budget(
    make_runtime, fake_llm, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service)]),
        fp.TextReply("Done."),
    )
    runtime = make_runtime(budget=Budget(max_model_requests=1))
    task = (UserMessage(content="Why is checkout slow?", author="alice"),)
    request = TurnRequest(session_id=SESSION, turn_id="t1", inputs=task, max_model_requests=50)
    outcome = await runtime.run(request)

    assert [bool(r.tools) for r in fake_llm.requests] == [True, False]
    await assert_wrapped_up(runtime, fake_llm, outcome, "step limit reached (1 model requests)")


async def test_h12_a_repeated_identical_call_runs_at_most_twice_then_the_loop_ends(
    make_runtime, fake_llm, slow_service
) -> None:
    same = probe(slow_service)
    # The model keeps asking for the same page, with its arguments spaced differently once.
    spaced = fp.ToolCall("http_get", json.dumps({"url": slow_service.url("/health")}, indent=2))
    fake_llm.script(
        fp.ToolCallsReply([same]),
        fp.ToolCallsReply([spaced]),
        fp.ToolCallsReply([same]),
        fp.TextReply("The health page keeps saying ok."),
    )
    runtime = make_runtime(budget=Budget(max_identical_calls=2))
    outcome = await run_turn(runtime)

    assert len(slow_service.hits) == 2  # the third identical call never ran
    refused = tool_results(fake_llm.requests[3])[-1]
    assert refused.startswith("not run: this exact call already ran 2 times")
    await assert_wrapped_up(runtime, fake_llm, outcome, "the same calls were repeated")


async def test_h12_a_batch_past_the_tool_call_cap_runs_none_of_its_calls(
    make_runtime, fake_llm, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, "/a"), probe(slow_service, "/b")]),
        fp.ToolCallsReply([probe(slow_service, f"/{n}") for n in "cdef"]),
        fp.TextReply("Two probes answered; the rest were not run."),
    )
    runtime = make_runtime(budget=Budget(max_tool_calls=5))
    outcome = await run_turn(runtime)

    assert sorted(h.path for h in slow_service.hits) == ["/a", "/b"]  # admitted whole, or not
    refused = tool_results(fake_llm.requests[2])[-4:]
    assert all(r.startswith("not run: this batch of 4 calls would pass") for r in refused)
    await assert_wrapped_up(runtime, fake_llm, outcome, "tool-call budget spent (5 calls")


async def test_a8_token_budget_ends_a_turn_that_burns_tokens(
    make_runtime, fake_llm, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, "/big")], prompt_tokens=9_000),
        fp.ToolCallsReply([probe(slow_service, "/bigger")], prompt_tokens=12_000),
        fp.TextReply("Summary of what the logs showed."),
    )
    runtime = make_runtime(budget=Budget(max_tokens=20_000))
    outcome = await run_turn(runtime)

    assert len(fake_llm.requests) == 3 and len(slow_service.hits) == 2
    await assert_wrapped_up(runtime, fake_llm, outcome, "token budget spent (20,000 tokens)")


async def test_h12_the_wrap_up_is_one_request_and_adds_no_tool_call(
    make_runtime, fake_llm, slow_service
) -> None:
    fake_llm.script(fp.ToolCallsReply([probe(slow_service)]), fp.TextReply("fine"))
    runtime = make_runtime(budget=Budget(max_model_requests=1))
    outcome = await run_turn(runtime)
    # The wrap-up is one request past the cap, offering no tool.
    assert len(fake_llm.requests) == 2 and not fake_llm.requests[1].tools
    assert len(slow_service.hits) == 1
    assert isinstance(outcome.result, Completed) and outcome.result.answer == "fine"


@pytest.mark.parametrize(
    "limits",
    [
        {"max_model_requests": 0},
        {"max_tool_calls": 0},
        {"max_identical_calls": 0},
        {"max_tokens": -1},
    ],
)
def test_budgets_below_their_floor_are_refused(limits: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        Budget(**limits)


async def test_h12_the_card_says_which_budget_ended_the_analysis(
    bot_settings, redis_client, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service)]),
        fp.ToolCallsReply([probe(slow_service, "/again")]),
        fp.TextReply("Best guess: the database."),
    )
    settings = bot_settings.model_copy(update={"max_steps": 2})
    thread = sg.slack_ts()
    async with open_bot(settings, redis_client) as bot:
        await bot.start_worker()
        await bot.post(sg.slack_app_mention(ts=thread))
        assert bot.worker is not None
        await bot.worker.wait_finished(1)
    assert len(fake_llm.requests) == 3 and not fake_llm.requests[2].tools
    shown = card_text(final_card(slack_api, thread))
    assert "wrapped up early: step limit reached (2 model requests)" in shown
    assert "Best guess: the database." in shown
