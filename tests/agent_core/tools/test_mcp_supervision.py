"""MCP servers are supervised: a crashed or restarted server comes back, the model's toolset stays.

Why this way: the promises are about real peers going away, so the servers are real ones built
with the `mcp` package (`tests/fakes/mcp_server.py`), killed by pid (stdio) or stopped and
started again on the same port (streamable HTTP, as a handshake-era server, so the new process
knows no session and answers 404 for the old one). "Mid-analysis" is a scripted model whose
responder (on the fake provider's own thread) kills or restarts the server between two batches
of one analysis. Log records are counted, never timed; a server that could not restart coming
back, and a reconnect attempt being under way, are waited for on a log handler's event, and a
close that was cancelled on its owner task: nothing polls the clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest

from agent_core import Completed, ToolFailed, ToolMessage, ToolStatus, TurnRequest, UserMessage
from agent_core.tools._mcp import HttpServerConfig, StdioServerConfig, open_mcp_tools
from agent_core.tools._mcp.connector import BACKOFF_BASE_S, BACKOFF_MAX_S, backoff_delay_s
from agent_core.tools._mcp.stderr import BURST_LINES, LINES_PER_S, MAX_LINE_CHARS, StderrLines
from tests.fakes import openai_provider as fp
from tests.paths import TESTS

FAKE_SERVER = TESTS / "fakes" / "mcp_server.py"
SESSION = "incident-mcp-supervision"
CONNECTOR = "agent_core.tools._mcp.connector"
STDERR = "agent_core.tools._mcp.stderr"


class Ctx:
    session_id = SESSION
    turn_id = "t1"
    call_id = ""

    def raise_dispatch(self) -> None:
        raise AssertionError

    def raise_await(self) -> None:
        raise AssertionError


def stdio(name: str = "k8s", **env: str) -> StdioServerConfig:
    return StdioServerConfig(
        name=name,
        transport="stdio",
        command=sys.executable,
        args=(str(FAKE_SERVER), "stdio"),
        env=env,
        risk="read_only",
        tools=("pod_logs", "server_pid"),
    )


def records(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and text in r.getMessage()]


def pid_in(content: str) -> int:
    found = re.search(r"^(\d+)$", content, re.M)
    assert found, content
    return int(found.group(1))


def last_tool_results(messages: list[dict[str, Any]]) -> list[str]:
    results: list[str] = []
    for message in reversed(messages):
        if message["role"] != "tool":
            break
        results.insert(0, message["content"])
    return results


class HttpServer:
    """The fake server over streamable HTTP on a fixed port, stopped and started at will."""

    def __init__(self) -> None:
        probe = socket.create_server(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR on POSIX
        self.proc = subprocess.Popen(
            [sys.executable, str(FAKE_SERVER), "http-legacy", str(listener.fileno())],
            pass_fds=[listener.fileno()],
            env={"PATH": ""},
        )
        listener.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer()
    server.start()
    yield server
    server.stop()


class Heard(logging.Handler):
    """Sets an event when a record containing `text` is logged."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


# --- backoff and stderr, unit level ---------------------------------------------------------


def test_the_reconnect_backoff_is_bounded_exponential_and_jittered() -> None:
    lows = [backoff_delay_s(n, draw=lambda: 0.0) for n in range(1, 12)]
    highs = [backoff_delay_s(n, draw=lambda: 0.999999) for n in range(1, 12)]
    assert lows[0] == BACKOFF_BASE_S / 2 and highs[0] < BACKOFF_BASE_S
    assert all(b >= a for a, b in zip(lows, lows[1:], strict=False)), "never shrinks"
    assert lows[1] == 2 * lows[0], "doubles"
    assert max(highs) < BACKOFF_MAX_S and lows[-1] == BACKOFF_MAX_S / 2, "bounded"
    assert backoff_delay_s(10_000, draw=lambda: 0.5) <= BACKOFF_MAX_S, "no overflow"


def test_stderr_lines_are_bounded_in_length_and_rate(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, STDERR)
    now = [0.0]
    lines = StderrLines("k8s", clock=lambda: now[0])
    lines.feed(b"".join(b"line %d\n" % n for n in range(3 * BURST_LINES)))
    logged = records(caplog, STDERR, "stderr:")
    assert len(logged) == BURST_LINES
    assert logged[0] == "MCP server 'k8s' stderr: line 0"

    now[0] += 1.0  # LINES_PER_S tokens come back
    chunk = b"y" * 65_536
    for _ in range(16):  # one 1 MiB line, in chunks
        lines.feed(chunk)
    lines.feed(b"\npartial")
    lines.finish()
    logged = records(caplog, STDERR, "stderr:")
    assert len(logged) == BURST_LINES + 2
    cut, partial = logged[-2:]
    assert f"[{2 * BURST_LINES} lines dropped by the rate limit]" in cut and cut.endswith(" […]")
    assert len(cut) < MAX_LINE_CHARS + 100
    assert partial == "MCP server 'k8s' stderr: partial"
    assert LINES_PER_S >= 2


def test_lines_past_an_empty_bucket_are_counted_not_handled_one_by_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, STDERR)
    ticks = [0]

    def clock() -> float:
        ticks[0] += 1
        return 0.0  # no token ever comes back

    lines = StderrLines("k8s", clock=clock)
    flood = b"y\n" * 1_000_000  # 2 MB, as a server in a loop writes it
    for start in range(0, len(flood), 65_536):  # in the reader's chunks
        lines.feed(flood[start : start + 65_536])
    assert ticks[0] < 1_000, "the limiter is not asked per dropped line"
    lines.finish()
    logged = records(caplog, STDERR, "stderr:")
    assert len(logged) == BURST_LINES + 1
    assert logged[-1].endswith(
        f"[{1_000_000 - BURST_LINES} more lines of stderr dropped by the rate limit]"
    )


async def test_a_stdio_servers_stderr_goes_through_the_logger_not_the_process_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.INFO)
    flood = stdio(MCP_FAKE_STDERR_LINES="5000", MCP_FAKE_STDERR_LINE_CHARS="3000")
    async with AsyncExitStack() as stack:
        [logs, _] = await open_mcp_tools([flood], stack)
        assert "OOMKilled" in await logs.handler({"pod": "api-0"}, Ctx())  # never blocked
    logged = records(caplog, STDERR, "MCP server 'k8s' stderr: ")
    assert logged[0].startswith("MCP server 'k8s' stderr: stderr line 000000 xxx")
    assert logged[0].endswith(" […]") and all(len(m) < MAX_LINE_CHARS + 100 for m in logged)
    *shown, summary = logged
    assert "more lines of stderr dropped by the rate limit" in summary
    dropped = [
        int(n)
        for n in re.findall(r"\[(\d+) (?:more )?lines (?:of stderr )?dropped", "\n".join(logged))
    ]
    assert len(shown) >= BURST_LINES and sum(dropped) > 0, "the rate limit held"
    assert len(shown) + sum(dropped) == 5000, "every line logged or counted as dropped"
    assert "stderr line" not in capfd.readouterr().err


# --- unavailable, and logged once per change -----------------------------------------------


async def test_a_server_that_cannot_restart_answers_unavailable_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, make_runtime, fake_llm: fp.FakeProvider
) -> None:
    caplog.set_level(logging.INFO, CONNECTOR)
    refuse = tmp_path / "refuse"
    config = stdio(MCP_FAKE_REFUSE_FILE=str(refuse))
    async with AsyncExitStack() as stack:
        tools = {t.name: t for t in await open_mcp_tools([config], stack, recovery_wait_s=0)}
        assert records(caplog, CONNECTOR, "offers 2 tools") == [
            "MCP server 'k8s' offers 2 tools: k8s__pod_logs, k8s__server_pid"
        ]
        refuse.touch()  # every restart now exits at once
        os.kill(pid_in(await tools["k8s__server_pid"].handler({}, Ctx())), signal.SIGKILL)

        for _ in range(3):
            with pytest.raises(ToolFailed, match="MCP server 'k8s' unavailable, retrying") as exc:
                await tools["k8s__pod_logs"].handler({"pod": "api-0"}, Ctx())
            assert exc.value.retryable
        fake_llm.script(
            fp.ToolCallsReply([fp.ToolCall("k8s__pod_logs", {"pod": "api-0"})]),
            fp.TextReply("The k8s server is down."),
        )
        runtime = make_runtime(*tools.values())
        outcome = await runtime.run(
            TurnRequest(session_id=SESSION, turn_id="t1", inputs=(UserMessage(content="why?"),))
        )
        assert isinstance(outcome.result, Completed)
        [answer] = [m for m in await runtime.store.load(SESSION) if isinstance(m, ToolMessage)]
        assert answer.status is ToolStatus.ERROR
        assert "MCP server 'k8s' unavailable, retrying" in answer.content
        offered = {t["function"]["name"] for t in fake_llm.requests[0].body["tools"]}
        assert {"k8s__pod_logs", "k8s__server_pid"} <= offered, "still offered while down"

        back = Heard("is available again")
        logging.getLogger(CONNECTOR).addHandler(back)
        try:
            refuse.unlink()  # the next attempt of the backoff starts it
            await back.event.wait()
        finally:
            logging.getLogger(CONNECTOR).removeHandler(back)
        assert "OOMKilled" in await tools["k8s__pod_logs"].handler({"pod": "api-0"}, Ctx())
        await tools["k8s__pod_logs"].handler({"pod": "api-1"}, Ctx())
    assert len(records(caplog, CONNECTOR, "MCP server 'k8s' unavailable (")) == 1
    assert len(records(caplog, CONNECTOR, "MCP server 'k8s' is available again")) == 1


async def test_a_call_while_the_server_stays_down_waits_at_most_half_its_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, CONNECTOR)
    refuse = tmp_path / "refuse"
    config = stdio(MCP_FAKE_REFUSE_FILE=str(refuse)).model_copy(update={"timeout_s": 0.5})
    async with AsyncExitStack() as stack:
        # The recovery wait alone would be ten minutes: only half the tool's timeout bounds it.
        tools = {t.name: t for t in await open_mcp_tools([config], stack, recovery_wait_s=600)}
        refuse.touch()
        os.kill(pid_in(await tools["k8s__server_pid"].handler({}, Ctx())), signal.SIGKILL)
        with pytest.raises(ToolFailed, match="MCP server 'k8s' unavailable, retrying"):
            await tools["k8s__pod_logs"].handler({"pod": "api-0"}, Ctx())
        assert not records(caplog, CONNECTOR, "available again"), "answered while still down"


async def test_closing_is_idempotent_and_a_call_after_it_answers_unavailable() -> None:
    stack = AsyncExitStack()
    tools = {t.name: t for t in await open_mcp_tools([stdio()], stack)}
    pid = pid_in(await tools["k8s__server_pid"].handler({}, Ctx()))
    await stack.aclose()
    await stack.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ToolFailed, match="unavailable, retrying"):
        await tools["k8s__pod_logs"].handler({"pod": "api-0"}, Ctx())


async def test_closing_interrupts_a_reconnect_attempt_that_hangs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    hang = tmp_path / "hang"
    hanging = Heard("hanging before initialize")
    logging.getLogger(STDERR).addHandler(hanging)
    try:
        stack = AsyncExitStack()
        configs = [stdio(name, MCP_FAKE_HANG_FILE=str(hang)) for name in ("k8s", "k8s_b")]
        tools = {t.name: t for t in await open_mcp_tools(configs, stack, connect_timeout_s=600)}
        hang.touch()  # every restart now accepts the connection and never shakes hands
        os.kill(pid_in(await tools["k8s__server_pid"].handler({}, Ctx())), signal.SIGKILL)
        await hanging.event.wait()  # the reconnect attempt is in progress
        await stack.aclose()
    finally:
        logging.getLogger(STDERR).removeHandler(hanging)
    assert not records(caplog, CONNECTOR, "did not close in time"), "the attempt was cancelled"
    assert not records(caplog, CONNECTOR, "available again")


async def test_a_close_cancelled_midway_leaves_no_server_behind() -> None:
    stack = AsyncExitStack()
    tools = {t.name: t for t in await open_mcp_tools([stdio()], stack)}
    pid = pid_in(await tools["k8s__server_pid"].handler({}, Ctx()))
    closing = asyncio.create_task(stack.aclose())
    await asyncio.sleep(0)
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
    [owner] = [t for t in asyncio.all_tasks() if t.get_name() == "mcp:k8s"]
    await asyncio.wait({owner})  # the owner goes on closing by itself
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --- process tests: killed and restarted mid-analysis ----------------------------------------


@pytest.mark.slow
async def test_a_killed_stdio_server_comes_back_mid_analysis_and_the_next_call_succeeds(
    caplog: pytest.LogCaptureFixture, make_runtime, fake_llm: fp.FakeProvider
) -> None:
    caplog.set_level(logging.INFO, CONNECTOR)
    killed: list[int] = []

    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        results = last_tool_results(messages)
        if not results:
            return fp.ToolCallsReply([fp.ToolCall("k8s__server_pid", {})])
        if not killed:
            killed.append(pid_in(results[0]))
            os.kill(killed[0], signal.SIGKILL)
            return fp.ToolCallsReply(
                [fp.ToolCall("k8s__server_pid", {}), fp.ToolCall("k8s__pod_logs", {"pod": "a"})]
            )
        return fp.TextReply("api-0 is OOMKilled.")

    fake_llm.respond_with(reply)
    async with AsyncExitStack() as stack:
        runtime = make_runtime(*await open_mcp_tools([stdio()], stack))
        outcome = await runtime.run(
            TurnRequest(session_id=SESSION, turn_id="t1", inputs=(UserMessage(content="why?"),))
        )
    assert isinstance(outcome.result, Completed)
    first, second, logs = [
        m for m in await runtime.store.load(SESSION) if isinstance(m, ToolMessage)
    ]
    assert [first.status, second.status, logs.status] == [ToolStatus.OK] * 3
    assert pid_in(first.content) == killed[0] != pid_in(second.content), "a new process"
    assert logs.content.startswith("a: OOMKilled")
    assert len(records(caplog, CONNECTOR, "MCP server 'k8s' unavailable (")) == 1
    assert len(records(caplog, CONNECTOR, "MCP server 'k8s' is available again")) == 1


@pytest.mark.slow
async def test_a_restarted_http_server_is_initialised_again_mid_analysis(
    http_server: HttpServer,
    caplog: pytest.LogCaptureFixture,
    make_runtime,
    fake_llm: fp.FakeProvider,
) -> None:
    caplog.set_level(logging.INFO, CONNECTOR)
    restarted: list[int] = []

    def reply(messages: list[dict[str, Any]]) -> fp.Reply:
        results = last_tool_results(messages)
        if not results:
            return fp.ToolCallsReply([fp.ToolCall("web__server_pid", {})])
        if not restarted:
            restarted.append(pid_in(results[0]))
            http_server.stop()  # a new process: a new, empty session store
            http_server.start()
            return fp.ToolCallsReply([fp.ToolCall("web__server_pid", {})])
        return fp.TextReply("The web server restarted.")

    fake_llm.respond_with(reply)
    config = HttpServerConfig(
        name="web", transport="http", url=http_server.url, risk="read_only", tools=("*",)
    )
    async with AsyncExitStack() as stack:
        runtime = make_runtime(*await open_mcp_tools([config], stack))
        outcome = await runtime.run(
            TurnRequest(session_id=SESSION, turn_id="t1", inputs=(UserMessage(content="why?"),))
        )
    assert isinstance(outcome.result, Completed)
    before, after = [m for m in await runtime.store.load(SESSION) if isinstance(m, ToolMessage)]
    assert after.status is ToolStatus.OK, after.content
    assert pid_in(before.content) == restarted[0] != pid_in(after.content)
    down = records(caplog, CONNECTOR, "MCP server 'web' unavailable (")
    assert len(down) == 1 and "no longer knows its session" in down[0]
    assert len(records(caplog, CONNECTOR, "MCP server 'web' is available again")) == 1
