"""Tools from MCP servers (issue 7): configuration, listing, calls, stops, broken servers.

Why this way: the promises under test are about a real protocol peer, so the server is a real
one built with the `mcp` package (`tests/fakes/mcp_server.py`), reached both as a stdio
subprocess and over streamable HTTP from a subprocess, through the real `mcp` client. Calls run
through the real runtime (fake OpenAI provider, real Redis), so schema checks, stops and error
results are the batch's own. The server journals every `tools/call` it receives before it
validates anything, which tells a call the client refused from one the server refused. Tests wait
on events (the slow service's hits and outcomes, the run's end), never on the clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx2
import mcp_types
import pytest
import redis.asyncio as aioredis

from agent_core import (
    Completed,
    ConfigError,
    ControlPlane,
    Interruptibility,
    Risk,
    Stopped,
    ToolFailed,
    ToolMessage,
    ToolStatus,
    TurnRequest,
    UserMessage,
    validate_history,
)
from agent_core._outcome import Awaiting
from agent_core.tools._mcp import (
    HttpServerConfig,
    McpServerConfig,
    StdioServerConfig,
    open_mcp_tools,
    parse_mcp_servers,
    render_result,
    tool_name,
)
from agent_core.tools._mcp.connector import _Connection
from agent_core.tools._mcp.content import MAX_RESULT_CHARS
from bot.errors import BotConfigError
from bot.settings import Settings
from bot.worker.assembly import open_worker
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.inprocess_bot import open_bot
from tests.loopback import free_port
from tests.paths import TESTS

FAKE_SERVER = TESTS / "fakes" / "mcp_server.py"
SESSION = "incident-mcp"
LOGGER = "agent_core.tools._mcp.connector"

ServerFactory = Callable[..., McpServerConfig]


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.txt"
    path.touch()
    return path


def journal_lines(journal: Path) -> list[str]:
    return journal.read_text().splitlines()


def stdio_server(journal: Path) -> ServerFactory:
    def build(name: str, **fields: Any) -> McpServerConfig:
        return StdioServerConfig(
            name=name,
            transport="stdio",
            command=sys.executable,
            args=(str(FAKE_SERVER), "stdio"),
            env={"MCP_FAKE_JOURNAL": str(journal)},
            **fields,
        )

    return build


@pytest.fixture
async def http_url(journal: Path) -> AsyncIterator[str]:
    """The fake server over streamable HTTP, on a socket bound here and handed down."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(FAKE_SERVER),
        "http",
        str(listener.fileno()),
        pass_fds=[listener.fileno()],
        env={"PATH": "", "MCP_FAKE_JOURNAL": str(journal)},
    )
    listener.close()  # the server holds its own copy; connections queue until it accepts
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    await proc.wait()


@pytest.fixture(params=["stdio", "http"])
def server(request: pytest.FixtureRequest, journal: Path) -> ServerFactory:
    """Builds a config for the fake server over each transport in turn."""
    if request.param == "stdio":
        return stdio_server(journal)
    url: str = request.getfixturevalue("http_url")

    def build(name: str, **fields: Any) -> McpServerConfig:
        return HttpServerConfig(name=name, transport="http", url=url, **fields)

    return build


class Ctx:
    session_id = SESSION
    turn_id = "t1"
    call_id = ""

    def raise_dispatch(self) -> None:
        raise AssertionError

    def raise_await(self) -> None:
        raise AssertionError


def task(text: str = "Why is api-0 crashing?") -> tuple[UserMessage, ...]:
    return (UserMessage(content=text, author="alice"),)


def tool_results(fake: fp.FakeProvider, request: int) -> list[str]:
    return [m["content"] for m in fake.requests[request].messages if m["role"] == "tool"]


# --- configuration ------------------------------------------------------------------------


def test_the_documented_example_parses_with_safe_defaults() -> None:
    servers = parse_mcp_servers(
        json.dumps(
            [
                {
                    "name": "k8s",
                    "transport": "stdio",
                    "command": "kubectl-mcp",
                    "args": ["--read-only"],
                    "env": {"KUBECONFIG": "/etc/chatops/kubeconfig"},
                    "risk": "read_only",
                    "tools": ["pod_logs"],
                    "timeout_s": 20,
                },
                {"name": "grafana", "transport": "http", "url": "http://grafana-mcp:8000/mcp"},
            ]
        )
    )
    k8s, grafana = servers
    assert isinstance(k8s, StdioServerConfig) and k8s.risk is Risk.READ_ONLY
    assert k8s.args == ("--read-only",) and k8s.timeout_s == 20
    assert isinstance(grafana, HttpServerConfig)
    assert grafana.risk is Risk.SIDE_EFFECT, "an undeclared risk is never read-only"
    assert grafana.tools == () and not grafana.allows("anything"), "no allowlist offers nothing"
    assert parse_mcp_servers("  ") == ()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[{", "not valid JSON"),
        ('{"name": "k8s"}', "list"),
        ('[{"name": "k8s", "transport": "sse", "url": "http://x/mcp"}]', "transport"),
        ('[{"name": "k8s", "transport": "stdio"}]', "command"),
        ('[{"name": "k8s", "transport": "stdio", "command": "x", "url": "http://x"}]', "url"),
        ('[{"name": "k8s", "transport": "http", "url": "ftp://x/mcp"}]', "url"),
        ('[{"name": "k 8s", "transport": "http", "url": "http://x/mcp"}]', "[0].http.name"),
        ('[{"name": "k", "transport": "http", "url": "http://x", "risk": "safe"}]', "risk"),
        ('[{"name": "k", "transport": "http", "url": "http://x", "timeout_s": 0}]', "timeout_s"),
        (
            '[{"name": "k", "transport": "http", "url": "http://a"},'
            ' {"name": "k", "transport": "http", "url": "http://b"}]',
            "two servers are named 'k'",
        ),
    ],
)
def test_invalid_configuration_is_a_config_error_naming_the_field(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_mcp_servers(text)
    assert why in str(raised.value)


def test_errors_never_echo_values() -> None:
    text = '[{"name": "k", "transport": "stdio", "command": "x", "env": {"TOKEN": 42}}]'
    with pytest.raises(ConfigError) as raised:
        parse_mcp_servers(text.replace("42", '{"secret": "hunter2"}'))
    assert "env" in str(raised.value) and "hunter2" not in str(raised.value)


def test_tool_names_follow_the_openai_rule() -> None:
    assert tool_name("k8s", "pod_logs") == "k8s__pod_logs"
    assert tool_name("k8s", "get.pods/v2 now") == "k8s__get_pods_v2_now"
    long_a, long_b = tool_name("k8s", "x" * 80), tool_name("k8s", "x" * 81)
    assert len(long_a) == len(long_b) == 64 and long_a != long_b


def test_results_show_text_and_name_the_rest() -> None:
    result = mcp_types.CallToolResult(
        content=[
            mcp_types.TextContent(text="disk 91% full"),
            mcp_types.AudioContent(data="AAAA", mime_type="audio/wav"),
            mcp_types.ResourceLink(name="runbook", uri="https://wiki/runbooks/disk"),
            mcp_types.EmbeddedResource(
                resource=mcp_types.TextResourceContents(uri="file:///df.txt", text="/dev/sda1 91%")
            ),
            mcp_types.EmbeddedResource(
                resource=mcp_types.BlobResourceContents(uri="file:///core.bin", blob="AAAA")
            ),
        ]
    )
    assert render_result(result).splitlines() == [
        "disk 91% full",
        "[audio omitted: audio/wav]",
        "[resource link: https://wiki/runbooks/disk]",
        "/dev/sda1 91%",
        "[binary resource omitted: file:///core.bin]",
    ]
    structured = mcp_types.CallToolResult(content=[], structured_content={"free_gb": 3})
    assert render_result(structured) == '{"free_gb": 3}'


def test_a_secret_across_the_length_limit_is_redacted_before_the_cut() -> None:
    token = "xoxb-" + "1234567890-" * 3 + "abcdefghijklmnopqrstuvwx"
    text = "." * (MAX_RESULT_CHARS - 11) + " " + token
    shown = render_result(mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)]))
    assert "xoxb-" not in shown and "[REDACTED" in shown


# --- listing ------------------------------------------------------------------------------


async def test_allowlisted_tools_are_listed_with_schema_and_risk(
    server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    async with AsyncExitStack() as stack:
        tools = await open_mcp_tools(
            [
                server("k8s", risk="read_only", tools=("pod_logs", "dashboard", "kubectl_exec")),
                server("k8s_admin", tools=("restart_pod",), timeout_s=5),
                server("k8s_none"),
                server("k8s_all", risk="destructive", tools=("*",)),
            ],
            stack,
        )
    by_name = {tool.name: tool for tool in tools}
    assert sorted(by_name) == sorted(
        ["k8s__pod_logs", "k8s__dashboard", "k8s_admin__restart_pod"]
        + [f"k8s_all__{t}" for t in ("pod_logs", "dashboard", "restart_pod")]
        + [f"k8s_all__{t}" for t in ("db_query", "fetch_upstream", "drain_node", "server_pid")]
        + ["k8s_all__flood"]
    )
    logs = by_name["k8s__pod_logs"]
    assert logs.parameters["properties"]["pod"]["type"] == "string"
    assert logs.parameters["required"] == ["pod"]
    assert "last log lines" in logs.description and "'k8s'" in logs.description
    assert logs.risk is Risk.READ_ONLY and logs.idempotent and logs.interruptible
    restart = by_name["k8s_admin__restart_pod"]
    assert restart.risk is Risk.SIDE_EFFECT and restart.idempotent is False
    assert restart.interruptibility is Interruptibility.MUST_COMPLETE and restart.timeout_s == 5
    assert by_name["k8s_all__drain_node"].risk is Risk.DESTRUCTIVE
    assert "'k8s' does not offer allowlisted kubectl_exec" in caplog.text


# --- calls through the runtime ------------------------------------------------------------


async def test_results_errors_and_other_content_reach_the_model(
    server: ServerFactory, make_runtime, fake_llm: fp.FakeProvider
) -> None:
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("k8s__pod_logs", {"pod": "api-0"}),
                fp.ToolCall("k8s__dashboard", {"name": "api"}),
                fp.ToolCall("k8s__drain_node", {"node": "node-7"}),
            ]
        ),
        fp.TextReply("api-0 is OOMKilled."),
    )
    async with AsyncExitStack() as stack:
        tools = await open_mcp_tools([server("k8s", risk="read_only", tools=("*",))], stack)
        runtime = make_runtime(*tools)
        outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    logs, dashboard, drain = tool_results(fake_llm, 1)
    assert logs == "api-0: OOMKilled at 12:03 (limit 512Mi)\napi-0: restarted 4 times\n[step 1]"
    assert dashboard == "dashboard api: p99 latency 2.4 s\n[image omitted: image/png]\n[step 2]"
    assert drain.startswith("error:") and "node node-7 is cordoned" in drain
    history = await runtime.store.load(SESSION)
    statuses = [m.status for m in history if isinstance(m, ToolMessage)]
    assert statuses == [ToolStatus.OK, ToolStatus.OK, ToolStatus.ERROR]


async def test_a_tools_own_error_naming_a_session_is_its_answer_not_a_lost_session(
    server: ServerFactory, journal: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    async with AsyncExitStack() as stack:
        [restart] = await open_mcp_tools([server("k8s", tools=("restart_pod",))], stack)
        with pytest.raises(ToolFailed, match="tmux session not found") as exc:
            await restart.handler({"pod": "tmux"}, Ctx())
        assert not exc.value.retryable
        assert await restart.handler({"pod": "api-0"}, Ctx()) == "pod api-0 restarted"
    runs = [line for line in journal_lines(journal) if line.startswith("ran ")]
    assert runs == ["ran restart_pod tmux", "ran restart_pod api-0"], "run once, never re-sent"
    assert not [r for r in caplog.records if "unavailable" in r.getMessage()], "no reconnect"


@pytest.mark.parametrize("kind", ["text", "resource", "error"])
async def test_an_oversized_result_is_cut_at_the_byte_limit_with_a_notice(
    server: ServerFactory, kind: str
) -> None:
    """X4: a real server's 512 KiB result (text, embedded resource, error) read to 64 KiB only."""
    limit = 64 * 1024
    async with AsyncExitStack() as stack:
        tools = await open_mcp_tools(
            [server("k8s", risk="read_only", tools=("flood",))], stack, max_bytes=limit
        )
        [flood] = tools
        notice = f"[truncated: read the first {limit} bytes of a longer result]"
        if kind == "error":
            with pytest.raises(ToolFailed) as raised:
                await flood.handler({"kind": kind, "kib": 512}, Ctx())
            shown = str(raised.value)
        else:
            shown = await flood.handler({"kind": kind, "kib": 512}, Ctx())
    assert "line 0000000 payments-db timeout\nline 0000001" in shown[:100]
    assert shown.endswith(notice)
    assert shown.splitlines()[-2].startswith("… [truncated ")  # the model's character cut
    assert len(shown.encode()) <= MAX_RESULT_CHARS + 200


def test_structured_content_is_serialised_only_up_to_the_limit() -> None:
    """X4: a huge structured result is written out piece by piece and stopped at the limit."""
    rows = [{"pod": f"api-{n}", "restarts": n} for n in range(200_000)]  # about 6 MB as JSON
    result = mcp_types.CallToolResult(content=[], structured_content={"rows": rows})
    shown = render_result(result, max_bytes=4096)
    assert shown.startswith('{"rows": [{"pod": "api-0", "restarts": 0}')
    assert shown.endswith("[truncated: read the first 4096 bytes of a longer result]")
    assert len(shown) < 4096 + 100


def test_structured_content_nested_too_deeply_says_so_instead_of_failing() -> None:
    """X4: nesting past the encoder's recursion ends the text with a notice, not a traceback."""
    nested: dict[str, object] = {}
    level = nested
    for _ in range(5_000):
        level["a"] = {}
        level = level["a"]  # type: ignore[assignment]
    result = mcp_types.CallToolResult(content=[], structured_content=nested)
    shown = render_result(result)  # 1 MiB: the nesting, not the limit, ends the text
    assert shown.startswith('{"a": {"a": ')
    assert "[structured content nested too deeply to show]" in shown


def test_a_result_is_cut_on_a_character_boundary_and_counted_in_bytes() -> None:
    """X4: the limit counts UTF-8 bytes; a character is never split; under it, nothing changes."""
    text = "磁盘已满" * 100  # 3 bytes each: 1,200 bytes
    result = mcp_types.CallToolResult(content=[mcp_types.TextContent(text=text)])
    assert render_result(result, max_bytes=1200) == text
    cut = render_result(result, max_bytes=1000)
    first, notice = cut.split("\n")
    assert first == text[:333] and len(first.encode()) == 999
    assert notice == "[truncated: read the first 1000 bytes of a longer result]"


async def test_a_call_breaking_the_schema_never_reaches_the_server(
    server: ServerFactory, make_runtime, fake_llm: fp.FakeProvider, journal: Path
) -> None:
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("k8s__pod_logs", {"pod": 5}),
                fp.ToolCall("k8s__pod_logs", {}),
                fp.ToolCall("k8s__pod_logs", {"pod": "api-0"}),
            ]
        ),
        fp.TextReply("api-0 is OOMKilled."),
    )
    async with AsyncExitStack() as stack:
        tools = await open_mcp_tools([server("k8s", risk="read_only", tools=("pod_logs",))], stack)
        runtime = make_runtime(*tools)
        outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
    assert isinstance(outcome.result, Completed)
    wrong_type, missing, valid = tool_results(fake_llm, 1)
    assert wrong_type.startswith("error: invalid arguments") and "$.pod" in wrong_type
    assert missing.startswith("error: invalid arguments") and "'pod'" in missing
    assert valid.startswith("api-0: OOMKilled")
    assert journal_lines(journal) == ["call pod_logs"]


async def test_a_stop_interrupts_a_slow_call_and_the_session_serves_the_next(
    server: ServerFactory,
    make_runtime,
    fake_llm: fp.FakeProvider,
    slow_service: SlowService,
    redis_client: aioredis.Redis,
) -> None:
    fake_llm.script(
        fp.ToolCallsReply(
            [fp.ToolCall("k8s__fetch_upstream", {"url": slow_service.url("/hold/db")})]
        )
    )
    async with AsyncExitStack() as stack:
        tools = await open_mcp_tools([server("k8s", risk="read_only", tools=("*",))], stack)
        runtime = make_runtime(*tools)
        run = asyncio.create_task(
            runtime.run(TurnRequest(session_id=SESSION, turn_id="t1", inputs=task()))
        )
        await slow_service.wait_for_hits(1)  # the server is inside the tool
        await ControlPlane(redis_client).stop(SESSION, "t1", by="dave")
        stopped = await run
        # MCP's notifications/cancelled reached the server: it abandoned its own request.
        await slow_service.wait_for_outcomes("abandoned", 1)

        fake_llm.script(
            fp.ToolCallsReply([fp.ToolCall("k8s__pod_logs", {"pod": "api-0"})]),
            fp.TextReply("api-0 is OOMKilled."),
        )
        again = await runtime.run(
            TurnRequest(session_id=SESSION, turn_id="t2", inputs=task("and now?"))
        )
    assert isinstance(stopped.result, Stopped)
    assert isinstance(again.result, Completed)
    history = await runtime.store.load(SESSION)
    validate_history(history)
    first, second = [m for m in history if isinstance(m, ToolMessage)]
    assert first.status is ToolStatus.INTERRUPTED and "interrupted by a stop" in first.content
    assert second.status is ToolStatus.OK and second.content.startswith("api-0: OOMKilled")


async def test_a_tool_of_undeclared_risk_waits_for_approval_before_reaching_the_server(
    journal: Path, make_runtime, fake_llm: fp.FakeProvider
) -> None:
    """The safe default: `side_effect`, so the call is gated, and the server never sees it."""
    fake_llm.script(fp.ToolCallsReply([fp.ToolCall("k8s__restart_pod", {"pod": "api-0"})]))
    async with AsyncExitStack() as stack:
        tools = await open_mcp_tools([stdio_server(journal)("k8s", tools=("restart_pod",))], stack)
        outcome = await make_runtime(*tools).run(
            TurnRequest(session_id=SESSION, turn_id="t1", inputs=task())
        )
    assert isinstance(outcome.result, Awaiting)
    assert journal_lines(journal) == []


async def test_sessions_open_and_close_from_any_task_and_leave_no_process(journal: Path) -> None:
    """Tools opened in one task may be closed in another, and no server outlives its session.

    A worker may be closed by another task than the one that opened it (a test fixture, a
    shutdown handler); the `mcp` client's anyio scopes must not care.
    """
    stack = AsyncExitStack()
    config = stdio_server(journal)("k8s", risk="read_only", tools=("server_pid",))
    [tool] = await asyncio.create_task(open_mcp_tools([config], stack))
    pid = int(await tool.handler({}, Ctx()))
    os.kill(pid, 0)  # alive
    await asyncio.create_task(stack.aclose())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


# --- servers that do not work -------------------------------------------------------------


async def test_servers_that_cannot_start_are_skipped_with_a_warning(
    journal: Path, make_runtime, fake_llm: fp.FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    good = stdio_server(journal)
    broken: list[McpServerConfig] = [
        StdioServerConfig(
            name="missing", transport="stdio", command="/nonexistent/mcp-server", tools=("*",)
        ),
        StdioServerConfig(
            name="quits", transport="stdio", command=sys.executable, args=("-c", "pass")
        ),
        HttpServerConfig(name="refused", transport="http", url=f"http://127.0.0.1:{free_port()}/"),
    ]
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("k8s__pod_logs", {"pod": "api-0"})]),
        fp.TextReply("api-0 is OOMKilled."),
    )
    async with AsyncExitStack() as stack:
        tools = await open_mcp_tools(
            [*broken, good("k8s", risk="read_only", tools=("pod_logs",))], stack
        )
        assert [tool.name for tool in tools] == ["k8s__pod_logs"]
        outcome = await make_runtime(*tools).run(
            TurnRequest(session_id=SESSION, turn_id="t1", inputs=task())
        )
    assert isinstance(outcome.result, Completed)
    assert tool_results(fake_llm, 1)[0].startswith("api-0: OOMKilled")
    for name in ("missing", "quits", "refused"):
        assert f"MCP server {name!r} did not start; going on without its tools" in caplog.text


async def test_a_server_that_never_answers_is_given_up_at_the_connect_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, LOGGER)
    mute = StdioServerConfig(  # reads its stdin and never answers: the handshake hangs
        name="mute",
        transport="stdio",
        command=sys.executable,
        args=("-c", "import sys; sys.stdin.read()"),
        tools=("*",),
    )
    async with AsyncExitStack() as stack:
        assert await open_mcp_tools([mute], stack, connect_timeout_s=0.5) == []
    assert "'mute' did not start" in caplog.text and "no tool listing within 0.5 s" in caplog.text


# --- the worker, configured as an operator does -------------------------------------------


@pytest.fixture
def mcp_settings(bot_settings: Settings, journal: Path) -> Settings:
    config = stdio_server(journal)("k8s", risk="read_only", tools=("pod_logs",))
    return bot_settings.model_copy(update={"mcp_servers": f"[{config.model_dump_json()}]"})


async def test_the_worker_offers_the_configured_servers_tools(
    mcp_settings: Settings,
    redis_client: aioredis.Redis,
    fake_llm: fp.FakeProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("k8s__pod_logs", {"pod": "api-0"})]),
        fp.TextReply("api-0 is OOMKilled."),
    )
    async with open_bot(mcp_settings, redis_client) as bot:
        worker = await bot.start_worker()
        await bot.post(sg.slack_app_mention(ts=sg.slack_ts()))
        await worker.wait_finished(1)
    offered = {tool["function"]["name"] for tool in fake_llm.requests[0].body["tools"]}
    assert "k8s__pod_logs" in offered and "k8s__dashboard" not in offered
    assert "api-0: OOMKilled at 12:03" in tool_results(fake_llm, 1)[0]
    logged = [r.getMessage() for r in caplog.records]
    assert logged.count("MCP server 'k8s' offers 1 tools: k8s__pod_logs") == 1
    [offers] = [m for m in logged if m.startswith("worker offers ")]
    assert "http_get" in offers and offers.endswith(", k8s__pod_logs")


async def test_an_invalid_setting_stops_the_worker_start_clearly(
    bot_settings: Settings, redis_client: aioredis.Redis
) -> None:
    settings = bot_settings.model_copy(update={"mcp_servers": '[{"name": "k8s"}]'})
    with pytest.raises(BotConfigError, match=r"CHATOPS_MCP_SERVERS: \[0\]: Unable to extract"):
        async with open_worker(settings, redis=redis_client):
            pass


@pytest.mark.parametrize(
    ("headers", "lost"),
    [
        ({"content-length": "40"}, True),
        ({"content-length": "40", "content-encoding": "identity"}, True),
        ({"content-length": "40", "content-encoding": "gzip"}, False),  # aread would inflate
        ({"content-length": "999999"}, False),
    ],
)
async def test_a_400_is_read_for_mcp_1x_words_only_when_small_and_uncompressed(
    headers: dict[str, str], lost: bool
) -> None:
    conn = _Connection(lambda: None, http=True)
    request = httpx2.Request("POST", "http://mcp/mcp", headers={"mcp-session-id": "s1"})

    async def body() -> AsyncIterator[bytes]:  # streamed, as the hook sees it: read on demand
        yield b'{"error": "Bad Request: No valid session ID provided"}'

    response = httpx2.Response(400, headers=headers, content=body(), request=request)
    await conn.on_response(response)
    assert conn.expired is lost
