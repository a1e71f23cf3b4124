"""`prometheus_query` against a real Prometheus (Debian's `prometheus`, `make prometheus`).

Why this way: the fake in `tests/fakes/prometheus_api.py` speaks the API as documented; this
checks the tool against the server itself, for what only the server decides: how it words a
parse error, that it honours the `timeout` the tool sends (its own `--query.timeout` is left
at 2 minutes, so a timeout can only come from the tool's parameter), and how large an answer it
writes. One Prometheus runs for the module on 127.0.0.1 on a free port, over a temporary
storage directory, scraping itself every second so that there is data; the fixture waits until
it is ready and has scraped three times. Attempts are counted at the server, from its own
`prometheus_http_requests_total` by handler and code, read from its `/metrics`; the retries are
the batch's, so those cases run through `run_batch` with the tool `guarded` as the worker wraps
it. Prometheus' version is printed (not captured), so a run's output says what it ran against.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis.asyncio as aioredis

from agent_core import ToolFailed
from agent_core._batch import run_batch
from agent_core._diagnostics import RunDiagnostics
from agent_core._interrupts import TurnSignals
from agent_core._messages import ToolCall, ToolStatus
from agent_core.tools._base import Toolset
from agent_core.tools._bounded_body import DEFAULT_MAX_BYTES
from agent_core.tools._hygiene import guarded
from agent_core.tools._prometheus import prometheus_tool
from tests.loopback import free_port, stop_process
from tests.tool_context import Ctx

pytestmark = pytest.mark.slow

HEAVY = "count(sum_over_time(vector(time())[4h:1ms]))"
"""14.4 M steps of `vector(time())` (uncapped, 2 h of it took 4.5 s here). Not step-invariant, so
Prometheus evaluates each step and checks its deadline at each: it stops within milliseconds of
the timeout. (`vector(1)` would be evaluated once and copied, and a function over a subquery's
windows, such as `holt_winters`, runs without a check: both overran a 300 ms timeout by seconds.)"""
HUGE = '{__name__=~".+"}'
"""Every series Prometheus keeps about itself (about 450); over 1 s at 1 ms steps, about 11 MB."""


@dataclass(frozen=True)
class RealPrometheus:
    base_url: str
    version: str


def _say(request: pytest.FixtureRequest, text: str) -> None:
    """Print `text` past pytest's capture, so it is in the run's output."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print(f"\n{text}")


def _config(port: int) -> str:
    return (
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: self\n    static_configs:\n"
        f'      - targets: ["127.0.0.1:{port}"]\n'
    )


def _wait_until(proc: subprocess.Popen[bytes], log: Path, check: str, url: str) -> None:
    """Poll `url` until its answer holds `check` (at most 30 s); fail naming the log if not."""
    for _ in range(600):
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            if check in httpx.get(url, timeout=1.0).text:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"prometheus never answered {check!r} at {url}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[RealPrometheus]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail(
            "prometheus is not installed: `make test` installs it (`make prometheus`:"
            " apt-get install prometheus)"
        )
    workdir = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    (workdir / "prometheus.yml").write_text(_config(port))
    log = workdir / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_until(proc, log, "Ready", f"{base}/-/ready")
        # Three scrapes: a second of data behind now, for the range and the huge answer.
        _wait_until(proc, log, '"3"', f"{base}/api/v1/query?query=count_over_time(up[1m])")
        info = httpx.get(f"{base}/api/v1/status/buildinfo").json()["data"]
        version = f"{info['version']} (revision {info['revision']}, {info['goVersion']})"
        _say(request, f"real Prometheus {version} at {base}")
        yield RealPrometheus(base, version)
    finally:
        stop_process(proc)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


def _requests(prom: RealPrometheus, handler: str, code: int) -> float:
    """Prometheus' own count of the requests it answered on `handler` with `code`."""
    text = httpx.get(f"{prom.base_url}/metrics").text
    line = re.search(
        rf'^prometheus_http_requests_total{{code="{code}",handler="{re.escape(handler)}"}} (\S+)$',
        text,
        re.MULTILINE,
    )
    return float(line.group(1)) if line else 0.0


def _gauge(prom: RealPrometheus, name: str) -> float:
    text = httpx.get(f"{prom.base_url}/metrics").text
    line = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert line is not None, f"{name} not in Prometheus' /metrics"
    return float(line.group(1))


async def _batch(
    redis_client: aioredis.Redis, http: httpx.AsyncClient, prom: RealPrometheus, args: str, **kw
) -> str:
    """One call through the batch, the tool guarded as the worker wraps it; its ERROR text."""
    toolset = guarded(Toolset.of([prometheus_tool(prom.base_url, http, **kw)]))
    call = ToolCall(id="c1", name="prometheus_query", arguments=args)
    signals = TurnSignals(redis_client, "s-real-prom", "t1")

    async def sink(message: object) -> None:
        pass

    diag = RunDiagnostics(session_id="s-real-prom", turn_id="t1")
    (result,) = await run_batch([call], toolset, Ctx(), signals, diag, sink)
    assert result.status is ToolStatus.ERROR
    assert [e.kind for e in diag.trace if e.kind == "tool_retry"] == []
    return result.content


async def test_an_instant_query(prometheus: RealPrometheus, http: httpx.AsyncClient) -> None:
    tool = prometheus_tool(prometheus.base_url, http)
    text = await tool.handler({"query": "up"}, Ctx())
    port = prometheus.base_url.rsplit(":", 1)[1]
    assert text.startswith("instant query up\ninstant vector at ")
    assert text.endswith(f', 1 series:\nup{{instance="127.0.0.1:{port}", job="self"}} 1')


async def test_a_range_query(prometheus: RealPrometheus, http: httpx.AsyncClient) -> None:
    tool = prometheus_tool(prometheus.base_url, http)
    text = await tool.handler({"query": "up", "start": "-2s", "step": "1s"}, Ctx())
    lines = text.splitlines()
    assert lines[0].startswith("range query up from ") and lines[0].endswith(", step 1 s")
    assert lines[1] == "range vector, 1 series:"
    assert re.fullmatch(
        r'up\{instance="127\.0\.0\.1:\d+", job="self"\}: 3 points, min 1, max 1, '
        r"last 1",
        lines[2],
    )
    assert re.fullmatch(r"  \S+ to \S+ 1 \(3 points\)", lines[3]) and len(lines) == 4


async def test_a_parse_error_is_a_clear_error_asked_once(
    prometheus: RealPrometheus, http: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    before = _requests(prometheus, "/api/v1/query", 400)
    content = await _batch(redis_client, http, prometheus, '{"query": "sum(rate(up[5m])"}')
    assert _requests(prometheus, "/api/v1/query", 400) - before == 1
    assert content.startswith("error: prometheus_query failed.\n")
    assert (
        'Prometheus refused the query (HTTP 400) bad_data: invalid parameter "query":'
        " 1:17: parse error: unclosed left parenthesis"
    ) in content


async def test_the_query_timeout_sent_stops_the_evaluation_and_is_not_retried(
    prometheus: RealPrometheus, http: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    """The shipped 5 s tool sends `timeout=4000ms`: Prometheus gives up on HEAVY and says so, once.

    The shipped timeout, not a shorter one: its second of margin is what lets the 503 arrive
    before our own deadline on a loaded machine (300 ms of a 1.5 s tool once did not).
    """
    before = _requests(prometheus, "/api/v1/query", 503)
    args = json.dumps({"query": HEAVY})
    content = await _batch(redis_client, http, prometheus, args)
    assert _requests(prometheus, "/api/v1/query", 503) - before == 1
    assert (
        "Prometheus stopped the query at its 4000ms timeout (HTTP 503) timeout: query timed out"
        " in expression evaluation; it is too heavy"
    ) in content
    assert _gauge(prometheus, "prometheus_engine_queries") == 0  # nothing left evaluating


async def test_a_huge_answer_is_read_to_the_cap_and_refused(
    prometheus: RealPrometheus, http: httpx.AsyncClient, request: pytest.FixtureRequest
) -> None:
    """About 11 MB of JSON (gzip on the wire): reading stops at the 1 MiB cap, a clear error."""
    args = {"query": HUGE, "start": "-1s", "step": "1ms"}
    seen: list[httpx.Response] = []

    async def keep(response: httpx.Response) -> None:
        seen.append(response)

    async with httpx.AsyncClient(event_hooks={"response": [keep]}) as counted:
        tool = prometheus_tool(prometheus.base_url, counted)
        with pytest.raises(ToolFailed) as info:
            await tool.handler(args, Ctx())
    assert str(info.value).startswith(
        f"Prometheus answered more than the {DEFAULT_MAX_BYTES} bytes a tool reads"
        " (CHATOPS_TOOL_MAX_BYTES); reading stopped there: aggregate"
    )
    assert not info.value.retryable
    (response,) = seen
    read_on_wire = response.num_bytes_downloaded

    # The same answer read whole, for comparison: how much the cap spared.
    form = {"query": HUGE, "start": f"{time.time() - 1:.3f}", "end": f"{time.time():.3f}"}
    whole = await http.post(
        f"{prometheus.base_url}/api/v1/query_range", data=form | {"step": "0.001"}
    )
    assert whole.status_code == 200 and whole.headers.get("content-encoding") == "gzip"
    assert len(whole.content) > 4 * DEFAULT_MAX_BYTES
    assert read_on_wire < whole.num_bytes_downloaded / 2
    _say(
        request,
        f"huge answer: {len(whole.content)} bytes of JSON ({whole.num_bytes_downloaded} gzip"
        f" on the wire); the tool read {read_on_wire} bytes on the wire, decoded to the"
        f" {DEFAULT_MAX_BYTES}-byte cap",
    )
