"""Benchmark of the agent runtime: ratios measured in one run, never absolute times.

Run it with `make bench` (or `.venv/bin/python bench/runtime.py --help`). It starts its own
`redis-server` on a free loopback port (no persistence, a temporary directory), drives the
runtime with `agent_core.testing.ScriptedModel` and in-process tools, prints three tables and
stops the server. Nothing leaves the machine. `--smoke` runs every measurement small, in
seconds, to check that each figure can still be produced (`make test` runs it); `--redis-url`
uses a given Redis instead of starting one. The figures end the output as `ratio <name> =
<number>` lines (`bench/_figures.py`); the exit status is 1 when one cannot be produced.

What is measured, and why:

1. Probes per turn against events per turn (docs/design.md §Invariants I2). Signals are probed only
   at a cut, i.e. once before the first model request and once per closed tool batch, never per
   streamed delta. The same scripted workload is run with a short stream and with a long one
   (`ScriptedModel.delta_chunks`): events per turn grow with the deltas, probes per turn must
   not. Redis traffic per turn is counted twice: client round trips (a counting connection
   class on the runtime's client) and server commands (`INFO commandstats` deltas, including
   MULTI/EXEC and commands run inside Lua scripts). A probe is one pipelined round trip of
   GET + LLEN + EXISTS; LLEN is issued by nothing else, so the server's LLEN count per turn
   cross-checks the probe count from the diagnostics.
2. Ledger overhead: `BalanceLedger.observe` over a large pre-built list of events (streamed
   deltas, final model events carrying several calls, tool responses) against a bare loop over
   the same list that only reads `event.partial`. Its cost is also shown as a share of a real
   turn's wall time measured in (1).
3. Steer-to-cut and stop-to-quiet latency: a batch of parallel tools that each hold for a while,
   declared interruptible (`ABORTABLE`) or `MUST_COMPLETE`; a steer (or stop) is written once all
   of them have started, and the time from that write to `Runtime.run` returning is divided by
   the time the same batch takes uninterrupted. Interruptible tools should give a ratio far
   below 1; must-complete tools should give about 1, i.e. the rest of the batch (the price of
   never cutting a batch halfway).

The machine this runs on is shared and noisy, so every number that matters is a ratio of two
measurements taken in the same run (or a count); absolute times are printed only to make the
ratios readable and are never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import redis.asyncio as aioredis
from rich.console import Console
from rich.table import Table

if __package__ in (None, ""):  # run as a script: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _figures import SMOKE_HELP, print_ratios, ratio, require, run

from agent_core import (
    AssistantMessage,
    BalanceLedger,
    Completed,
    ControlPlane,
    Interruptibility,
    LoopLimits,
    RunEvent,
    RunOutcome,
    Runtime,
    Steered,
    Stopped,
    Tool,
    ToolCall,
    ToolContext,
    ToolMessage,
    Toolset,
    TurnRequest,
    UserMessage,
)
from agent_core._events import EventSource, FunctionCallPart, FunctionResponsePart, Part, TextPart
from agent_core.testing import ScriptedModel, calls, text
from tests.loopback import spawn_redis, stop_process

Action = Literal["none", "steer", "stop"]

_IDS = itertools.count(1)
_PROBE_COMMANDS = 3
"""A probe pipelines GET (tombstone) + LLEN (steer queue) + EXISTS (drain) in one round trip."""
_KINDS = ("mix", "delta", "calls", "response", "final text")
"""Kinds of pre-built events the ledger is timed on (`mix` is all of them in turn order)."""
_PREAMBLE = "Checking the next set of signals now."
"""Text the model streams before each batch of calls."""


def _fresh(prefix: str) -> str:
    return f"bench-{prefix}-{next(_IDS)}"


@dataclass(frozen=True)
class Settings:
    """What one run measures, from the command line."""

    turns: int
    batches: int
    widths: tuple[int, ...]
    tool_sleep_s: float
    short_chunks: int
    long_chunks: int
    answer_chars: int
    ledger_turns: int
    ledger_reps: int
    reps: int
    hold_s: float
    hold_width: int
    signal_at: float
    """When to write the steer/stop, as a fraction of the hold after all calls started."""


# --------------------------------------------------------------------------------------------
# redis-server and clients


@contextmanager
def redis_server() -> Iterator[int]:
    """Run a throwaway redis-server for the duration of the block; yield its port."""
    with tempfile.TemporaryDirectory(prefix="chatops-bench-") as workdir:
        try:
            proc, port = spawn_redis(workdir)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from exc
        try:
            yield port
        finally:
            stop_process(proc)


class _CountingConnection(aioredis.Connection):
    """A connection that counts what it sends: one send is one round trip (pipelines too)."""

    round_trips: ClassVar[int] = 0

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        """Count one round trip, then send as usual."""
        _CountingConnection.round_trips += 1
        await super().send_packed_command(command, check_health)


async def _command_calls(admin: aioredis.Redis) -> dict[str, int]:
    """Calls per command name from `INFO commandstats` (the INFO calls themselves left out)."""
    stats: Mapping[str, Any] = await admin.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if isinstance(value, dict) and name != "cmdstat_info"
    }


def _diff(after: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}


# --------------------------------------------------------------------------------------------
# 1. probes per turn against events per turn


@dataclass(frozen=True)
class StreamStats:
    """Means per turn for one stream length."""

    label: str
    chunks: int
    turns: int
    completed: int
    events: float
    probes: float
    sites: str
    round_trips: float
    commands: float
    llen_calls: float
    top_commands: str
    turn_s: float


def _workload_script(settings: Settings) -> list[AssistantMessage]:
    """Batches of parallel calls (each after a streamed preamble), then a long streamed answer."""
    script: list[AssistantMessage] = []
    for batch in range(settings.batches):
        width = settings.widths[batch % len(settings.widths)]
        named = [("check", f'{{"target": "svc-{batch}-{i}"}}') for i in range(width)]
        script.append(AssistantMessage(content=_PREAMBLE, tool_calls=calls(*named).tool_calls))
    answer = "The gateway pool is exhausted; raise its limit and restart it. "
    script.append(
        text((answer * (settings.answer_chars // len(answer) + 1))[: settings.answer_chars])
    )
    return script


def _check_tool(sleep_s: float) -> Tool:
    async def check(args: Mapping[str, Any], ctx: ToolContext) -> str:
        await asyncio.sleep(sleep_s)
        return f"{args.get('target', '?')}: ok"

    return Tool(
        name="check",
        description="Checks one target (in-process, sleeps briefly).",
        parameters={"type": "object", "properties": {"target": {"type": "string"}}},
        handler=check,
    )


async def _one_turn(
    client: aioredis.Redis, toolset: Toolset, settings: Settings, chunks: int
) -> RunOutcome:
    model = ScriptedModel(script=_workload_script(settings), delta_chunks=chunks)
    runtime = Runtime(model=model, redis=client, toolset=toolset)
    session = _fresh("stream")
    request = TurnRequest(
        session_id=session,
        turn_id=f"{session}-t1",
        inputs=(UserMessage(content="Why is checkout slow?", author="bench"),),
    )
    return await runtime.run(request)


async def measure_stream(
    client: aioredis.Redis, admin: aioredis.Redis, settings: Settings, label: str, chunks: int
) -> StreamStats:
    """Run `settings.turns` scripted turns one after another and average per turn."""
    toolset = Toolset.of([_check_tool(settings.tool_sleep_s)])
    await _one_turn(client, toolset, settings, chunks)  # warm-up: script load, pool growth
    events, probes, trips, commands, llen, seconds = [], [], [], [], [], []
    sites: set[str] = set()
    per_command: dict[str, int] = {}
    completed = 0
    for _ in range(settings.turns):
        before = await _command_calls(admin)
        trips_before = _CountingConnection.round_trips
        started = time.perf_counter()
        outcome = await _one_turn(client, toolset, settings, chunks)
        seconds.append(time.perf_counter() - started)
        trips.append(_CountingConnection.round_trips - trips_before)
        delta = _diff(await _command_calls(admin), before)
        completed += isinstance(outcome.result, Completed)
        diag = outcome.diagnostics
        events.append(diag.events)
        probes.append(len(diag.probes))
        sites.add(",".join(p.site for p in diag.probes))
        commands.append(sum(delta.values()))
        llen.append(delta.get("llen", 0))
        for name, count in delta.items():
            per_command[name] = per_command.get(name, 0) + count
    top = sorted(per_command.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
    return StreamStats(
        label=label,
        chunks=chunks,
        turns=settings.turns,
        completed=completed,
        events=statistics.fmean(events),
        probes=statistics.fmean(probes),
        sites=" | ".join(sorted(sites)),
        round_trips=statistics.fmean(trips),
        commands=statistics.fmean(commands),
        llen_calls=statistics.fmean(llen),
        top_commands=" ".join(f"{n}={c / settings.turns:g}" for n, c in top),
        turn_s=statistics.median(seconds),
    )


# --------------------------------------------------------------------------------------------
# 2. ledger overhead


def _ledger_events(settings: Settings, chunks: int) -> dict[str, list[RunEvent]]:
    """Pre-built events shaped like `settings.ledger_turns` turns of the workload, by kind."""
    kinds: dict[str, list[RunEvent]] = {kind: [] for kind in _KINDS}

    def add(kind: str, event: RunEvent) -> None:
        kinds[kind].append(event)
        kinds["mix"].append(event)

    token = TextPart(text="tok")

    def delta() -> RunEvent:  # one object per delta, as in a real stream
        return RunEvent(source=EventSource.MODEL, parts=(token,), partial=True)

    answer_deltas = max(1, min(chunks, settings.answer_chars))
    preamble_deltas = max(1, min(chunks, len(_PREAMBLE)))
    for turn in range(settings.ledger_turns):
        for batch in range(settings.batches):
            width = settings.widths[batch % len(settings.widths)]
            ids = [ToolCall(id=f"c{turn}-{batch}-{i}", name="check") for i in range(width)]
            for _ in range(preamble_deltas):
                add("delta", delta())
            parts: tuple[Part, ...] = (
                TextPart(text=_PREAMBLE),
                *(FunctionCallPart(call=c) for c in ids),
            )
            add("calls", RunEvent(source=EventSource.MODEL, parts=parts))
            for call in ids:
                answer = ToolMessage(call_id=call.id, name=call.name, content="ok")
                add(
                    "response",
                    RunEvent(
                        source=EventSource.TOOL, parts=(FunctionResponsePart(response=answer),)
                    ),
                )
        for _ in range(answer_deltas):
            add("delta", delta())
        add("final text", RunEvent(source=EventSource.MODEL, parts=(TextPart(text="done"),)))
    return kinds


def _bare(events: list[RunEvent]) -> int:
    started = time.perf_counter_ns()
    for event in events:
        _ = event.partial
    return time.perf_counter_ns() - started


def _touch(event: RunEvent) -> bool:
    return event.partial


def _call_each(events: list[RunEvent]) -> int:
    touch = _touch
    started = time.perf_counter_ns()
    for event in events:
        touch(event)
    return time.perf_counter_ns() - started


def _observe_all(events: list[RunEvent]) -> int:
    ledger = BalanceLedger()
    observe = ledger.observe
    started = time.perf_counter_ns()
    for event in events:
        observe(event)
    elapsed = time.perf_counter_ns() - started
    if ledger.balance or ledger.overdrawn:
        raise AssertionError(f"pre-built events left the ledger at {ledger}")
    return elapsed


def _best_ns_per_event(
    run: Callable[[list[RunEvent]], int], events: list[RunEvent], reps: int
) -> float:
    """The fastest of `reps` passes, in ns per event (the minimum is the least disturbed one)."""
    gc.collect()
    gc.disable()
    try:
        return min(run(events) for _ in range(reps)) / len(events)
    finally:
        gc.enable()


@dataclass(frozen=True)
class LedgerStats:
    """ns per event for the bare loop and for the ledger, overall and by kind of event."""

    events: int
    bare_ns: float
    ledger_ns: dict[str, float]
    bare_by_kind: dict[str, float]
    call_by_kind: dict[str, float]
    """A loop calling a one-line function per event: the call overhead the ledger also pays."""
    share: dict[str, float]
    """Kind → share of the events of the mix."""


def measure_ledger(settings: Settings, chunks: int) -> LedgerStats:
    """Time `BalanceLedger.observe` against a bare loop over the same pre-built events."""
    kinds = _ledger_events(settings, chunks)
    mix = kinds["mix"]
    reps = settings.ledger_reps
    ledger_ns: dict[str, float] = {}
    bare_by_kind: dict[str, float] = {}
    call_by_kind: dict[str, float] = {}
    for kind in _KINDS:
        events = kinds[kind]
        # Responses without their calls would overdraw the ledger: time them after their calls.
        if kind == "response":
            ledger_ns[kind] = _responses_ns(kinds, reps)
        elif kind == "calls":
            ledger_ns[kind] = _calls_ns(kinds, reps)
        else:
            ledger_ns[kind] = _best_ns_per_event(_observe_all, events, reps)
        bare_by_kind[kind] = _best_ns_per_event(_bare, events, reps)
        call_by_kind[kind] = _best_ns_per_event(_call_each, events, reps)
    share = {k: len(v) / len(mix) for k, v in kinds.items() if k != "mix"}
    return LedgerStats(
        events=len(mix),
        bare_ns=bare_by_kind["mix"],
        ledger_ns=ledger_ns,
        bare_by_kind=bare_by_kind,
        call_by_kind=call_by_kind,
        share=share,
    )


def _split_timing(
    opening: list[RunEvent], closing: list[RunEvent], reps: int, measure_opening: bool
) -> float:
    """Time one half of a call/response pair of passes, the other half untimed (balanced)."""
    best = sys.maxsize
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            ledger = BalanceLedger()
            observe = ledger.observe
            started = time.perf_counter_ns()
            for event in opening:
                observe(event)
            middle = time.perf_counter_ns()
            for event in closing:
                observe(event)
            ended = time.perf_counter_ns()
            best = min(best, middle - started if measure_opening else ended - middle)
            if ledger.balance or ledger.overdrawn:
                raise AssertionError(f"pre-built events left the ledger at {ledger}")
    finally:
        gc.enable()
    return best / len(opening if measure_opening else closing)


def _calls_ns(kinds: dict[str, list[RunEvent]], reps: int) -> float:
    return _split_timing(kinds["calls"], kinds["response"], reps, measure_opening=True)


def _responses_ns(kinds: dict[str, list[RunEvent]], reps: int) -> float:
    return _split_timing(kinds["calls"], kinds["response"], reps, measure_opening=False)


# --------------------------------------------------------------------------------------------
# 3. steer-to-cut and stop-to-quiet


class _HoldTool:
    """A tool whose calls each hold for `hold_s`; knows when the whole batch has started."""

    def __init__(self, width: int, hold_s: float, interruptibility: Interruptibility) -> None:
        self.width = width
        self.hold_s = hold_s
        self.started = 0
        self.running = 0
        self.all_started = asyncio.Event()
        self.all_started_at = 0.0
        self.tool = Tool(
            name="hold",
            description="Holds for a while (in-process).",
            parameters={"type": "object", "properties": {"n": {"type": "integer"}}},
            handler=self._handle,
            interruptibility=interruptibility,
        )

    async def _handle(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.started += 1
        self.running += 1
        if self.started == self.width:
            self.all_started_at = time.perf_counter()
            self.all_started.set()
        try:
            await asyncio.sleep(self.hold_s)
        finally:
            self.running -= 1
        return "held"


@dataclass(frozen=True)
class Trial:
    """One run of the hold batch (distinct arguments: the identical-call budget refuses repeats)."""

    result: str
    latency_s: float
    """Signal write → run returned (for `none`: batch start → batch closed)."""
    elapsed_s: float
    """Batch start (all calls running) → signal write."""
    running_at_return: int
    batch_closed_s: float
    """Batch start → last tool response observed."""


async def _trial(
    client: aioredis.Redis,
    control: ControlPlane,
    settings: Settings,
    *,
    action: Action,
    interruptibility: Interruptibility,
    steer_cancels_tools: bool = True,
) -> Trial:
    hold = _HoldTool(settings.hold_width, settings.hold_s, interruptibility)
    responses_at: list[float] = []

    async def sink(event: RunEvent) -> None:
        if event.source is EventSource.TOOL:
            responses_at.append(time.perf_counter())

    held = [("hold", f'{{"n": {n}}}') for n in range(hold.width)]
    runtime = Runtime(
        model=ScriptedModel(script=[calls(*held), text("done")]),
        redis=client,
        toolset=Toolset.of([hold.tool]),
        limits=LoopLimits(steer_cancels_tools=steer_cancels_tools),
        sink=sink,
    )
    session = _fresh("hold")
    request = TurnRequest(
        session_id=session,
        turn_id=f"{session}-t1",
        inputs=(UserMessage(content="Hold three probes.", author="bench"),),
    )

    async def timed_run() -> tuple[RunOutcome, float]:
        outcome = await runtime.run(request)
        return outcome, time.perf_counter()

    async with asyncio.timeout(10 * settings.hold_s + 10), asyncio.TaskGroup() as group:
        task = group.create_task(timed_run())
        await hold.all_started.wait()
        if action != "none" and settings.signal_at > 0:
            await asyncio.sleep(settings.signal_at * settings.hold_s)
        sent_at = time.perf_counter()
        if action == "steer":
            await control.steer(session, "Look at the gateway instead.", author="bench")
        elif action == "stop":
            await control.stop(session, request.turn_id, by="bench")
    outcome, returned_at = task.result()
    closed_at = responses_at[-1] if responses_at else returned_at
    return Trial(
        result=type(outcome.result).__name__,
        latency_s=returned_at - sent_at,
        elapsed_s=sent_at - hold.all_started_at,
        running_at_return=hold.running,
        batch_closed_s=closed_at - hold.all_started_at,
    )


@dataclass(frozen=True)
class CutStats:
    """Median latency of one interruption case, as ratios to the uninterrupted batch."""

    label: str
    expected: str
    results: str
    latency_s: float
    to_batch: float
    to_remaining: float
    running_at_return: int
    all_expected: bool
    """Every trial of the case ended with the expected result."""


async def measure_cuts(
    client: aioredis.Redis, control: ControlPlane, settings: Settings
) -> tuple[float, list[CutStats]]:
    """Return the uninterrupted batch time and the steer/stop cases against it."""
    cases: list[tuple[str, Action, Interruptibility, bool, str]] = [
        ("steer, abortable", "steer", Interruptibility.ABORTABLE, True, Steered.__name__),
        ("steer, must-complete", "steer", Interruptibility.MUST_COMPLETE, True, Steered.__name__),
        ("steer, abortable, no cancel¹", "steer", Interruptibility.ABORTABLE, False,
         Steered.__name__),
        ("stop, abortable", "stop", Interruptibility.ABORTABLE, True, Stopped.__name__),
        ("stop, must-complete", "stop", Interruptibility.MUST_COMPLETE, True, Stopped.__name__),
    ]  # fmt: skip
    await _trial(
        client, control, settings, action="none", interruptibility=Interruptibility.ABORTABLE
    )
    trials: dict[str, list[Trial]] = {"baseline": []}
    for label, *_ in cases:
        trials[label] = []
    for _ in range(settings.reps):  # interleaved, so drift in machine load hits every case alike
        trials["baseline"].append(
            await _trial(
                client, control, settings, action="none",
                interruptibility=Interruptibility.MUST_COMPLETE,
            )
        )  # fmt: skip
        for label, action, kind, cancels, _expected in cases:
            trials[label].append(
                await _trial(
                    client, control, settings, action=action, interruptibility=kind,
                    steer_cancels_tools=cancels,
                )
            )  # fmt: skip
    batch_s = statistics.median(t.batch_closed_s for t in trials["baseline"])
    rows = [
        _cut_row(
            "no signal (batch time)", Completed.__name__, trials["baseline"], batch_s, none=True
        )
    ]
    for label, _action, _kind, _cancels, expected in cases:
        rows.append(_cut_row(label, expected, trials[label], batch_s, none=False))
    return batch_s, rows


def _cut_row(
    label: str, expected: str, trials: list[Trial], batch_s: float, *, none: bool
) -> CutStats:
    results = sorted({t.result for t in trials})
    ok = sum(t.result == expected for t in trials)
    if none:
        latencies = [t.batch_closed_s for t in trials]
        remaining = [1.0 for _ in trials]
    else:
        latencies = [t.latency_s for t in trials]
        rest = f"{label} ÷ rest"
        remaining = [ratio(t.latency_s, batch_s - t.elapsed_s, name=rest) for t in trials]
    latency = statistics.median(latencies)
    return CutStats(
        label=label,
        expected=expected,
        results=f"{expected} {ok}/{len(trials)}" + ("" if ok == len(trials) else f" {results}"),
        latency_s=latency,
        to_batch=ratio(latency, batch_s, name=f"{label} ÷ batch"),
        to_remaining=statistics.median(remaining),
        running_at_return=max(t.running_at_return for t in trials),
        all_expected=ok == len(trials),
    )


# --------------------------------------------------------------------------------------------
# report


def _stream_table(streams: list[StreamStats]) -> Table:
    table = Table(
        title="1. Signal probes per turn vs events per turn (docs/design.md §Invariants I2)"
    )
    table.add_column("per turn (mean)", no_wrap=True)
    for s in streams:
        table.add_column(f"{s.label}\n(delta_chunks={s.chunks})", justify="right")
    rows: list[tuple[str, Callable[[StreamStats], str]]] = [
        ("turns completed", lambda s: f"{s.completed}/{s.turns}"),
        ("events", lambda s: f"{s.events:.1f}"),
        ("signal probes", lambda s: f"{s.probes:.2f}"),
        ("events / probe", lambda s: f"{s.events / s.probes:.1f}"),
        ("Redis round trips (client)", lambda s: f"{s.round_trips:.1f}"),
        ("  of which probes", lambda s: f"{s.probes:.1f}"),
        ("  other (store, journal)", lambda s: f"{s.round_trips - s.probes:.1f}"),
        ("Redis commands (server)", lambda s: f"{s.commands:.1f}"),
        ("  LLEN = probes seen by server", lambda s: f"{s.llen_calls:.1f}"),
        ("  probe commands (3 per probe)", lambda s: f"{_PROBE_COMMANDS * s.llen_calls:.1f}"),
        ("  other commands", lambda s: f"{s.commands - _PROBE_COMMANDS * s.llen_calls:.1f}"),
        ("events / Redis round trip", lambda s: f"{s.events / s.round_trips:.1f}"),
    ]
    for name, cell in rows:
        table.add_row(name, *(cell(s) for s in streams))
    return table


def _ledger_table(ledger: LedgerStats, stream: StreamStats) -> Table:
    table = Table(title=f"2. Ledger overhead ({ledger.events:,} pre-built events, best pass)")
    table.add_column("events")
    table.add_column("share", justify="right")
    table.add_column("ns/event:\nbare", justify="right")
    table.add_column("\ncall³", justify="right")
    table.add_column("\nledger", justify="right")
    table.add_column("ledger\n÷ bare", justify="right")
    table.add_column("ledger\n÷ call³", justify="right")
    for kind in _KINDS:
        bare, call = ledger.bare_by_kind[kind], ledger.call_by_kind[kind]
        cost = ledger.ledger_ns[kind]
        share = "100%" if kind == "mix" else f"{ledger.share[kind]:.1%}"
        name = {"calls": "model final+calls", "response": "tool response"}.get(kind, kind)
        table.add_row(
            name,
            share,
            f"{bare:.1f}",
            f"{call:.1f}",
            f"{cost:.1f}",
            f"{cost / bare:.1f}x",
            f"{cost / call:.1f}x",
        )
    per_turn_s = ledger.ledger_ns["mix"] * stream.events / 1e9
    table.caption = (
        "bare = loop reading event.partial; ³ call = loop calling a one-line function per event. "
        f"Ledger time of one real turn ({stream.events:.0f} events) ÷ that turn's median wall "
        f"time: {per_turn_s / stream.turn_s:.1e}"
    )
    return table


def _cut_table(batch_s: float, rows: list[CutStats], settings: Settings) -> Table:
    table = Table(
        title=(
            f"3. Signal write -> run returned, {settings.hold_width} parallel tools, "
            f"median of {settings.reps}"
        )
    )
    table.add_column("case", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("÷ batch", justify="right")
    table.add_column("÷ rest²", justify="right")
    table.add_column("ms", justify="right")
    for r in rows:
        table.add_row(
            r.label,
            r.results,
            f"{r.to_batch:.3f}",
            f"{r.to_remaining:.3f}",
            f"{r.latency_s * 1e3:.1f}",
        )
    running = max(r.running_at_return for r in rows)
    table.caption = (
        f"Signal written {settings.signal_at:.0%} of the hold after all calls started. "
        f"Batch time = all calls started -> last response, uninterrupted: {batch_s * 1e3:.0f} ms "
        f"(each call holds {settings.hold_s * 1e3:.0f} ms). "
        "¹ LoopLimits(steer_cancels_tools=False). "
        "² the batch time left when the signal was written. "
        f"Tool calls still running when a run returned (worst trial): {running}."
    )
    return table


# --------------------------------------------------------------------------------------------
# figures


def _slug(label: str) -> str:
    return "_".join(label.replace(",", " ").replace("¹", "").replace("-", "_").split())


def figures(
    streams: list[StreamStats], ledger: LedgerStats, cuts: list[CutStats]
) -> dict[str, float]:
    """The ratios of the run, after checking every trial did what it measures.

    Raises:
        FigureError: A scripted turn did not complete, or an interrupted batch ended otherwise
            than its case expects (a refused call, a timeout turned into a result).
    """
    for s in streams:
        require(s.completed == s.turns, f"{s.label}: {s.completed}/{s.turns} turns completed")
    for cut in cuts:
        require(cut.all_expected, f"{cut.label}: expected {cut.results}")
    short, long = streams
    out = {
        "probes_per_turn.long_vs_short": ratio(long.probes, short.probes, name="probes"),
        "events_per_turn.long_vs_short": ratio(long.events, short.events, name="events"),
        "events_per_probe.long": ratio(long.events, long.probes, name="events per probe"),
        "ledger_vs_bare_loop": ratio(ledger.ledger_ns["mix"], ledger.bare_ns, name="ledger"),
        "ledger_vs_call_loop": ratio(
            ledger.ledger_ns["mix"], ledger.call_by_kind["mix"], name="ledger vs call"
        ),
        "ledger_share_of_turn": ratio(
            ledger.ledger_ns["mix"] * long.events / 1e9, long.turn_s, name="ledger share"
        ),
    }
    for cut in cuts[1:]:  # cuts[0] is the baseline itself (1.0 by construction)
        out[f"cut.{_slug(cut.label)}.vs_batch"] = cut.to_batch
        out[f"cut.{_slug(cut.label)}.vs_rest"] = cut.to_remaining
    return out


# --------------------------------------------------------------------------------------------
# main


async def bench(redis_url: str, settings: Settings, console: Console) -> dict[str, float]:
    """Run the three measurements against the Redis at `redis_url`; print tables, return ratios."""
    pool = aioredis.ConnectionPool.from_url(redis_url, connection_class=_CountingConnection)
    client = aioredis.Redis.from_pool(pool)  # the runtime's traffic; counted
    admin = aioredis.Redis.from_url(redis_url)  # INFO and ControlPlane; not counted
    try:
        started = time.perf_counter()
        streams = [
            await measure_stream(client, admin, settings, "short stream", settings.short_chunks),
            await measure_stream(client, admin, settings, "long stream", settings.long_chunks),
        ]
        ledger = measure_ledger(settings, settings.long_chunks)
        batch_s, cuts = await measure_cuts(client, ControlPlane(admin), settings)
        console.print(_stream_table(streams))
        console.print(f"probe sites per turn: {streams[-1].sites}")
        console.print(f"server commands per turn (long stream): {streams[-1].top_commands}")
        console.print()
        console.print(_ledger_table(ledger, streams[-1]))
        console.print()
        console.print(_cut_table(batch_s, cuts, settings))
        console.print(f"\n(total {time.perf_counter() - started:.1f} s)")
        return figures(streams, ledger, cuts)
    finally:
        await client.aclose()
        await admin.aclose()


_MODES = """\
modes:
  (default)  20 turns per stream length, 500 ledger turns x 15 passes, 7 repetitions of each
             latency case with a 200 ms hold (about half a minute)
  --smoke    3 turns, 50 ledger turns x 2 passes, 1 repetition with a 100 ms hold (seconds);
             checks that every figure can be produced (`make test` runs it)

Every figure is a ratio to a baseline measured in the same run, printed last as
`ratio <name> = <number>` lines. Exit status 1 when a figure cannot be produced: a scripted
turn that does not complete, an interrupted batch that ends otherwise than its case expects,
a trial that times out, an unusable baseline, or an unreachable Redis."""


def parse_args(argv: list[str] | None = None) -> tuple[Settings, str | None]:
    """Parse the command line into `Settings` and the Redis URL (None: start a redis-server)."""
    parser = argparse.ArgumentParser(
        description=(
            "Benchmark the agent runtime: signal probes per turn against events per turn, the "
            "balance ledger against a bare loop, and the time from a steer or stop to the cut "
            "against the uninterrupted batch."
        ),
        epilog=_MODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--turns", type=int, default=20, help="scripted turns per stream length")
    parser.add_argument("--batches", type=int, default=3, help="tool batches per turn")
    parser.add_argument("--deltas", type=int, default=200, help="deltas of the long stream")
    parser.add_argument("--reps", type=int, default=7, help="repetitions of each latency case")
    parser.add_argument("--hold-ms", type=float, default=200.0, help="how long each held tool runs")
    parser.add_argument(
        "--signal-at",
        type=float,
        default=0.0,
        help="write the steer/stop this fraction of the hold after all calls started (0..0.9)",
    )
    parser.add_argument("--smoke", "--quick", action="store_true", help=SMOKE_HELP)
    parser.add_argument(
        "--redis-url",
        help="use this Redis (a database the bench may write to) instead of starting a "
        "redis-server; its INFO commandstats then also count other clients' commands",
    )
    args = parser.parse_args(argv)
    smoke = args.smoke
    settings = Settings(
        turns=max(1, 3 if smoke else args.turns),
        batches=max(1, args.batches),
        widths=(3, 4, 5),
        tool_sleep_s=0.002,
        short_chunks=2,
        long_chunks=max(1, args.deltas),
        answer_chars=max(2000, 10 * args.deltas),
        ledger_turns=50 if smoke else 500,
        ledger_reps=2 if smoke else 15,
        reps=max(1, 1 if smoke else args.reps),
        hold_s=(100.0 if smoke else args.hold_ms) / 1e3,
        hold_width=3,
        signal_at=min(max(args.signal_at, 0.0), 0.9),
    )
    return settings, args.redis_url


def main(argv: list[str] | None = None) -> int:
    """Start redis-server (or use `--redis-url`), run the benchmark; return the exit status."""
    settings, redis_url = parse_args(argv)
    console = Console()

    def body() -> int:
        if redis_url is not None:
            print_ratios(asyncio.run(bench(redis_url, settings, console)))
            return 0
        with redis_server() as port:
            ratios = asyncio.run(bench(f"redis://127.0.0.1:{port}/0", settings, console))
        print_ratios(ratios)
        return 0

    return run(body)


if __name__ == "__main__":
    sys.exit(main())
