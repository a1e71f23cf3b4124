"""What the processes say about each event and turn: log ids, one log line, and (opt-in) spans.

Where work begins, the ingress and the worker call in here: `taking` around one event taken in
(`bot.intake.accept.Intake.take`, whichever transport delivered it), `traced_turn` around one run of
the runtime (`bot.analysis.turn_chain`). Each binds the log ids (`bot.logs`) and logs one INFO line
with ids, kinds and counts, never text.

OpenTelemetry traces, when `OTEL_EXPORTER_OTLP_ENDPOINT` is set (`configure_tracing`, at the
start of `chatops serve` and `chatops worker`), go over OTLP/HTTP (protobuf) in batches:

- `chatops.event`: one event taken in at the ingress (decided and written; the ack follows);
- `chatops.turn`: one turn run by a worker, with its settle reason and token usage;
- `chatops.model_request` and `chatops.tool_call`, children of their turn.

The last two are built after the turn from its `RunDiagnostics`, with the start and end times
the runtime stamped (`time.monotonic`, moved onto the wall clock): the runtime records, `bot`
observes, as for the worker metrics, and `agent_core` stays free of OpenTelemetry. Every span
carries `chatops.session_id`; turns and their children `chatops.turn_id`; events and turns
`chatops.event_id` (a turn names the event that started its analysis, which links it to its
ingress span). Unset (the default), nothing of OpenTelemetry is imported here; the packages
are the optional extra `chatops[otel]`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core import RunDiagnostics, RunOutcome, SettleReason, ToolStatus, TurnRequest
from bot.errors import BotConfigError
from bot.events import ChatEvent
from bot.logs import bind, log_context

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "EVENT_SPAN",
    "MODEL_SPAN",
    "TOOL_SPAN",
    "TURN_SPAN",
    "ModelRequest",
    "Taking",
    "configure_tracing",
    "model_requests",
    "shutdown_tracing",
    "taking",
    "traced_turn",
    "tracing_enabled",
]

log = logging.getLogger(__name__)

EVENT_SPAN = "chatops.event"
TURN_SPAN = "chatops.turn"
MODEL_SPAN = "chatops.model_request"
TOOL_SPAN = "chatops.tool_call"
UNKNOWN_TOOL = "unknown"
"""The tool name of a call to a tool the turn did not offer (model-made names stay out)."""
SHUTDOWN_TIMEOUT_S = 5.0
"""How long a stopping process waits for its last spans to be exported."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model request of a run, from its trace."""

    seq: int
    """1 for the run's first request."""
    started_at: float
    """`time.monotonic()` when it was sent."""
    ended_at: float
    """When it was answered, aborted, or (unanswered) when the run ended."""
    outcome: str
    """`answered`, `aborted` (a stop cut its stream) or `unanswered` (the run ended first)."""
    response_id: str = ""


def model_requests(diag: RunDiagnostics) -> list[ModelRequest]:
    """The model requests of a run, in order, paired with how each ended."""
    found: list[ModelRequest] = []
    open_at: float | None = None
    seq, last = 0, 0.0
    for entry in diag.trace:
        last = entry.at
        if entry.kind == "model_request":
            open_at, seq = entry.at, seq + 1
        elif open_at is not None and entry.kind in ("model_response", "model_aborted"):
            answered = entry.kind == "model_response"
            outcome, response_id = ("answered", entry.detail) if answered else ("aborted", "")
            found.append(ModelRequest(seq, open_at, entry.at, outcome, response_id))
            open_at = None
    if open_at is not None:
        found.append(ModelRequest(seq, open_at, last, "unanswered"))
    return found


class _Otel:
    """The tracer provider of this process, and how runs become spans."""

    def __init__(self, endpoint: str, process: str) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        # The standard variable names the collector's base URL; the traces path is added here
        # because an explicit `endpoint=` is taken as is (OTLP/HTTP spec, "Endpoint URLs").
        url = endpoint.rstrip("/") + "/v1/traces"
        resource = Resource.create({"service.name": "chatops", "chatops.process": process})
        self.provider: TracerProvider = TracerProvider(resource=resource, shutdown_on_exit=False)
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
        self.tracer: Tracer = self.provider.get_tracer("chatops")

    async def turn(
        self, request: TurnRequest, event_id: str, run: Awaitable[RunOutcome]
    ) -> RunOutcome:
        """Run the turn inside its span; its model requests and tool calls become children."""
        ids = {"chatops.session_id": request.session_id, "chatops.turn_id": request.turn_id}
        attributes = {**ids, "chatops.event_id": event_id}
        with self.tracer.start_as_current_span(TURN_SPAN, attributes=attributes) as span:
            outcome = await run
            self._ran(span, outcome, ids)
            return outcome

    def _ran(self, span: Span, outcome: RunOutcome, ids: dict[str, str]) -> None:
        from opentelemetry.trace import Status, StatusCode, set_span_in_context

        diag = outcome.diagnostics
        span.set_attribute("chatops.settle_reason", outcome.reason.value)
        span.set_attribute("chatops.model_requests", diag.model_requests)
        span.set_attribute("gen_ai.usage.input_tokens", diag.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", diag.usage.completion_tokens)
        if outcome.reason is SettleReason.FAILED:
            span.set_status(Status(StatusCode.ERROR, "turn failed"))
        parent = set_span_in_context(span)
        offset_ns = time.time_ns() - time.monotonic_ns()

        def wall(at: float) -> int:
            return int(at * 1e9) + offset_ns

        for request in model_requests(diag):
            child = self.tracer.start_span(
                MODEL_SPAN,
                context=parent,
                start_time=wall(request.started_at),
                attributes={
                    **ids,
                    "gen_ai.operation.name": "chat",
                    "chatops.model_request.seq": request.seq,
                    "chatops.model_request.outcome": request.outcome,
                    "gen_ai.response.id": request.response_id,
                },
            )
            child.end(end_time=wall(request.ended_at))
        for call in diag.tools:
            child = self.tracer.start_span(
                TOOL_SPAN,
                context=parent,
                start_time=wall(call.ended_at if call.started_at is None else call.started_at),
                attributes={
                    **ids,
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.tool or UNKNOWN_TOOL,
                    "gen_ai.tool.call.id": call.call_id,
                    "chatops.tool.status": call.status.value,
                    "chatops.tool.ran": call.started_at is not None,
                },
            )
            if call.status is ToolStatus.ERROR:
                child.set_status(Status(StatusCode.ERROR, "tool call failed"))
            child.end(end_time=wall(call.ended_at))


_otel: _Otel | None = None


def configure_tracing(endpoint: str | None, *, process: str) -> bool:
    """Export this process's spans to `endpoint` (an OTLP/HTTP base URL); True if it does.

    None: no tracing, and nothing is imported. Calling it again replaces the exporter.

    Raises:
        BotConfigError: An endpoint is set but the `chatops[otel]` extra is not installed.
    """
    global _otel
    shutdown_tracing()
    if not endpoint:
        return False
    try:
        _otel = _Otel(endpoint, process)
    except ImportError as exc:
        raise BotConfigError(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set, but OpenTelemetry is not installed "
            f"(pip install 'chatops[otel]'): {exc}"
        ) from exc
    log.info("tracing to %s", endpoint)
    return True


def tracing_enabled() -> bool:
    """Whether spans are exported."""
    return _otel is not None


def shutdown_tracing(timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """Export the spans still queued (bounded), then stop tracing. Harmless when off."""
    global _otel
    otel, _otel = _otel, None
    if otel is not None:
        otel.provider.force_flush(int(timeout_s * 1000))
        otel.provider.shutdown()


class Taking:
    """One event being taken in: say what became of it (`taken`)."""

    def __init__(self, event: ChatEvent, span: Span | None) -> None:
        self._event = event
        self._span = span

    def taken(self, outcome: str) -> None:
        """The event was written and decided: log its routing outcome (and put it on the span)."""
        if self._span is not None:
            self._span.set_attribute("chatops.outcome", outcome)
        event = self._event
        log.info("%s %s event %s: %s", event.platform, event.kind, event.event_id, outcome)


@contextmanager
def taking(event: ChatEvent) -> Iterator[Taking]:
    """While `event` is taken in: its session and event ids on every log line, and its span."""
    with log_context(session=event.session_id, event=event.event_id):
        if _otel is None:
            yield Taking(event, None)
            return
        attributes = {
            "chatops.session_id": event.session_id,
            "chatops.event_id": event.event_id,
            "chatops.platform": event.platform.value,
            "chatops.event.kind": event.kind.value,
        }
        with _otel.tracer.start_as_current_span(EVENT_SPAN, attributes=attributes) as span:
            yield Taking(event, span)


async def traced_turn(
    request: TurnRequest, event: ChatEvent, run: Awaitable[RunOutcome]
) -> RunOutcome:
    """Await `run` (the runtime running `request`) as one observed turn.

    The turn's ids are bound for the rest of the caller's task (`bot.logs.bind`): the lines
    the turn chain logs after the run are about this turn too, until the next one binds its
    own.
    """
    bind(session=request.session_id, turn=request.turn_id, event=event.event_id)
    outcome = await (run if _otel is None else _otel.turn(request, event.event_id, run))
    diag = outcome.diagnostics
    log.info(
        "turn %s ran: %s (%d model requests, %d tool calls, %d+%d tokens)",
        request.turn_id,
        outcome.reason.value,
        diag.model_requests,
        len(diag.tools),
        diag.usage.prompt_tokens,
        diag.usage.completion_tokens,
    )
    return outcome
