"""The `prometheus_query` tool against a fake Prometheus that speaks the real HTTP API.

Why this way: what the tool must get right is the wire contract (endpoints, form parameters,
absolute times) and the reading of Prometheus' envelope (result types, `errorType`/`error`,
`infos`, plain-text 503s). `tests/fakes/prometheus_api.py` evaluates a small PromQL subset over
fixed series, so a wrong time, step or query gives a wrong answer or Prometheus' own error, not
a canned success. Most cases call the handler as the batch does; retries and the schema are
checked through the real `Runtime`, since the batch owns them. The tool's clock is pinned, so no
assertion depends on wall-clock time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agent_core import ConfigError, ToolFailed, TurnRequest, UserMessage
from agent_core.tools._prometheus import MAX_RUNS, MAX_SERIES, prometheus_tool
from bot.settings import Settings
from tests.conftest import free_port
from tests.fakes import openai_provider as fp
from tests.fakes.prometheus_api import DOWN_AT, FakePrometheus
from tests.tool_context import Ctx

NOW = DOWN_AT + 600


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    server.start()
    yield server
    server.stop()


async def run(prom: FakePrometheus, **args: Any) -> str:
    async with httpx.AsyncClient() as client:
        tool = prometheus_tool(prom.base_url, client, clock=lambda: NOW)
        return await tool.handler(args, Ctx())


async def refused(prom: FakePrometheus, **args: Any) -> ToolFailed:
    with pytest.raises(ToolFailed) as info:
        await run(prom, **args)
    return info.value


async def test_instant_vector_lists_each_series_with_its_value(prom: FakePrometheus) -> None:
    text = await run(prom, query="up", time=DOWN_AT + 60)
    assert text.splitlines() == [
        "instant query up at 2023-11-14T22:14:20Z",
        "instant vector at 2023-11-14T22:14:20Z, 3 series:",
        'up{instance="api-1:8080", job="api"} 1',
        'up{instance="api-2:8080", job="api"} 0',
        'up{instance="db-1:9187", job="db"} 1',
    ]
    [seen] = prom.seen
    assert (seen.method, seen.path) == ("POST", "/api/v1/query")
    assert seen.params == {"query": "up", "time": str(int(DOWN_AT + 60)), "timeout": "4000ms"}


async def test_rate_and_rfc3339_time(prom: FakePrometheus) -> None:
    text = await run(
        prom, query='rate(http_requests_total{code="500"}[5m])', time="2023-11-14T23:13:20+01:00"
    )
    assert text.splitlines()[1:] == [
        "instant vector at 2023-11-14T22:13:20Z, 1 series:",
        '{code="500", instance="api-1:8080", job="api"} 0.25',
    ]


async def test_range_folds_equal_values_so_a_flip_reads_as_two_runs(prom: FakePrometheus) -> None:
    text = await run(
        prom,
        query='up{instance="api-2:8080"}',
        start=DOWN_AT - 120,
        end=str(int(DOWN_AT + 120)),
        step="30s",
    )
    assert text.splitlines() == [
        'range query up{instance="api-2:8080"} from 2023-11-14T22:11:20Z'
        " to 2023-11-14T22:15:20Z, step 30 s",
        "range vector, 1 series:",
        'up{instance="api-2:8080", job="api"}: 9 points, min 0, max 1, last 0',
        # At DOWN_AT itself the latest scrape (15 s apart) is still from before the outage.
        "  2023-11-14T22:11:20Z to 2023-11-14T22:13:20Z 1 (5 points)",
        "  2023-11-14T22:13:50Z to 2023-11-14T22:15:20Z 0 (4 points)",
    ]


async def test_relative_start_resolves_against_the_clock_and_step_defaults(
    prom: FakePrometheus,
) -> None:
    text = await run(prom, query="up", start="-15m")
    [seen] = prom.seen
    assert seen.path == "/api/v1/query_range"
    assert (seen.params["start"], seen.params["end"]) == (str(int(NOW - 900)), str(int(NOW)))
    assert seen.params["step"] == "15"  # 900 s / DEFAULT_POINTS
    assert "range vector, 3 series:" in text
    assert 'up{instance="api-2:8080", job="api"}: 61 points, min 0, max 1, last 0' in text


async def test_scalar_and_string_results(prom: FakePrometheus) -> None:
    assert (await run(prom, query="42", time=DOWN_AT)).endswith("scalar 42 at 2023-11-14T22:13:20Z")
    assert (await run(prom, query='"hello"', time=DOWN_AT)).endswith(
        "string hello at 2023-11-14T22:13:20Z"
    )


async def test_series_and_points_are_capped_and_the_rest_counted(prom: FakePrometheus) -> None:
    text = await run(prom, query="process_open_fds", time=DOWN_AT)
    assert "40 series:" in text
    assert sum(line.startswith("process_open_fds{") for line in text.splitlines()) == MAX_SERIES
    assert text.endswith(
        f"… {40 - MAX_SERIES} more series left out; narrow the selector or aggregate"
    )

    counter = 'http_requests_total{code="200", instance="api-2:8080"}'
    text = await run(prom, query=counter, start=DOWN_AT, end=DOWN_AT + 29 * 15, step=15)
    lines = text.splitlines()
    assert f"  … {30 - MAX_RUNS} earlier runs left out" in lines
    assert sum(line.startswith("  2023-") for line in lines) == MAX_RUNS
    # 4 requests/s since 1.6e9, as scraped 5 s before the last step (DOWN_AT + 430).
    assert lines[-1] == "  2023-11-14T22:20:35Z 400001720"


async def test_infos_are_passed_on(prom: FakePrometheus) -> None:
    text = await run(prom, query="rate(up[5m])", time=DOWN_AT)
    assert text.splitlines()[-1] == (
        "info: PromQL info: metric might not be a counter, name does not end in"
        ' _total/_sum/_count/_bucket: "up"'
    )


async def test_bad_data_and_execution_errors_are_clear_and_not_retried(
    prom: FakePrometheus,
) -> None:
    error = await refused(prom, query="up{", time=DOWN_AT)
    assert str(error).startswith("Prometheus refused the query (HTTP 400) bad_data: ")
    assert 'invalid parameter "query"' in str(error) and not error.retryable

    prom.limit_samples(10)
    error = await refused(prom, query="process_open_fds", time=DOWN_AT)
    assert str(error) == (
        "Prometheus refused the query (HTTP 422) execution: query processing would load too"
        " many samples into memory in query execution"
    )
    assert not error.retryable


async def test_a_503_and_a_refused_connection_are_retryable(prom: FakePrometheus) -> None:
    prom.unavailable(1)
    error = await refused(prom, query="up")
    assert error.retryable
    assert str(error) == "Prometheus answered HTTP 503 Service Unavailable: Service Unavailable"

    port = free_port()
    async with httpx.AsyncClient() as client:
        tool = prometheus_tool(f"http://127.0.0.1:{port}", client)
        with pytest.raises(ToolFailed, match="unreachable: ConnectError") as info:
            await tool.handler({"query": "up"}, Ctx())
    assert info.value.retryable


@pytest.mark.parametrize(
    ("status", "error_type", "error", "retryable"),
    [
        (503, "timeout", "query timed out in expression evaluation", False),
        (422, "execution", "expanding series: context deadline exceeded", False),
        (503, "unavailable", "TSDB not ready", True),
    ],
)
async def test_prometheus_own_timeout_is_not_retried(
    status: int, error_type: str, error: str, retryable: bool
) -> None:
    """Its own timeout (worded as the real one, see test_prometheus_real.py) would only recur."""
    envelope = {"status": "error", "errorType": error_type, "error": error}
    transport = httpx.MockTransport(lambda request: httpx.Response(status, json=envelope))
    async with httpx.AsyncClient(transport=transport) as client:
        tool = prometheus_tool("http://prometheus:9090", client)
        with pytest.raises(ToolFailed) as info:
            await tool.handler({"query": "up"}, Ctx())
    assert info.value.retryable is retryable
    timed_out = f"Prometheus stopped the query at its 4000ms timeout (HTTP {status}) {error_type}"
    assert str(info.value).startswith(timed_out) is not retryable


async def test_a_wrong_base_url_says_so(prom: FakePrometheus) -> None:
    async with httpx.AsyncClient() as client:
        tool = prometheus_tool(prom.base_url + "/prometheus", client)
        with pytest.raises(ToolFailed, match=r"HTTP 404 Not Found \(is CHATOPS_PROMETHEUS_URL"):
            await tool.handler({"query": "up"}, Ctx())


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({"query": "up", "end": "now"}, "give `start` too"),
        ({"query": "up", "time": "yesterday"}, "`time` 'yesterday' is not a time"),
        ({"query": "up", "time": "2023-11-14T22:13:20"}, "RFC 3339 with an offset"),
        ({"query": "up", "time": 1.7e12}, "not a plausible unix time"),
        ({"query": "up", "start": "-1h", "end": "-2h"}, "must be before `end`"),
        ({"query": "up", "start": "-1d", "step": "1s"}, "use a step of at least 87 s"),
        ({"query": "up", "start": "-1h", "step": "0s"}, "not a positive duration"),
        ({"query": "up", "start": "-1h", "time": "now"}, "`time` is for an instant query"),
        ({"query": " "}, "non-empty PromQL"),
    ],
)
async def test_bad_arguments_are_refused_before_anything_is_sent(
    prom: FakePrometheus, args: dict[str, Any], why: str
) -> None:
    with pytest.raises(ToolFailed, match=why):
        await run(prom, **args)
    assert prom.seen == []


def test_the_base_url_must_be_http() -> None:
    with pytest.raises(ConfigError):
        prometheus_tool("prometheus:9090", httpx.AsyncClient())


async def test_prometheus_is_sent_four_fifths_of_the_tools_timeout(prom: FakePrometheus) -> None:
    """Its own `timeout`, under ours: its answer that it gave up arrives before we give up."""
    async with httpx.AsyncClient() as client:
        tool = prometheus_tool(prom.base_url, client, clock=lambda: NOW, timeout_s=2.0)
        await tool.handler({"query": "up", "start": "-5m"}, Ctx())
    assert tool.timeout_s == 2.0
    [seen] = prom.seen
    assert (seen.path, seen.params["timeout"]) == ("/api/v1/query_range", "1600ms")


@pytest.mark.parametrize("timeout_s", [0.0, -1.0, float("inf"), float("nan")])
def test_the_timeout_must_be_a_positive_number_of_seconds(timeout_s: float) -> None:
    with pytest.raises(ConfigError, match="positive number of seconds"):
        prometheus_tool("http://prometheus:9090", httpx.AsyncClient(), timeout_s=timeout_s)


def test_settings_read_the_prometheus_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATOPS_PROMETHEUS_URL", raising=False)
    assert Settings(_env_file=None).prometheus_url is None  # unset: no Prometheus tool
    monkeypatch.setenv("CHATOPS_PROMETHEUS_URL", "http://prometheus:9090")
    assert Settings(_env_file=None).prometheus_url == "http://prometheus:9090"


async def test_through_the_runtime_a_503_is_retried_until_prometheus_answers(
    make_runtime, fake_llm, http, prom: FakePrometheus
) -> None:
    """Retries belong to the batch: two 503s, then the model reads the third attempt's answer."""
    prom.unavailable(2)
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("prometheus_query", {"query": "up", "time": DOWN_AT + 60}),
                fp.ToolCall("prometheus_query", {"query": "up", "range": "1h"}),
            ]
        ),
        fp.TextReply("api-2 is down."),
    )
    runtime = make_runtime(prometheus_tool(prom.base_url, http))
    inputs = (UserMessage(content="Is the API up?", author="alice"),)
    outcome = await runtime.run(TurnRequest(session_id="prom", turn_id="t1", inputs=inputs))
    assert outcome.reason == "completed"
    answered, rejected = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert 'up{instance="api-2:8080", job="api"} 0' in answered["content"]
    assert "range" in rejected["content"] and "Additional properties" in rejected["content"]
    assert len(prom.seen) == 3  # the schema refusal sent nothing
