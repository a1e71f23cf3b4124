"""Running one batch of tool calls in parallel, so that it always closes.

Every call of a batch is answered by exactly one `ToolMessage`, whatever happens: a result, a
clear error (unknown tool, arguments that are not JSON or break the tool's schema, timeout,
failure) or "interrupted". Arguments are checked before the handler runs (docs/reliability.md A2,
H2): a bad call is answered with an error naming the problem while the batch's other calls run.
Interruptible calls are cancelled when the turn's `abort` event is set (a stop, or a steer);
must-complete calls always run to their end or timeout. A call that has not started when a stop
is accepted never starts.

Retries: an idempotent tool whose attempt fails with a retryable error (`ToolFailed(retryable=
True)`, or a timeout the handler raised itself, never the call's own deadline) runs again, as
its `RetryPolicy` allows, after a jittered backoff. The backoff is raced against the same event
as the call itself (`abort` for an interruptible tool), so a stop during the wait answers
"interrupted" and nothing runs again; a must-complete tool's wait ends at a stop, which leaves
its last failure as the answer (a stop starts nothing new).

Text from outside (docs/reliability.md X9): a tool's output and failures are quoted as untrusted
data by the `guarded` wrapper (`agent_core.tools._hygiene`) before they get here, so a failure is
written as `error: ` and its already quoted text, and its `retryable` flag still decides the
retry. The one failure raised here that quotes outside text, a schema error quoting the model's
arguments (which may repeat what a tool returned), is quoted here with the same function
(`agent_core._untrusted.quote_untrusted`); the rest of the batch's own wording quotes nothing.

Results are handed to `on_result` one by one as they arrive (for the ledger and the journal); the
batch returns them in call order.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agent_core._diagnostics import RunDiagnostics
from agent_core._errors import ToolFailed
from agent_core._interrupts import INTERRUPTED, TurnSignals, until_set
from agent_core._messages import ToolCall, ToolMessage, ToolStatus
from agent_core._untrusted import QuoteKind, neutralise_markers, quote_untrusted
from agent_core.tools._base import Risk, Tool, ToolContext, Toolset
from agent_core.tools._connections import on_the_clock

__all__ = ["ResultSink", "needs_approval", "parse_arguments", "run_batch", "would_run"]

ResultSink = Callable[[ToolMessage], Awaitable[None]]


def _answer(call: ToolCall, content: str, status: ToolStatus) -> ToolMessage:
    return ToolMessage(call_id=call.id, name=call.name, content=content, status=status)


def parse_arguments(call: ToolCall, toolset: Toolset) -> Mapping[str, Any]:
    """The call's arguments, checked against its tool's schema.

    Raises:
        ToolFailed: The arguments are not a JSON object or break the schema.
    """
    try:
        args = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as exc:
        raise ToolFailed(f"arguments are not valid JSON ({exc.msg} at {exc.pos})") from exc
    except RecursionError as exc:  # the model's JSON nests past what the decoder recurses
        raise ToolFailed("arguments nest too deeply to read") from exc
    if not isinstance(args, dict):
        raise ToolFailed("arguments must be a JSON object")
    try:
        toolset.check_arguments(call.name, args)
    except RecursionError as exc:  # nesting the decoder took, past what the schema check can
        raise ToolFailed("arguments nest too deeply to check") from exc
    except ToolFailed as exc:
        quoted = quote_untrusted(call.name, str(exc), kind=QuoteKind.TOOL_ERROR)
        detail = f"invalid arguments for {call.name}; the details quote them.\n{quoted}"
        raise ToolFailed(detail) from exc
    return args


def needs_approval(call: ToolCall, toolset: Toolset) -> bool:
    """Whether the call may change something and would run: it waits for a person first.

    A call that would be refused anyway (unknown tool, bad arguments) is answered with its
    error instead; nobody is asked to approve a call that cannot run.
    """
    tool = toolset.get(call.name)
    return tool is not None and tool.risk is not Risk.READ_ONLY and would_run(call, toolset)


def would_run(call: ToolCall, toolset: Toolset) -> bool:
    """Whether the call names an offered tool and its arguments fit (else it gets its error)."""
    if toolset.get(call.name) is None:
        return False
    try:
        parse_arguments(call, toolset)
    except ToolFailed:
        return False
    return True


class _CallContext:
    """The turn's context as one call sees it: with that call's id."""

    def __init__(self, turn: ToolContext, call_id: str) -> None:
        self._turn = turn
        self._call_id = call_id

    @property
    def session_id(self) -> str:
        return self._turn.session_id

    @property
    def turn_id(self) -> str:
        return self._turn.turn_id

    @property
    def call_id(self) -> str:
        return self._call_id

    def raise_dispatch(self) -> None:
        self._turn.raise_dispatch()

    def raise_await(self) -> None:
        self._turn.raise_await()


class _DeadlinePassed(TimeoutError):
    """The call ran past its tool's `timeout_s`: answered as a timeout, never retried.

    A hung dependency would only make the turn wait that long again, and again.
    """


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, _DeadlinePassed):
        return False
    return isinstance(exc, TimeoutError) or (isinstance(exc, ToolFailed) and exc.retryable)


async def _attempt(
    tool: Tool, args: Mapping[str, Any], ctx: ToolContext, signals: TurnSignals
) -> object:
    deadline = asyncio.timeout(tool.timeout_s)
    try:
        async with deadline:
            with on_the_clock(deadline):  # a wait for a connection pauses it (`off_the_clock`)
                if tool.interruptible:
                    return await until_set(signals.abort, tool.handler(args, ctx))
                return await tool.handler(args, ctx)
    except TimeoutError:
        if deadline.expired():
            raise _DeadlinePassed() from None
        raise  # the handler's own timeout (e.g. a connect timeout): retryable


async def _backoff(tool: Tool, failed_attempt: int, signals: TurnSignals) -> bool:
    """Wait before the next attempt; return False when a stop (or abort) ended the wait."""
    event = signals.abort if tool.interruptible else signals.stop
    waited = await until_set(event, asyncio.sleep(tool.retry.delay_s(failed_attempt)))
    return waited is not INTERRUPTED


async def _call_with_retries(
    call: ToolCall,
    tool: Tool,
    args: Mapping[str, Any],
    ctx: ToolContext,
    signals: TurnSignals,
    diag: RunDiagnostics,
) -> object:
    """Run the handler; retry a retryable failure as the tool's policy allows.

    Returns the handler's text or `INTERRUPTED`; raises the last attempt's error.
    """
    attempts = tool.retry.attempts if tool.idempotent else 1
    for attempt in range(1, attempts + 1):
        try:
            return await _attempt(tool, args, ctx, signals)
        except (ToolFailed, TimeoutError) as exc:
            if attempt == attempts or not _retryable(exc):
                raise
            if not await _backoff(tool, attempt, signals):
                if tool.interruptible:
                    return INTERRUPTED
                raise
        diag.note("tool_retry", call.id)
    raise AssertionError("unreachable: the last attempt returns or raises")


async def _execute(
    call: ToolCall,
    tool: Tool,
    toolset: Toolset,
    ctx: ToolContext,
    signals: TurnSignals,
    diag: RunDiagnostics,
    approved: frozenset[str],
) -> ToolMessage:
    if signals.stop.is_set() or (tool.interruptible and signals.abort.is_set()):
        return _answer(
            call, f"not run: interrupted by {signals.abort_reason}", ToolStatus.INTERRUPTED
        )
    try:
        args = parse_arguments(call, toolset)
        if tool.risk is not Risk.READ_ONLY and call.id not in approved:
            # The loop never hands an unapproved change here; this is the last line of defence.
            return _answer(
                call, "error: not run: this call needs a person's approval", ToolStatus.ERROR
            )
        diag.tool_started(call.id)
        output = await _call_with_retries(call, tool, args, ctx, signals, diag)
    except ToolFailed as exc:
        return _answer(call, f"error: {exc}", ToolStatus.ERROR)
    except TimeoutError:
        return _answer(call, f"error: timed out after {tool.timeout_s:g} s", ToolStatus.ERROR)
    except Exception as exc:  # a tool's bug must close its call, not the turn
        return _answer(call, f"error: {type(exc).__name__}: {exc}", ToolStatus.ERROR)
    if output is INTERRUPTED:
        return _answer(
            call,
            f"interrupted by {signals.abort_reason} before it finished",
            ToolStatus.INTERRUPTED,
        )
    assert isinstance(output, str)
    return _answer(call, output, ToolStatus.OK)


async def _answer_one(
    call: ToolCall,
    toolset: Toolset,
    ctx: ToolContext,
    signals: TurnSignals,
    diag: RunDiagnostics,
    done: asyncio.Queue[ToolMessage],
    approved: frozenset[str],
) -> None:
    ctx = _CallContext(ctx, call.id)
    tool = toolset.get(call.name)
    if tool is None:
        offered = ", ".join(sorted(t.name for t in toolset)) or "none"
        name = neutralise_markers(call.name)  # the model's own words, but maybe copied
        text = f"error: unknown tool {name!r} (offered: {offered})"
        result = _answer(call, text, ToolStatus.ERROR)
    else:
        try:
            result = await _execute(call, tool, toolset, ctx, signals, diag, approved)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the batch itself is being cancelled
            # The tool awaited something another party cancelled: its call must still close.
            result = _answer(call, "error: the tool was cancelled unexpectedly", ToolStatus.ERROR)
    done.put_nowait(result)


async def run_batch(
    calls: Sequence[ToolCall],
    toolset: Toolset,
    ctx: ToolContext,
    signals: TurnSignals,
    diag: RunDiagnostics,
    on_result: ResultSink,
    approved: frozenset[str] = frozenset(),
) -> list[ToolMessage]:
    """Run every call of a batch concurrently; return one result per call, in call order.

    A call to a tool that is not read-only runs only if its id is in `approved`.
    """
    done: asyncio.Queue[ToolMessage] = asyncio.Queue()
    results: dict[str, ToolMessage] = {}
    async with asyncio.TaskGroup() as group:
        for call in calls:
            group.create_task(_answer_one(call, toolset, ctx, signals, diag, done, approved))
        for _ in calls:
            result = await done.get()
            results[result.call_id] = result
            offered = toolset.get(result.name) is not None
            diag.tool_answered(result.call_id, result.name if offered else "", result.status)
            await on_result(result)
    return [results[call.id] for call in calls]
