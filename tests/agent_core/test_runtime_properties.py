"""Property tests of the run loop over random interleavings, against a real Redis.

Why this way: the invariants (closed history, cuts only at zero-crossings, priority order, nothing
new after a stop) must hold for every interleaving of parallel tool completions, failures,
timeouts and signals, and hand-written cases only cover the ones we thought of. Hypothesis draws
a model script (batches of parallel calls with mixed outcomes and interruptibility, then an
answer) and a list of signals injected at chosen events. The model is `ScriptedModel`, which
validates every history it receives with the strict provider rules, so a broken history would
surface as a failed turn; the tools are in-process and yield to the loop a drawn number of times,
so completion order varies without wall-clock sleeps. Redis is real: the probes, the tombstones,
the steer queue and the persisted history are the production code paths.

Every property is checked from the outside: the events the sink saw (with an independent balance
count), the probe points and trace the runtime reports, and the history read back from Redis.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_core import (
    PRIORITY,
    AssistantMessage,
    ControlPlane,
    Failed,
    Interruptibility,
    LoopLimits,
    Message,
    RunEvent,
    RunOutcome,
    Runtime,
    Signal,
    Steered,
    Stopped,
    Tool,
    ToolContext,
    ToolFailed,
    Toolset,
    ToolStatus,
    TurnRequest,
    UserMessage,
    validate_history,
)
from agent_core._events import FunctionCallPart, FunctionResponsePart
from agent_core._messages import ToolCall
from agent_core.testing import ScriptedModel, text

MODES = ("ok", "fail", "crash", "timeout", "slow")
TOOL_TIMEOUT_S = 0.005


async def _handle(args: Mapping[str, Any], ctx: ToolContext) -> str:
    for _ in range(int(args.get("spins", 0))):
        await asyncio.sleep(0)
    match args["mode"]:
        case "fail":
            raise ToolFailed("backend said no")
        case "crash":
            raise RuntimeError("tool bug")
        case "timeout":
            await asyncio.Event().wait()
    return f"result after {args.get('spins', 0)} spins"


TOOLS = Toolset.of(
    [
        Tool(
            name="probe",
            description="",
            parameters={"type": "object"},
            handler=_handle,
            timeout_s=TOOL_TIMEOUT_S,
        ),
        Tool(
            name="fix",
            description="",
            parameters={"type": "object"},
            handler=_handle,
            interruptibility=Interruptibility.MUST_COMPLETE,
            timeout_s=TOOL_TIMEOUT_S,
        ),
    ]
)

call_specs = st.tuples(st.sampled_from(("probe", "fix")), st.sampled_from(MODES), st.integers(0, 6))
batches = st.lists(st.lists(call_specs, min_size=1, max_size=4), max_size=4)
injections = st.lists(st.tuples(st.integers(1, 30), st.sampled_from(list(Signal))), max_size=3)


@dataclass
class Observed:
    """What the sink saw, with a balance counted independently of the runtime's ledger."""

    balances: list[int]
    closed_at: set[int]
    injected: list[tuple[int, Signal]]


def _script(drawn: list[list[tuple[str, str, int]]], session: str) -> list[AssistantMessage]:
    script = []
    for b, batch in enumerate(drawn):
        calls = tuple(
            ToolCall(
                id=f"{session}-{b}-{i}",
                name=name,
                arguments=json.dumps({"mode": mode, "spins": spins}),
            )
            for i, (name, mode, spins) in enumerate(batch)
        )
        script.append(AssistantMessage(tool_calls=calls))
    return [*script, text("final answer")]


async def _scenario(
    url: str, drawn, plan
) -> tuple[RunOutcome, Observed, list[Message], ScriptedModel]:
    session, turn = f"s-{uuid.uuid4().hex}", f"t-{uuid.uuid4().hex}"
    client = aioredis.Redis.from_url(url)
    control = ControlPlane(client)
    observed = Observed(balances=[], closed_at=set(), injected=[])
    model = ScriptedModel(script=_script(drawn, session), delta_chunks=3)
    request = TurnRequest(session_id=session, turn_id=turn, inputs=(UserMessage(content="go"),))
    balance = 0
    pending = sorted(plan, key=lambda p: p[0])

    async def sink(event: RunEvent) -> None:
        nonlocal balance
        n = len(observed.balances) + 1
        if not event.partial:
            was_open = balance > 0
            balance += sum(isinstance(p, FunctionCallPart) for p in event.parts)
            balance -= sum(isinstance(p, FunctionResponsePart) for p in event.parts)
            if was_open and balance == 0:
                observed.closed_at.add(n)
        observed.balances.append(balance)
        while pending and pending[0][0] <= n:
            _, signal = pending.pop(0)
            observed.injected.append((n, signal))
            await _inject(signal, control, signals, session, turn)

    runtime = Runtime(model=model, redis=client, toolset=TOOLS, limits=LoopLimits(), sink=sink)
    signals = runtime.signals_for(request)
    try:
        outcome = await runtime.run(request, signals)
        history = await runtime.store.load(session)
    finally:
        await client.aclose()
    return outcome, observed, history, model


async def _inject(signal: Signal, control: ControlPlane, signals, session: str, turn: str) -> None:
    match signal:
        case Signal.STOP:
            await control.stop(session, turn, by="tester")
        case Signal.STEER:
            await control.steer(session, "look elsewhere", author="tester")
        case Signal.DRAIN:
            await control.drain(session, turn)
        case _:
            signals.raise_local(signal)


def _run(url: str, drawn, plan):
    return asyncio.run(_scenario(url, drawn, plan))


PROPERTY = settings(
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(drawn=batches, plan=injections)
def test_history_stays_closed_and_cuts_only_at_zero_crossings(redis_server, drawn, plan) -> None:
    outcome, observed, history, model = _run(redis_server, drawn, plan)

    validate_history(history)  # the persisted history is always closed
    assert not (isinstance(outcome.result, Failed) and "history" in outcome.result.error)
    assert min(observed.balances, default=0) >= 0, "the balance never goes negative"
    for probe in outcome.diagnostics.probes:
        assert probe.balance == 0
        if probe.site == "start":
            assert probe.event_index == 0
        else:
            assert probe.site == "batch_closed"
            assert probe.event_index in observed.closed_at, "probed only at a zero-crossing"
    assert len(outcome.diagnostics.probes) <= 1 + len(observed.closed_at)


@PROPERTY
@given(drawn=batches, plan=injections)
def test_first_raised_signal_in_priority_order_decides(redis_server, drawn, plan) -> None:
    outcome, observed, _, _ = _run(redis_server, drawn, plan)
    for probe in outcome.diagnostics.probes:
        raised = {s for at, s in observed.injected if at <= probe.event_index}
        expected = next((s for s in PRIORITY if s in raised), None)
        assert probe.found == expected
    last = outcome.diagnostics.probes[-1] if outcome.diagnostics.probes else None
    if last is not None and last.found is not None:
        assert outcome.reason == (
            Signal.STOP.value + "ped"
            if last.found is Signal.STOP
            else {
                Signal.STEER: "steered",
                Signal.DRAIN: "drained",
                Signal.DISPATCH: "dispatched",
                Signal.AWAIT: "awaiting",
            }[last.found]
        )
    assert outcome.diagnostics.steered == isinstance(outcome.result, Steered)


@PROPERTY
@given(drawn=batches, plan=injections)
def test_nothing_starts_after_a_stop(redis_server, drawn, plan) -> None:
    outcome, observed, history, model = _run(redis_server, drawn, plan)
    trace = [entry.kind for entry in outcome.diagnostics.trace]
    if "stop_accepted" in trace:
        accepted = trace.index("stop_accepted")
        assert "model_request" not in trace[accepted:] and "tool_start" not in trace[accepted:]
        answered = max((i for i, kind in enumerate(trace) if kind == "model_response"), default=-1)
        # Stopped, unless the stop came after the final answer had fully arrived.
        assert isinstance(outcome.result, Stopped) or (
            outcome.reason == "completed" and accepted > answered
        )
        assert len(model.requests) == outcome.diagnostics.model_requests
    if any(signal is Signal.STOP for _, signal in observed.injected):
        assert "stop_accepted" in trace
    for message in history:
        # A must-complete call that started always ran to its own end.
        if getattr(message, "name", None) == "fix" and message.status is ToolStatus.INTERRUPTED:
            assert message.content.startswith("not run:")
