"""A real MCP server for the MCP tool tests, built with the official `mcp` package.

Run as a script, never imported by the tests (so it needs nothing from this repository):

    python tests/fakes/mcp_server.py stdio
    python tests/fakes/mcp_server.py http FD    # streamable HTTP on an inherited listening socket
    python tests/fakes/mcp_server.py http-legacy FD   # the same, as a handshake-era server

Every `tools/call` request the server receives is appended to the file named by
`MCP_FAKE_JOURNAL` (`call <tool>`), before the server validates its arguments, so a test can
tell a call the client refused from one the server refused. The HTTP mode serves a socket the
test bound and passed down (`pass_fds`): connections queue in its backlog until the server
accepts them, so the test never waits for the server to come up.

Tools: `pod_logs(pod)` (text), `dashboard(name)` (text and an image), `restart_pod(pod)` (counts
its runs in the journal; `pod="tmux"` runs it, then answers the JSON-RPC error `tmux session
not found`), `db_query(sql)` (a read-only database query), `fetch_upstream(url)`
(an HTTP GET: slow when the URL holds), `drain_node(node)` (always an `isError` result),
`server_pid()` (its process id), `flood(kind, kib)` (a result of `kib` KiB: `text`, an embedded
`resource`, or an `error`).

`http-legacy` refuses `server/discover`, so the client falls back to the `initialize` handshake
and works in a session (`Mcp-Session-Id`): a new process on the same port knows no session and
answers 404 for the old one. `MCP_FAKE_STDERR_LINES=N` makes the server write N numbered lines
to its stderr at start (`MCP_FAKE_STDERR_LINE_CHARS` long, 40 unless set); `MCP_FAKE_REFUSE_FILE`
names a file whose existence makes the server exit at once (a server that cannot restart);
`MCP_FAKE_HANG_FILE` one that makes it say `hanging before initialize` on stderr and never
answer (a server that accepts a connection but never shakes hands).
"""

from __future__ import annotations

import base64
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    METHOD_NOT_FOUND,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

PIXEL = base64.b64encode(b"\x89PNG\r\n\x1a\n fake pixel").decode()


def _journal(line: str) -> None:
    path = os.environ.get("MCP_FAKE_JOURNAL")
    if path:
        with Path(path).open("a") as journal:
            journal.write(line + "\n")


class NoDiscover:
    """Middleware: answers `server/discover` as a handshake-era server does (method not found)."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "server/discover":
            raise MCPError(METHOD_NOT_FOUND, "Method not found")
        return await call_next(ctx)


class Journal:
    """Middleware: records each `tools/call` as it arrives, before any validation."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.params is not None:
            _journal(f"call {ctx.params.get('name')}")
        return await call_next(ctx)


class SessionWords:
    """Middleware: `restart_pod(pod="tmux")` runs, then answers a JSON-RPC error of its own.

    The error speaks of a session (`tmux session not found`): the tool's, not a lost session.
    """

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        result = await call_next(ctx)
        params = ctx.params or {}
        if ctx.method == "tools/call" and params.get("arguments", {}).get("pod") == "tmux":
            raise MCPError(INTERNAL_ERROR, "tmux session not found")
        return result


server: MCPServer[Any] = MCPServer(
    "fake-k8s", log_level="WARNING", middleware=[Journal(), SessionWords()]
)


@server.tool()
def pod_logs(pod: str) -> str:
    """Return the last log lines of a pod."""
    return f"{pod}: OOMKilled at 12:03 (limit 512Mi)\n{pod}: restarted 4 times"


@server.tool()
def dashboard(name: str) -> list[TextContent | ImageContent]:
    """Return a dashboard's summary and its screenshot."""
    return [
        TextContent(text=f"dashboard {name}: p99 latency 2.4 s"),
        ImageContent(data=PIXEL, mime_type="image/png"),
    ]


@server.tool()
def restart_pod(pod: str) -> str:
    """Restart a pod."""
    _journal(f"ran restart_pod {pod}")
    return f"pod {pod} restarted"


@server.tool()
def db_query(sql: str) -> str:
    """Run a read-only SQL query on the payments database."""
    return f"{sql}: 42 rows"


@server.tool()
async def fetch_upstream(url: str) -> str:
    """Fetch an upstream health endpoint (it may take long)."""
    async with httpx.AsyncClient() as client:
        response = await client.get(url, timeout=60)
    return f"{response.status_code}: {response.text}"


@server.tool()
def server_pid() -> int:
    """Return this server's process id."""
    return os.getpid()


@server.tool()
def drain_node(node: str) -> str:
    """Drain a node."""
    raise ToolError(f"node {node} is cordoned by another operation")


@server.tool()
def flood(kind: str, kib: int) -> list[TextContent | EmbeddedResource]:
    """Return `kib` KiB of log lines as text, as an embedded resource, or as an error."""
    lines = "".join(f"line {n:07d} payments-db timeout\n" for n in range(kib * 1024 // 32))
    if kind == "error":
        raise ToolError(lines)
    if kind == "resource":
        resource = TextResourceContents(uri="file:///var/log/app.log", text=lines)
        return [EmbeddedResource(type="resource", resource=resource)]
    return [TextContent(text=lines)]


async def _serve_http(fd: int) -> None:
    sock = socket.socket(fileno=fd)
    config = uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


def _at_start() -> None:
    refuse = os.environ.get("MCP_FAKE_REFUSE_FILE")
    if refuse and Path(refuse).exists():
        sys.exit(3)
    hang = os.environ.get("MCP_FAKE_HANG_FILE")
    if hang and Path(hang).exists():
        sys.stderr.write("hanging before initialize\n")
        sys.stderr.flush()
        time.sleep(3600)
    width = int(os.environ.get("MCP_FAKE_STDERR_LINE_CHARS", "40"))
    for n in range(int(os.environ.get("MCP_FAKE_STDERR_LINES", "0"))):
        sys.stderr.write(f"stderr line {n:06d} ".ljust(width, "x") + "\n")
    sys.stderr.flush()


def main() -> None:
    """Serve over stdio, or over streamable HTTP on an inherited socket."""
    _at_start()
    if sys.argv[1] == "http-legacy":
        server.middleware.append(NoDiscover())
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        anyio.run(_serve_http, int(sys.argv[2]))


if __name__ == "__main__":
    main()
