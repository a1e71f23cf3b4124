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
  way. The tools each server offers are logged at start (server name, tool names).
- Supervision: a server that was up is reconnected whenever its connection ends (a stdio
  process that died, an HTTP transport that failed, a server that answers 404 for our
  `Mcp-Session-Id`, as the spec has a server do for a session it no longer knows), with bounded,
  jittered exponential backoff (`backoff_delay_s`) until the worker closes. Its tools stay
  offered meanwhile (the model's toolset does not change): a call waits up to `RECOVERY_WAIT_S`
  for the reconnect, then answers "MCP server 'k8s' unavailable, retrying (…)", a retryable
  failure (a read-only tool is tried once more by the batch). Up→down and down→up are each
  logged once, not per call; a server that lists other tools after reconnecting is logged too.
  A call the server refused for an unknown session was not run, so it is sent again on the new
  session; a call whose connection ended under it is sent again only if it is idempotent.
- A stdio server's stderr is read through the logger under its name (`stderr`), never written
  raw to the worker's stderr.
- Risk, idempotence and interruptibility come from the server's configured tier (see
  `agent_core.tools._mcp.config`): read-only tools are abortable, others must complete.
- A result is its text content, joined; other content is named, not shown ("[image omitted …]");
  it is read up to `max_bytes` bytes before anything else handles it (see `content`).
  `isError` or a protocol error raise `ToolFailed`, which the model reads.
- Cancelling a call (a stop, a steer, the call's timeout) sends the server MCP's
  `notifications/cancelled` and leaves the session usable for the next call.

Every session is opened, reconnected and closed by one owner task of its own. anyio's task
groups inside the `mcp` client must be exited by the task that entered them
(modelcontextprotocol/python-sdk#79), and a transport task that fails cancels its host task:
hosted by the worker's own task, a dying server would cancel the worker. `stack` only tells
each owner to close, then waits for it (bounded); closing twice is harmless, and a close that
is cancelled leaves the owner closing by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import random
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, Self

import anyio
import httpx2
import mcp_types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client._transport import ReadStream, TransportStreams
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from agent_core._errors import ConfigError, ToolFailed
from agent_core.tools._base import Interruptibility, RetryPolicy, Risk, Tool, ToolContext
from agent_core.tools._mcp.config import HttpServerConfig, McpServerConfig
from agent_core.tools._mcp.content import DEFAULT_MAX_BYTES, render_result
from agent_core.tools._mcp.stderr import stderr_pipe
from agent_core.tools._schema import ArgumentSchema

__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_MAX_S",
    "CLOSE_TIMEOUT_S",
    "CONNECT_TIMEOUT_S",
    "RECOVERY_WAIT_S",
    "backoff_delay_s",
    "open_mcp_tools",
    "tool_name",
]

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 20.0
"""Longest wait for a server to start, shake hands and list its tools (at start, and on each
reconnect attempt)."""
CLOSE_TIMEOUT_S = 10.0
"""Longest wait for a session to close (the stdio transport's own shutdown takes up to ~6 s)."""
MAX_LIST_PAGES = 20
"""Pages of `tools/list` read at most: a paginator that never ends cannot hang the start."""
BACKOFF_BASE_S = 0.5
"""The reconnect backoff's cap after the first failure; it doubles with each failure after."""
BACKOFF_MAX_S = 30.0
"""No wait between reconnect attempts is longer than this."""
BACKOFF_RESET_S = 60.0
"""A connection that stayed up this long starts the backoff over when it ends."""
RECOVERY_WAIT_S = 5.0
"""Longest a call waits for a server being reconnected (at most half its timeout) before it
answers 'unavailable, retrying'."""
READ_ONLY_RETRY = RetryPolicy(attempts=2)
"""A read-only MCP tool answered 'unavailable' is tried once more after a jittered backoff."""
_CLIENT_INFO = mcp_types.Implementation(name="chatops", version="0.1.0")
_NOT_NAME_CHAR = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64
_SESSION_HEADER = "mcp-session-id"
_MAX_ERROR_BODY = 4_096
"""A 400 answer read for its words only when it declares at most this many bytes."""
_LEGACY_LOST_SESSION = b"No valid session ID provided"
"""What a server of `mcp` 1.x answers (400) for a session id it does not know."""


def tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>`, with other characters made `_`; a long one is cut and given a hash."""
    name = _NOT_NAME_CHAR.sub("_", f"{server}__{tool}")
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(f"{server}__{tool}".encode()).hexdigest()[:8]
    return f"{name[: _MAX_NAME - 9]}_{digest}"


def backoff_delay_s(failures: int, draw: Callable[[], float] = random.random) -> float:
    """The wait before reconnect attempt `failures` + 1: half the cap, plus up to half again.

    The cap doubles from `BACKOFF_BASE_S` per failure up to `BACKOFF_MAX_S`; the jitter keeps
    workers whose server restarted together from reconnecting in lockstep.
    """
    cap = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** min(failures - 1, 32))
    return cap / 2 + cap / 2 * draw()


def _names_a_lost_session(exc: MCPError, conn: _Connection) -> bool:
    """The error the `mcp` client itself makes of a 404 for our session id, on HTTP only.

    The spec: a server answers 404 to a request carrying a session id it no longer knows, and
    the client must initialise a new session; the response hook sees that 404 first
    (`conn.expired`). Here only the SDK's own `Session terminated` (its error for a 404 without
    a JSON-RPC body) is matched, exactly: a tool's own error that speaks of a session ("tmux
    session not found", "DB session expired") is that tool's answer, not a lost connection,
    and must not have a call that may mutate sent twice.
    """
    return (
        conn.http
        and exc.error.code == mcp_types.INVALID_REQUEST
        and exc.error.message == "Session terminated"
    )


class _Connection:
    """One connection of a session: ended once, with the reason, by whoever notices first."""

    def __init__(self, on_end: Callable[[], None], *, http: bool = False) -> None:
        self.ended = asyncio.Event()
        self.http = http
        """An HTTP transport: only it has a session the server can forget."""
        self.reason = "the connection ended"
        self.expired = False
        """The server answered 404 for the session id: a request it refused was not processed."""
        self._on_end = on_end

    def end(self, reason: str, *, expired: bool = False) -> None:
        self.expired = self.expired or expired
        if not self.ended.is_set():
            self.reason = reason
            self.ended.set()
            self._on_end()

    async def on_response(self, response: httpx2.Response) -> None:
        """HTTP hook: a 404 (or `mcp` 1.x's 400) for our session id means it is gone.

        `mcp` 1.x servers answer a session they do not know with 400 and exactly
        `No valid session ID provided`; any other 400 is the request's own error.
        """
        if not response.request.headers.get(_SESSION_HEADER):
            return
        if response.status_code == 404:
            self.end("the server no longer knows its session", expired=True)
        elif response.status_code == 400 and _small(response):
            if _LEGACY_LOST_SESSION in await response.aread():
                self.end("the server no longer knows its session", expired=True)


def _small(response: httpx2.Response) -> bool:
    """Its body is at most `_MAX_ERROR_BODY` bytes once read.

    The declared length counts the bytes on the wire, and `aread` decompresses: a small gzip
    body could inflate to gigabytes, so only an uncompressed one is read.
    """
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    length = response.headers.get("content-length", "")
    return encoding == "identity" and length.isdigit() and int(length) <= _MAX_ERROR_BODY


class _WatchedRead:
    """The transport's read stream, which ends its connection when it ends.

    A stdio server that dies closes its stdout: the stream ends with no exception anywhere, so
    only its reader can tell the session's owner to reconnect.
    """

    def __init__(self, inner: ReadStream[SessionMessage | Exception], conn: _Connection) -> None:
        self._inner = inner
        self._conn = conn

    @property
    def last_context(self) -> object:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._conn.end("the connection ended")
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self._inner.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._conn.end("the connection ended")
            raise

    async def __aenter__(self) -> Self:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        self._conn.end("the connection ended")
        return await self._inner.__aexit__(exc_type, exc_val, exc_tb)


class _Session:
    """One server's session, supervised by its own owner task for the worker's lifetime.

    The owner connects, lists the tools, and waits for the connection to end (the process
    died, the HTTP transport failed, the server forgot the session, or `aclose`); then it
    reconnects after `backoff_delay_s` until it is told to close. A server that never came up
    at start is not supervised: its tools were never offered.
    """

    def __init__(
        self,
        config: McpServerConfig,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        recovery_wait_s: float = RECOVERY_WAIT_S,
    ) -> None:
        self.config = config
        self.max_bytes = max_bytes
        self.connect_timeout_s = connect_timeout_s
        self.recovery_wait_s = recovery_wait_s
        self.listed: tuple[str, ...] = ()
        """The allowlisted tool names the server listed when it last connected."""
        self._client: Client | None = None
        self._conn: _Connection | None = None
        self._up = asyncio.Event()
        self._available = True
        self._down_reason = ""
        self._closing = asyncio.Event()
        self._owner: asyncio.Task[None] | None = None
        self._attempt: anyio.CancelScope | None = None
        """The connect attempt in progress, cancelled by a close: it must not run to its
        deadline (`connect_timeout_s`) while the worker waits to stop."""

    @property
    def name(self) -> str:
        return self.config.name

    def _transport(self, conn: _Connection) -> AbstractAsyncContextManager[TransportStreams]:
        @asynccontextmanager
        async def transport() -> AsyncIterator[TransportStreams]:
            if isinstance(self.config, HttpServerConfig):
                http = httpx2.AsyncClient(
                    timeout=httpx2.Timeout(30.0, read=300.0),  # the SDK's defaults
                    event_hooks={"response": [conn.on_response]},
                )
                async with (
                    http,
                    streamable_http_client(self.config.url, http_client=http) as (
                        read,
                        write,
                    ),
                ):
                    yield _WatchedRead(read, conn), write
                return
            params = StdioServerParameters(
                command=self.config.command,
                args=list(self.config.args),
                env=dict(self.config.env),
            )
            async with (
                stderr_pipe(self.name) as errlog,
                stdio_client(params, errlog) as (
                    read,
                    write,
                ),
            ):
                yield _WatchedRead(read, conn), write

        return transport()

    async def open(self) -> list[mcp_types.Tool]:
        """Start the owner; return the server's tools once it is first connected.

        Raises:
            Exception: Whatever kept the server from starting (`TimeoutError` past the
                connect timeout); the owner has then ended.
        """
        first: asyncio.Future[list[mcp_types.Tool]] = asyncio.get_running_loop().create_future()
        owner = self._owner = asyncio.create_task(self._own(first), name=f"mcp:{self.name}")
        owner.add_done_callback(self._owner_ended)
        waited: set[asyncio.Future[Any]] = {first, owner}
        await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
        if not first.done() or first.cancelled():
            raise RuntimeError("its session ended before it connected")
        return first.result()

    def _owner_ended(self, owner: asyncio.Task[None]) -> None:
        if not owner.cancelled() and (failure := owner.exception()) is not None:
            log.error("MCP server %r: its supervisor failed: %s", self.name, _describe(failure))

    async def _own(self, first: asyncio.Future[list[mcp_types.Tool]]) -> None:
        loop = asyncio.get_running_loop()
        failures = 0
        try:
            while not self._closing.is_set():
                conn = self._conn = _Connection(
                    self._up.clear, http=isinstance(self.config, HttpServerConfig)
                )
                up_since: float | None = None
                try:
                    deadline = anyio.current_time() + self.connect_timeout_s
                    with anyio.CancelScope(deadline=deadline) as scope:
                        self._attempt = scope
                        if self._closing.is_set():
                            scope.cancel()
                        async with Client(
                            self._transport(conn), client_info=_CLIENT_INFO
                        ) as client:
                            tools = await _list_tools(client)
                            self._attempt = None
                            scope.deadline = math.inf
                            up_since = loop.time()
                            self._came_up(client, conn, tools, first, failures)
                            await conn.ended.wait()
                    if up_since is None:
                        raise TimeoutError(f"no tool listing within {self.connect_timeout_s:g} s")
                    failure: Exception | None = None
                except Exception as exc:
                    failure = exc
                finally:
                    self._attempt = None
                    self._client = None
                    self._up.clear()
                if not first.done():
                    first.set_exception(failure or RuntimeError(conn.reason))
                    return  # never up: not supervised
                # A lost session's own reason, else the failure the transport raised closing.
                reason = _describe(failure) if failure and not conn.expired else conn.reason
                if self._closing.is_set():
                    return
                if up_since is not None and loop.time() - up_since >= BACKOFF_RESET_S:
                    failures = 0
                failures += 1
                self._went_down(reason, failures)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(backoff_delay_s(failures)):
                        await self._closing.wait()
        finally:
            self._client = None
            self._up.clear()
            first.cancel()  # no-op once it has its answer

    def _came_up(
        self,
        client: Client,
        conn: _Connection,
        tools: list[mcp_types.Tool],
        first: asyncio.Future[list[mcp_types.Tool]],
        failures: int,
    ) -> None:
        listed = tuple(t.name for t in tools if self.config.allows(t.name))
        if not first.done():
            first.set_result(tools)
        elif self._closing.is_set():
            return  # up just as the worker closes: nothing to announce, nothing to serve
        elif not self._available:
            log.warning(
                "MCP server %r is available again (reconnected after %d attempts)",
                self.name,
                failures,
            )
            if listed != self.listed:
                log.warning(
                    "MCP server %r lists other tools since it reconnected: %s (offered: %s)",
                    self.name,
                    ", ".join(listed) or "none",
                    ", ".join(self.listed) or "none",
                )
        self.listed = listed
        self._available = True
        self._client, self._conn = client, conn
        if not conn.ended.is_set():
            self._up.set()

    def _went_down(self, reason: str, failures: int) -> None:
        self._down_reason = reason
        if self._available:
            self._available = False
            log.warning(
                "MCP server %r unavailable (%s); its tools stay offered and answer"
                " 'unavailable' while it is reconnected with backoff",
                self.name,
                reason,
            )
        else:
            log.debug("MCP server %r: reconnect attempt %d failed: %s", self.name, failures, reason)

    def _unavailable(self) -> ToolFailed:
        reason = f" ({self._down_reason})" if self._down_reason else ""
        return ToolFailed(f"MCP server {self.name!r} unavailable, retrying{reason}", retryable=True)

    async def _connected(self) -> tuple[Client, _Connection]:
        """The live session, waiting a little for one being reconnected.

        Raises:
            ToolFailed: Still down after the wait (retryable).
        """
        if not self._up.is_set():
            wait = min(self.recovery_wait_s, self.config.timeout_s / 2)
            if self._closing.is_set() or wait <= 0:
                raise self._unavailable()
            try:
                async with asyncio.timeout(wait):
                    await self._up.wait()
            except TimeoutError:
                raise self._unavailable() from None
        client, conn = self._client, self._conn
        if client is None or conn is None or conn.ended.is_set():
            raise self._unavailable()
        return client, conn

    def begin_close(self) -> None:
        """Tell the owner to close: end the connection, or cancel the attempt to make one."""
        self._closing.set()
        if self._conn is not None:
            self._conn.end("the worker is closing")
        if self._attempt is not None:
            self._attempt.cancel()

    async def aclose(self) -> None:
        """Tell the owner to close the session and wait for it; cancel it if it overstays.

        Idempotent; a cancelled close leaves the owner closing on its own.
        """
        self.begin_close()
        owner = self._owner
        if owner is None or owner.done():
            return
        done, _ = await asyncio.wait({owner}, timeout=CLOSE_TIMEOUT_S)
        if not done:
            log.warning("MCP server %r did not close in time; cancelled", self.name)
            owner.cancel()
            await asyncio.wait({owner})

    async def call(self, tool: str, args: Mapping[str, Any], *, idempotent: bool) -> str:
        """Call `tool`; return its text or raise `ToolFailed`.

        A call the server refused for a session it no longer knows was not run: it is sent
        again, once, on the new session. A call whose connection ended under it is sent again
        only when the tool is idempotent.
        """
        resent = False
        while True:
            client, conn = await self._connected()
            try:
                result = await client.call_tool(tool, dict(args))
            except MCPError as exc:
                if conn.expired or _names_a_lost_session(exc, conn):
                    conn.end("the server no longer knows its session", expired=True)
                elif exc.code == mcp_types.CONNECTION_CLOSED:
                    conn.end("the connection ended")
                else:
                    raise ToolFailed(
                        f"MCP server {self.name!r} refused {tool!r}: {exc.error.message}"
                    ) from exc
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                conn.end("the connection ended")
            except (ValidationError, RuntimeError) as exc:  # a malformed or schema-breaking result
                raise ToolFailed(
                    f"MCP server {self.name!r} answered {tool!r} badly: {exc}"
                ) from exc
            else:
                text = render_result(result, max_bytes=self.max_bytes)
                if result.is_error:
                    raise ToolFailed(text or f"{tool!r} failed without saying why")
                return text
            if resent or not (conn.expired or idempotent):
                self._down_reason = conn.reason
                raise self._unavailable()
            resent = True


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
        return await session.call(remote, args, idempotent=read_only)

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
        retry=READ_ONLY_RETRY if read_only else RetryPolicy(),
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


async def _connect(session: _Session) -> list[Tool]:
    try:
        listed = await session.open()
    except Exception as exc:
        log.warning(
            "MCP server %r did not start; going on without its tools: %s",
            session.name,
            _describe(exc),
        )
        return []
    tools = _offered(session, listed)
    log.info(
        "MCP server %r offers %d tools: %s",
        session.name,
        len(tools),
        ", ".join(tool.name for tool in tools) or "none",
    )
    return tools


async def _close_all(sessions: Sequence[_Session]) -> None:
    """Close every session at once: one after another, N servers could take N × the bound.

    Each is told first, so a close cancelled before its task ran still leaves every owner
    closing by itself.
    """
    for session in sessions:
        session.begin_close()
    async with asyncio.TaskGroup() as group:
        for session in sessions:
            group.create_task(session.aclose(), name=f"mcp-close:{session.name}")


async def open_mcp_tools(
    servers: Sequence[McpServerConfig],
    stack: AsyncExitStack,
    *,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    recovery_wait_s: float = RECOVERY_WAIT_S,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[Tool]:
    """Connect every server concurrently; return the tools offered, in configuration order.

    Each session is supervised (reconnected when it ends) until `stack` closes. A server that
    fails to start is logged and skipped (its tools are missing); this never raises for a
    server's failure. Each result is read up to `max_bytes` bytes (`CHATOPS_TOOL_MAX_BYTES`);
    a call to a server being reconnected waits up to `recovery_wait_s` for it.
    """
    sessions = [
        _Session(
            config, max_bytes, connect_timeout_s=connect_timeout_s, recovery_wait_s=recovery_wait_s
        )
        for config in servers
    ]
    stack.push_async_callback(_close_all, sessions)
    async with asyncio.TaskGroup() as group:
        connecting = [group.create_task(_connect(s)) for s in sessions]
    return [tool for task in connecting for tool in task.result()]
