"""OpenTelemetry traces: the spans of one analysis, as a collector receives them; none when off.

Why this way: a trace is only as good as what reaches the collector, so the test runs a local
OTLP/HTTP receiver (a threaded `http.server`: the exporter posts from its own thread, and a
receiver on the test's event loop could not answer while the loop waits on the final flush),
decodes each POST to `/v1/traces` with `opentelemetry-proto`'s `ExportTraceServiceRequest`,
and checks the span names, parents and attributes of one real analysis through the in-process
bot (a signed Slack mention, the fake model asking for one tool call, then answering). The
model-request and tool-call spans are built from the run's diagnostics after the fact, so their
order is checked (from the same monotonic stamps), never their durations. "Off" is checked in a
fresh interpreter: importing the processes' modules and configuring no endpoint loads neither
the SDK's tracer nor an exporter.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from agent_core._diagnostics import RunDiagnostics
from bot.errors import BotConfigError
from bot.tracing import (
    EVENT_SPAN,
    MODEL_SPAN,
    TOOL_SPAN,
    TURN_SPAN,
    configure_tracing,
    model_requests,
    shutdown_tracing,
    tracing_enabled,
)
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg


class Collector:
    """An OTLP/HTTP receiver on a loopback port: the decoded export requests, in order."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        received = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.paths.append(self.path)
                assert self.headers["Content-Type"] == "application/x-protobuf"
                received.requests.append(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def spans(self) -> list[tuple[dict[str, Any], Any]]:
        """(resource attributes, span) for every span received."""
        found = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                resource = attributes_of(resource_spans.resource)
                for scope_spans in resource_spans.scope_spans:
                    found += [(resource, span) for span in scope_spans.spans]
        return found

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


def attributes_of(item: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for kv in item.attributes:
        kind = kv.value.WhichOneof("value")
        values[kv.key] = getattr(kv.value, kind) if kind else None
    return values


@pytest.fixture
def collector() -> Iterator[Collector]:
    received = Collector()
    yield received
    shutdown_tracing()
    received.close()


async def test_one_analysis_is_an_event_span_and_a_turn_with_its_model_and_tool_spans(
    collector, bot, fake_llm, slow_service
) -> None:
    assert configure_tracing(collector.url + "/", process="test")
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("The service is healthy."),
    )
    await bot.start_worker()
    mention = sg.slack_app_mention()
    await bot.post(mention)
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    await asyncio.to_thread(shutdown_tracing)  # flushes the batch: every span is exported

    assert set(collector.paths) == {"/v1/traces"}
    spans = collector.spans()
    assert {resource["service.name"] for resource, _ in spans} == {"chatops"}
    by_name: dict[str, list[Any]] = {}
    for _, span in spans:
        by_name.setdefault(span.name, []).append(span)
    assert sorted(by_name) == sorted([EVENT_SPAN, TURN_SPAN, MODEL_SPAN, TOOL_SPAN])

    (event_span,) = by_name[EVENT_SPAN]
    event = attributes_of(event_span)
    session = event["chatops.session_id"]
    assert event["chatops.event_id"] == mention["event_id"]
    assert (event["chatops.platform"], event["chatops.outcome"]) == ("slack", "start")

    (turn_span,) = by_name[TURN_SPAN]
    turn = attributes_of(turn_span)
    assert turn["chatops.session_id"] == session
    assert turn["chatops.event_id"] == mention["event_id"]  # the link to the ingress's span
    assert turn["chatops.settle_reason"] == "completed"
    assert turn["chatops.model_requests"] == 2
    assert turn["gen_ai.usage.input_tokens"] > 0
    turn_id = turn["chatops.turn_id"]

    first, second = sorted(by_name[MODEL_SPAN], key=lambda s: s.start_time_unix_nano)
    (tool_span,) = by_name[TOOL_SPAN]
    for child in (first, second, tool_span):
        assert (child.trace_id, child.parent_span_id) == (turn_span.trace_id, turn_span.span_id)
        attrs = attributes_of(child)
        assert (attrs["chatops.session_id"], attrs["chatops.turn_id"]) == (session, turn_id)
    assert [attributes_of(s)["chatops.model_request.seq"] for s in (first, second)] == [1, 2]
    assert {attributes_of(s)["chatops.model_request.outcome"] for s in (first, second)} == {
        "answered"
    }
    tool = attributes_of(tool_span)
    assert (tool["gen_ai.tool.name"], tool["chatops.tool.status"]) == ("http_get", "ok")
    assert tool["chatops.tool.ran"] is True
    # In order, from the run's own stamps: the first answer, the tool, the second request.
    assert first.end_time_unix_nano <= tool_span.start_time_unix_nano
    assert tool_span.start_time_unix_nano <= tool_span.end_time_unix_nano
    assert tool_span.end_time_unix_nano <= second.start_time_unix_nano
    assert turn_span.start_time_unix_nano <= first.start_time_unix_nano
    assert second.end_time_unix_nano <= turn_span.end_time_unix_nano


def test_model_requests_pairs_each_request_with_how_it_ended() -> None:
    diag = RunDiagnostics(session_id="s", turn_id="t")
    diag.note("model_request", "1")
    diag.note("model_response", "resp-1")
    diag.tool_started("c1")
    diag.note("model_request", "2")
    diag.note("model_aborted", "alice")
    diag.note("model_request", "3")
    diag.note("end", "Failed")

    found = model_requests(diag)
    assert [(r.seq, r.outcome, r.response_id) for r in found] == [
        (1, "answered", "resp-1"),
        (2, "aborted", ""),
        (3, "unanswered", ""),
    ]
    assert found[2].ended_at == diag.trace[-1].at
    assert all(r.started_at <= r.ended_at for r in found)


def test_no_endpoint_imports_neither_the_tracer_sdk_nor_an_exporter() -> None:
    probe = (
        "import sys\n"
        "import bot.cli.main, bot.ingress.app, bot.worker.assembly, bot.ops.scheduler\n"
        "import bot.tracing\n"
        "assert bot.tracing.configure_tracing(None, process='worker') is False\n"
        "loaded = [m for m in sys.modules if m.startswith(('opentelemetry.sdk.trace',"
        " 'opentelemetry.exporter'))]\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
    assert not tracing_enabled()


def test_an_endpoint_without_the_packages_is_a_config_error(monkeypatch) -> None:
    # A None entry makes the import fail, as on an install without the `otel` extra.
    exporter = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    monkeypatch.setitem(sys.modules, exporter, None)
    with pytest.raises(BotConfigError, match="chatops\\[otel\\]"):
        configure_tracing("http://127.0.0.1:4318", process="worker")
    assert not tracing_enabled()
