"""Connecting configured MCP servers and offering their tools to the agent.

Contract:

- `open_mcp_tools(servers, stack)` connects every server at once and returns their allowlisted
  tools as chatops `Tool`s named `<server>__<tool>` (OpenAI's `^[a-zA-Z0-9_-]{1,64}$`), with the
  server's input schema as `parameters`. Each connection lives until `stack` closes (the worker's
  lifetime).
- A server that cannot start or connect (a missing command, a refused URL, a handshake or a
  listing that fails or takes longer than `CONNECT_TIMEOUT_S`) is logged as a warning naming it,
  and the worker goes on without its tools: one broken integration must not keep the bot from
  investigating with the rest. A tool whose schema is not a valid JSON schema is skipped the same
  way.
- Risk, idempotence and interruptibility come from the server's configured tier (see
  `agent_core.tools._mcp.config`): read-only tools are abortable, others must complete.
- A result is its text content, joined; other content is named, not shown ("[image omitted …]");
  it is read up to `max_bytes` bytes before anything else handles it (see `content`).
  `isError`, a protocol error or a lost connection raise `ToolFailed`, which the model reads.
- Cancelling a call (a stop, a steer, the call's timeout) sends the server MCP's
  `notifications/cancelled` and leaves the session usable for the next call.

Every session is opened and closed by one owner task of its own. anyio's task groups inside the
`mcp` client must be exited by the task that entered them (modelcontextprotocol/python-sdk#79), and
a transport task that fails cancels its host task: hosted by the worker's own task, a dying server
would cancel the worker. `stack` only tells each owner to close, then waits for it (bounded).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from typing import Any

import anyio
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from pydantic import ValidationError

from agent_core._errors import ConfigError, ToolFailed
from agent_core.tools._base import Interruptibility, Risk, Tool, ToolContext
from agent_core.tools._mcp.config import HttpServerConfig, McpServerConfig
from agent_core.tools._mcp.content import DEFAULT_MAX_BYTES, render_result
from agent_core.tools._schema import ArgumentSchema

__all__ = ["CLOSE_TIMEOUT_S", "CONNECT_TIMEOUT_S", "open_mcp_tools", "tool_name"]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0
"""Longest wait for a server to start, shake hands and list its tools at worker start."""
CLOSE_TIMEOUT_S = 10.0
"""Longest wait for a session to close (the stdio transport's own shutdown takes up to ~6 s)."""
MAX_LIST_PAGES = 20
"""Pages of `tools/list` read at most: a paginator that never ends cannot hang the start."""
_CLIENT_INFO = mcp_types.Implementation(name="chatops", version="0.1.0")
_NOT_NAME_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64


def tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, with other characters made `_`; a long one is cut and given a hash."""
    name = _NOT_NAME_CHAR.sub("_", f"{server}__{tool}")
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}__{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9]}_{digest}"


@contextmanager
def _map_mcp_errors(server: str, tool: str) -> Iterator[None]:
    """Turn the `mcp` client's failures into `ToolFailed` the model reads."""
    try:
        yield
    except MCPError as exc:
        if exc.code == mcp_types.CONNECTION_CLOSED:
            raise ToolFailed(f"MCP server {server!r} is disconnected") from exc
        raise ToolFailed(f"MCP server {server!r} refused {tool!r}: {exc.error.message}") from exc
    except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
        raise ToolFailed(f"MCP server {server!r} is disconnected") from exc
    except (ValidationError, RuntimeError) as exc:  # a malformed or schema-breaking result
        raise ToolFailed(f"MCP server {server!r} answered {tool!r} badly: {exc}") from exc


class _Session:
    """One server's session, opened, held and closed by its own owner task."""

    def __init__(self, config: McpServerConfig, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.config = config
        self.max_bytes = max_bytes
        self.client: Client | None = None
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None

    def _target(self) -> StdioServerParameters | str:
        if isinstance(self.config, HttpServerConfig):
            return self.config.url
        return StdioServerParameters(
            command=self.config.command, args=list(self.config.args), env=dict(self.config.env)
        )

    async def open(self, timeout_s: float) -> list[mcp_types.Tool]:
        """Start the owner; return the server's tools once it is connected.

        Raises:
            Exception: Whatever kept the server from starting (`TimeoutError` after `timeout_s`).
        """
        listed: asyncio.Future[list[mcp_types.Tool]] = asyncio.get_running_loop().create_future()
        owner = self._owner = asyncio.create_task(self._own(listed), name=f"mcp:{self.config.name}")
        waited: set[asyncio.Future[Any]] = {listed, owner}
        await asyncio.wait(waited, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if listed.done():
            return listed.result()
        listed.cancel()
        owner.cancel()  # the owner entered the client, so it may exit it: cancel it, not us
        await asyncio.wait({owner})
        raise TimeoutError(f"no tool listing within {timeout_s:g} s")

    async def _own(self, listed: asyncio.Future[list[mcp_types.Tool]]) -> None:
        try:
            async with Client(self._target(), client_info=_CLIENT_INFO) as client:
                tools = await _list_tools(client)
                self.client = client
                if not listed.done():  # else `open` gave up waiting: close at once
                    listed.set_result(tools)
                    await self._closing.wait()
        except Exception as exc:
            if not listed.done():
                listed.set_exception(exc)
            else:
                log.warning("MCP server %r disconnected: %s", self.config.name, _describe(exc))
        finally:
            self.client = None

    async def aclose(self) -> None:
        """Tell the owner to close the session and wait for it; cancel it if it overstays."""
        if self._owner is None:
            return
        self._closing.set()
        done, _ = await asyncio.wait({self._owner}, timeout=CLOSE_TIMEOUT_S)
        if not done:
            log.warning("MCP server %r did not close in time; cancelled", self.config.name)
            self._owner.cancel()
            await asyncio.wait({self._owner})

    async def call(self, tool: str, args: Mapping[str, Any]) -> str:
        """Call `tool`; return its text or raise `ToolFailed`."""
        client = self.client
        if client is None:
            raise ToolFailed(f"MCP server {self.config.name!r} is disconnected")
        with _map_mcp_errors(self.config.name, tool):
            result = await client.call_tool(tool, dict(args))
        text = render_result(result, max_bytes=self.max_bytes)
        if result.is_error:
            raise ToolFailed(text or f"{tool!r} failed without saying why")
        return text


async def _list_tools(client: Client) -> list[mcp_types.Tool]:
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


def _describe(exc: BaseException) -> str:
    """The innermost errors' types and messages: anyio wraps them in exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _as_tool(session: _Session, listed: mcp_types.Tool) -> Tool:
    config = session.config
    read_only = config.risk is Risk.READ_ONLY
    remote = listed.name
    interruptibility = Interruptibility.ABORTABLE if read_only else Interruptibility.MUST_COMPLETE

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return await session.call(remote, args)

    description = listed.description or listed.title or remote
    return Tool(
        name=tool_name(config.name, remote),
        description=f"{description} (tool {remote!r} of MCP server {config.name!r})",
        parameters=listed.input_schema,
        handler=handler,
        interruptibility=interruptibility,
        timeout_s=config.timeout_s,
        risk=config.risk,
        idempotent=read_only,
    )


def _offered(session: _Session, listed: Sequence[mcp_types.Tool]) -> list[Tool]:
    """The allowlisted tools with a usable schema, each under a name no other tool has."""
    config = session.config
    tools: dict[str, Tool] = {}
    for remote in listed:
        if not config.allows(remote.name):
            continue
        tool = _as_tool(session, remote)
        try:
            ArgumentSchema(tool.name, tool.parameters)
        except ConfigError as exc:
            log.warning("MCP server %r: tool %r skipped: %s", config.name, remote.name, exc)
            continue
        if tool.name in tools:
            log.warning(
                "MCP server %r: tool %r skipped: its name clashes", config.name, remote.name
            )
            continue
        tools[tool.name] = tool
    if missing := sorted(set(config.tools) - {t.name for t in listed} - {"*"}):
        log.warning("MCP server %r does not offer allowlisted %s", config.name, ", ".join(missing))
    return list(tools.values())


async def _connect(session: _Session, timeout_s: float) -> list[Tool]:
    try:
        listed = await session.open(timeout_s)
    except Exception as exc:
        log.warning(
            "MCP server %r did not start; going on without its tools: %s",
            session.config.name,
            _describe(exc),
        )
        return []
    return _offered(session, listed)


async def open_mcp_tools(
    servers: Sequence[McpServerConfig],
    stack: AsyncExitStack,
    *,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[Tool]:
    """Connect every server concurrently; return the tools offered, in configuration order.

    Each session closes when `stack` does. A server that fails to start is logged and skipped
    (its tools are missing); this never raises for a server's failure. Each result is read up
    to `max_bytes` bytes (`CHATOPS_TOOL_MAX_BYTES`).
    """
    sessions = [_Session(config, max_bytes) for config in servers]
    for session in sessions:
        stack.push_async_callback(session.aclose)
    async with asyncio.TaskGroup() as group:
        connecting = [group.create_task(_connect(s, connect_timeout_s)) for s in sessions]
    return [tool for task in connecting for tool in task.result()]
