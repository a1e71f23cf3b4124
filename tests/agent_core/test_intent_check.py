"""The intent check: after a correction, a call that goes against it waits for a person.

Why this way: the promise is about what runs, so every test drives the runtime through its
public API (`Runtime.run`, `ControlPlane`) on a real Redis, with tools that count their runs,
and reads what a user would see: whether the call ran, the approval record, the rendered card,
the history the next request would send. The model is `agent_core.testing.ScriptedModel`, which
records every request (so "no check was made" is a count of requests) and validates each
history like a strict provider. The stop test holds the check's request open on an event and
stops the turn through Redis, as a Stop button does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import redis.asyncio as aioredis

from agent_core import (
    Approval,
    AssistantMessage,
    Awaiting,
    Completed,
    ControlPlane,
    IntentCheck,
    LoopLimits,
    Risk,
    Runtime,
    Steered,
    Stopped,
    SystemMessage,
    Tool,
    ToolCall,
    ToolContext,
    ToolMessage,
    Toolset,
    TurnRequest,
    UserKind,
    UserMessage,
    validate_history,
)
from agent_core._intent_check import NO_VERDICT, read_verdicts
from agent_core._llm.client import DeltaSink, ModelResponse, Usage
from agent_core._messages import Message
from agent_core.testing import ScriptedModel, calls, text
from cards import CardApproval, CardStatus, ProgressCard, render_feishu, render_slack

SESSION = "slack:T1:C1:1700000000.000100"
REDIRECT = "leave the database alone"
REASON = "checks the database although the redirect said to leave it alone"
QUERY = '{"sql": "select count(*) from orders"}'


class Database:
    """A read-only `db_query` tool that counts its runs."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.tool = Tool(
            name="db_query",
            description="Run a read-only SQL query on the payments database.",
            parameters={"type": "object", "properties": {"sql": {"type": "string"}}},
            handler=self._run,
            risk=Risk.READ_ONLY,
        )

    async def _run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.runs.append(str(args["sql"]))
        return "42 rows"


def verdicts(*items: tuple[str, bool, str]) -> str:
    return json.dumps(
        {"verdicts": [{"call_id": c, "consistent": ok, "reason": why} for c, ok, why in items]}
    )


def runtime_for(
    model: Any,
    redis: aioredis.Redis,
    *tools: Tool,
    mode: IntentCheck = IntentCheck.AFTER_REDIRECT,
    **limits: Any,
) -> Runtime:
    """A runtime with `tools`, its intent check in `mode` (the bot's default unless given)."""
    return Runtime(
        model=model,
        redis=redis,
        toolset=Toolset.of(list(tools)),
        instructions="You are an SRE assistant.",
        limits=LoopLimits(intent_check=mode, **limits),
    )


def redirected_task() -> tuple[UserMessage, ...]:
    """A task and a redirect queued for it before it started (how a queued turn is corrected)."""
    return (
        UserMessage(content="why is checkout slow?", author="alice"),
        UserMessage(content=REDIRECT, author="bob", kind=UserKind.STEER),
    )


def request(turn: str = "t1", inputs: Sequence[UserMessage] = ()) -> TurnRequest:
    return TurnRequest(session_id=SESSION, turn_id=turn, inputs=tuple(inputs), requester="alice")


def check_requests(model: ScriptedModel) -> list[list[Message]]:
    """The requests that were intent checks (their first message is the check's instructions)."""
    return [
        r
        for r in model.requests
        if r and isinstance(r[0], SystemMessage) and "You check an incident" in r[0].content
    ]


async def test_a_redirect_then_a_database_call_waits_with_the_reason_on_record_and_card(
    redis_client: aioredis.Redis,
) -> None:
    database = Database()
    control = ControlPlane(redis_client)

    async def look(args: Mapping[str, Any], ctx: ToolContext) -> str:
        await control.steer(SESSION, REDIRECT, author="bob")  # a reply in the thread, mid-batch
        return "p99 latency 2.1 s"

    looks = Tool(name="look", description="Look.", parameters={"type": "object"}, handler=look)
    model = ScriptedModel(
        [
            calls(("look", "{}")),
            calls(("db_query", QUERY)),
            text(verdicts(("c1", False, REASON))),
        ]
    )
    runtime = runtime_for(model, redis_client, database.tool, looks)

    first = await runtime.run(request("t1", [UserMessage(content="why is checkout slow?")]))
    assert isinstance(first.result, Steered)
    assert len(model.requests) == 1  # no redirect yet: no check
    second = await runtime.run(request("t2"))

    assert isinstance(second.result, Awaiting) and len(second.result.approvals) == 1
    assert database.runs == []
    assert len(model.requests) == 3 and len(check_requests(model)) == 1
    (check,) = check_requests(model)
    asked = check[-1].content
    assert REDIRECT in asked and '<chat_message from="bob">' in asked  # quoted as people's text
    assert '"tool": "db_query"' in asked and "select count(*) from orders" in asked
    assert second.diagnostics.model_requests == 1  # the check is not a step of the analysis
    assert second.diagnostics.usage == Usage(20, 10)  # but its tokens are the turn's

    (record,) = (await runtime.approvals.records(SESSION)).values()
    assert record.tool == "db_query" and record.risk is Risk.READ_ONLY
    assert record.why == REASON and record.requester == "alice"
    assert Approval.from_json(record.to_json()) == record

    shown = ProgressCard(
        title="why is checkout slow?",
        turn_id="t2",
        thread="1700000000.000100",
        status=CardStatus.AWAITING_APPROVAL,
        approvals=(
            CardApproval(
                tool=record.tool,
                args=record.arguments,
                risk=record.risk.value,
                value=f"{record.call_id}|{record.digest}",
                why=record.why,
            ),
        ),
    )
    slack = json.dumps(render_slack(shown), ensure_ascii=False)
    feishu = json.dumps(render_feishu(shown), ensure_ascii=False)
    for rendered in (slack, feishu):
        assert f"Why: {REASON}" in rendered and "goes against a correction" in rendered
        assert "1 call needs a person's decision" in rendered


async def test_with_the_check_off_the_call_runs(redis_client: aioredis.Redis) -> None:
    database = Database()
    model = ScriptedModel([calls(("db_query", QUERY)), text("42 orders.")])
    runtime = runtime_for(model, redis_client, database.tool, mode=IntentCheck.OFF)

    outcome = await runtime.run(request("t1", redirected_task()))

    assert isinstance(outcome.result, Completed)
    assert database.runs == ["select count(*) from orders"]
    assert len(model.requests) == 2 and not check_requests(model)
    assert await runtime.approvals.records(SESSION) == {}


async def test_after_redirect_with_no_redirect_makes_no_check_request(
    redis_client: aioredis.Redis,
) -> None:
    database = Database()
    model = ScriptedModel([calls(("db_query", QUERY)), text("42 orders.")])
    runtime = runtime_for(model, redis_client, database.tool)  # after_redirect

    task = (UserMessage(content="how many orders failed?", author="alice"),)
    outcome = await runtime.run(request("t1", task))

    assert isinstance(outcome.result, Completed) and len(database.runs) == 1
    assert len(model.requests) == 2 and not check_requests(model)


async def test_a_new_task_starts_a_new_analysis_with_no_correction(
    redis_client: aioredis.Redis,
) -> None:
    """A redirect belongs to its analysis: after the next mention, calls run unchecked."""
    database = Database()
    model = ScriptedModel(
        [
            text("I will leave it alone."),
            calls(("db_query", QUERY)),
            text("42 orders."),
        ]
    )
    runtime = runtime_for(model, redis_client, database.tool)
    await runtime.run(request("t1", redirected_task()))

    later = (UserMessage(content="now count the orders in the database", author="alice"),)
    outcome = await runtime.run(request("t2", later))

    assert isinstance(outcome.result, Completed) and len(database.runs) == 1
    assert not check_requests(model)


async def test_always_checks_the_first_batch(redis_client: aioredis.Redis) -> None:
    database = Database()
    model = ScriptedModel(
        [
            calls(("db_query", QUERY)),
            text(verdicts(("c1", True, "the task asks about orders"))),
            text("42 orders."),
        ]
    )
    runtime = runtime_for(model, redis_client, database.tool, mode=IntentCheck.ALWAYS)

    task = (UserMessage(content="how many orders failed?", author="alice"),)
    outcome = await runtime.run(request("t1", task))

    assert isinstance(outcome.result, Completed) and len(database.runs) == 1
    (check,) = check_requests(model)
    assert "No correction has been sent yet." in check[-1].content
    assert "how many orders failed?" in check[-1].content


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param("Looks fine to me.", id="prose"),
        pytest.param('{"verdicts": [{"call_id": "c1", "consistent": "yes"}]}', id="not-a-bool"),
        pytest.param('{"verdicts": {"c1": true}}', id="wrong-shape"),
        pytest.param('{"verdicts": [{"call_id": "c1", "consistent": tru', id="cut-json"),
        pytest.param('{"verdicts": ' + "[" * 20_000 + "]" * 20_000 + "}", id="deep-nesting"),
        pytest.param("", id="empty"),
    ],
)
async def test_an_unreadable_verdict_lets_the_call_wait(
    redis_client: aioredis.Redis, answer: str
) -> None:
    database = Database()
    model = ScriptedModel([calls(("db_query", QUERY)), text(answer)])
    runtime = runtime_for(model, redis_client, database.tool)

    outcome = await runtime.run(request("t1", redirected_task()))

    assert isinstance(outcome.result, Awaiting) and database.runs == []
    (record,) = (await runtime.approvals.records(SESSION)).values()
    assert record.why == NO_VERDICT


async def test_a_model_error_during_the_check_lets_the_call_wait(
    redis_client: aioredis.Redis,
) -> None:
    database = Database()
    model = ScriptedModel([calls(("db_query", QUERY))])  # the check finds the script exhausted
    runtime = runtime_for(model, redis_client, database.tool)

    outcome = await runtime.run(request("t1", redirected_task()))

    assert isinstance(outcome.result, Awaiting) and database.runs == []
    assert len(model.requests) == 2
    (record,) = (await runtime.approvals.records(SESSION)).values()
    assert record.why == NO_VERDICT
    assert any(e.kind == "intent_check_failed" for e in outcome.diagnostics.trace)


async def test_a_verdict_missing_for_one_call_holds_that_call_only(
    redis_client: aioredis.Redis,
) -> None:
    database = Database()
    other = '{"sql": "select 1"}'
    model = ScriptedModel(
        [
            calls(("db_query", QUERY), ("db_query", other)),
            text("```json\n" + verdicts(("c1", True, "reads orders, which is allowed")) + "\n```"),
        ]
    )
    runtime = runtime_for(model, redis_client, database.tool)

    outcome = await runtime.run(request("t1", redirected_task()))

    assert isinstance(outcome.result, Awaiting)
    assert database.runs == ["select count(*) from orders"]  # cleared, so it ran
    (record,) = (await runtime.approvals.records(SESSION)).values()
    assert json.loads(record.arguments) == {"sql": "select 1"} and record.why == NO_VERDICT


class HeldCheck:
    """A model whose tool-less requests (the check) wait until released; others are scripted."""

    def __init__(self, script: ScriptedModel) -> None:
        self.script = script
        self.checking = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = 0

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        if not list(toolset):
            self.checking.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return await self.script.respond(messages, toolset, on_delta)


async def test_a_stop_during_the_check_wins_and_nothing_runs(
    redis_client: aioredis.Redis,
) -> None:
    database = Database()
    model = HeldCheck(ScriptedModel([calls(("db_query", QUERY), ("db_query", '{"sql": "1"}'))]))
    runtime = runtime_for(model, redis_client, database.tool)

    run = asyncio.create_task(runtime.run(request("t1", redirected_task())))
    await model.checking.wait()
    await ControlPlane(redis_client).stop(SESSION, "t1", by="carol")
    outcome = await run

    assert isinstance(outcome.result, Stopped) and outcome.result.by == "carol"
    assert database.runs == [] and model.cancelled == 1
    assert len(model.script.requests) == 1  # no request after the stop
    assert await runtime.approvals.records(SESSION) == {}  # nothing waits: the batch closed
    history = await runtime.store.load(SESSION)
    validate_history(history)
    answers = [m for m in history if isinstance(m, ToolMessage)]
    assert len(answers) == 2
    assert all(
        a.content.startswith("interrupted: the analysis was stopped by carol") for a in answers
    )


async def test_a_check_that_times_out_lets_the_call_wait(redis_client: aioredis.Redis) -> None:
    database = Database()
    model = HeldCheck(ScriptedModel([calls(("db_query", QUERY))]))
    runtime = runtime_for(model, redis_client, database.tool, intent_check_timeout_s=0.05)

    outcome = await runtime.run(request("t1", redirected_task()))

    assert isinstance(outcome.result, Awaiting) and database.runs == []
    (record,) = (await runtime.approvals.records(SESSION)).values()
    assert record.why == NO_VERDICT


async def test_calls_that_change_something_are_not_checked_again(
    redis_client: aioredis.Redis,
) -> None:
    """A call already waiting for approval needs no verdict: no check request is made."""
    restarts: list[str] = []

    async def restart(args: Mapping[str, Any], ctx: ToolContext) -> str:
        restarts.append(str(args))
        return "restarted"

    tool = Tool(
        name="restart_pod",
        description="Restart a pod.",
        parameters={"type": "object", "properties": {"pod": {"type": "string"}}},
        handler=restart,
        risk=Risk.SIDE_EFFECT,
    )
    model = ScriptedModel([calls(("restart_pod", '{"pod": "db-0"}'))])
    runtime = runtime_for(model, redis_client, tool)

    outcome = await runtime.run(request("t1", redirected_task()))

    assert isinstance(outcome.result, Awaiting) and restarts == []
    assert len(model.requests) == 1
    (record,) = (await runtime.approvals.records(SESSION)).values()
    assert record.why == ""  # its risk says why it waits


def test_verdicts_fail_closed() -> None:
    labels = ["c1", "c2", "c3"]
    answer = json.dumps(
        {
            "verdicts": [
                {"call_id": "c1", "consistent": True},
                {"call_id": "c1", "consistent": False, "reason": "  reads\nthe   db  "},
                {"call_id": "c2", "consistent": True},
                {"call_id": ["c3"], "consistent": True},  # not a label: no verdict for c3
                {"call_id": "c9", "consistent": False},
                "junk",
            ]
        }
    )
    assert read_verdicts(answer, labels) == {"c1": "reads the db", "c3": NO_VERDICT}
    assert read_verdicts("x" * 70_000 + verdicts(("c1", True, "")), ["c1"]) == {"c1": NO_VERDICT}


async def test_a_call_a_dead_worker_left_unanswered_is_checked_before_it_runs_again(
    redis_client: aioredis.Redis,
) -> None:
    """The worker died after the check held the call, before the turn suspended."""
    database = Database()
    model = ScriptedModel([text(verdicts(("c1", False, REASON)))])
    runtime = runtime_for(model, redis_client, database.tool)
    batch = AssistantMessage(tool_calls=(ToolCall(id="call_q", name="db_query", arguments=QUERY),))
    await runtime.store.begin_turn(SESSION, "t1", list(redirected_task()))
    await runtime.store.journal_batch(SESSION, "t1", batch)

    outcome = await runtime.run(request("t1"))

    assert isinstance(outcome.result, Awaiting) and outcome.result.approvals == ("call_q",)
    assert database.runs == [] and len(check_requests(model)) == 1
    (record,) = (await runtime.approvals.records(SESSION)).values()
    assert record.why == REASON
