"""The worker's tools, built from the settings, with the HTTP clients and MCP sessions they use.

Contract: every client and session opened here is closed by the caller's stack, in reverse of
the order they open in: the shared HTTP client, the `http_get` client, the probe's client, the
runbooks' index, then the MCP sessions. A setting that cannot work raises `BotConfigError`
naming it (`CHATOPS_MCP_SERVERS: ...`) before any tool runs. The tools keep one order
(`http_get`, the sub-agent tools, then probe, Prometheus, shell, runbooks, `past_analyses` and
MCP as configured), and the MCP SDK is imported only when `CHATOPS_MCP_SERVERS` is set. The
runbooks' index is built in a worker thread (`RunbookLibrary.open`), so a large folder does not
stall the loop. The offered tools are logged once, by name; the set never changes while the
worker runs (an MCP server that goes down keeps its tools offered, see `agent_core.tools._mcp`).
"""

from __future__ import annotations

import logging
from contextlib import AsyncExitStack
from dataclasses import replace

import httpx

from agent_core import (
    SHELL_MAX_OUTPUT_BYTES,
    BodyLimit,
    CommandAllowlist,
    ConfigError,
    ConnectionSlots,
    HostAllowlist,
    RunbookLibrary,
    RunbookLimits,
    ShellProfiles,
    Tool,
    Toolset,
    guarded,
    http_get_tool,
    http_probe_tool,
    open_mcp_tools,
    parse_mcp_servers,
    prometheus_tool,
    runbook_tools,
    shell_tool,
    subagent_tools,
)
from bot.control.subagent_desk import SubagentDesk
from bot.errors import BotConfigError
from bot.settings import Settings
from bot.state.memory import MemoryBook
from bot.worker.memory_tool import past_analyses_tool

__all__ = ["open_toolset"]

log = logging.getLogger(__name__)

CONNECTIONS_PER_ANALYSIS = 2
"""Connections each HTTP client of the tools may hold per analysis the worker runs at once."""
MIN_CONNECTIONS = 100
"""...and at least this many (httpx's own default), for a worker that runs few."""


def tool_connections(concurrency: int) -> int:
    """The connections each of the tools' HTTP clients may hold at once, for `concurrency`."""
    return max(MIN_CONNECTIONS, CONNECTIONS_PER_ANALYSIS * concurrency)


async def open_toolset(
    settings: Settings,
    stack: AsyncExitStack,
    subagents: SubagentDesk,
    memory: MemoryBook | None = None,
    *,
    concurrency: int = 8,
) -> Toolset:
    """Every configured tool, guarded, with its clients closed by `stack`.

    Args:
        settings: Which tools are configured, and their bounds.
        stack: Closes the HTTP clients and the MCP sessions.
        subagents: The sub-agent desk the sub-agent tools dispatch to.
        memory: The memory of past analyses `past_analyses` searches; None: not offered.
        concurrency: Analyses the worker runs at once: each HTTP client of the tools holds
            `tool_connections(concurrency)` connections, and a call that finds them all in use
            waits for one off its clock (`agent_core.ConnectionSlots`).

    Raises:
        BotConfigError: A tool's setting cannot work (the message names the setting).
    """
    limit = BodyLimit(max_bytes=settings.tool_max_bytes)
    size = tool_connections(concurrency)
    prometheus = ConnectionSlots(size)
    fetch = ConnectionSlots(size)
    # `http_get` connects to the address it checked, by IP, so pooled connections would be
    # keyed by address: with none kept, no name reuses a TLS session verified for another.
    fetch_http = _client(stack, fetch.client(keepalive=False))
    allowlist = HostAllowlist.parse(settings.http_allowlist)
    tools = [
        http_get_tool(allowlist, fetch_http, limit=limit, slots=fetch),
        *subagent_tools(subagents),
        *_probe_tools(settings, stack, ConnectionSlots(size)),
        *_prometheus_tools(settings, stack, prometheus, limit),
        *_shell_tools(settings),
        *await _runbook_tools(settings, stack),
        *([past_analyses_tool(memory)] if memory is not None else []),
        *await _mcp_tools(settings, stack, limit),
    ]
    # The one toolset for the worker's lifetime: an MCP server that goes down keeps its tools.
    log.info("worker offers %d tools: %s", len(tools), ", ".join(tool.name for tool in tools))
    return guarded(Toolset.of(tools))


def _client(stack: AsyncExitStack, client: httpx.AsyncClient) -> httpx.AsyncClient:
    """`client`, closed by `stack`."""
    stack.push_async_callback(client.aclose)
    return client


def _probe_tools(settings: Settings, stack: AsyncExitStack, slots: ConnectionSlots) -> list[Tool]:
    """`http_probe`, when `CHATOPS_HTTP_ALLOWLIST` names a host."""
    if not settings.http_allowlist.strip():
        return []
    # Its own client, keeping no idle connection: every probe opens a new one, so its
    # latency includes connect and TLS, and it reads a fresh handshake's certificate.
    probe_http = _client(stack, slots.client(keepalive=False))
    allowlist = HostAllowlist.parse(settings.http_allowlist)
    return [http_probe_tool(allowlist, probe_http, slots=slots)]


def _prometheus_tools(
    settings: Settings, stack: AsyncExitStack, slots: ConnectionSlots, limit: BodyLimit
) -> list[Tool]:
    """The Prometheus query tool, when `CHATOPS_PROMETHEUS_URL` is set.

    Raises:
        BotConfigError: The URL cannot work.
    """
    if not (prometheus_url := (settings.prometheus_url or "").strip()):
        return []
    http = _client(stack, slots.client())
    try:
        return [prometheus_tool(prometheus_url, http, limit=limit, slots=slots)]
    except ConfigError as exc:
        raise BotConfigError(f"CHATOPS_PROMETHEUS_URL: {exc}") from exc


def _shell_tools(settings: Settings) -> list[Tool]:
    """The shell tool, when `CHATOPS_SHELL_ALLOWLIST` names a command.

    The profiles file is read whether or not the allowlist is set.

    Raises:
        BotConfigError: The profiles file or the allowlist cannot work.
    """
    try:
        profiles = ShellProfiles.load(settings.shell_profiles_file)
    except ConfigError as exc:
        raise BotConfigError(f"CHATOPS_SHELL_PROFILES_FILE: {exc}") from exc
    if not settings.shell_allowlist.strip():
        return []
    try:
        commands = CommandAllowlist.parse(settings.shell_allowlist, profiles)
    except ConfigError as exc:
        raise BotConfigError(f"CHATOPS_SHELL_ALLOWLIST: {exc}") from exc
    cap = min(settings.tool_max_bytes, SHELL_MAX_OUTPUT_BYTES)
    return [shell_tool(commands, max_output_bytes=cap)]


async def _runbook_tools(settings: Settings, stack: AsyncExitStack) -> list[Tool]:
    """`search_runbooks` and `read_runbook`, when `CHATOPS_RUNBOOKS_DIR` is set.

    Raises:
        BotConfigError: The folder is not a directory that can be read.
    """
    if not (folder := (settings.runbooks_dir or "").strip()):
        return []
    try:
        library = await RunbookLibrary.open(folder, _runbook_limits(settings))
    except ConfigError as exc:
        raise BotConfigError(f"CHATOPS_RUNBOOKS_DIR: {exc}") from exc
    stack.callback(library.close)
    return runbook_tools(library)


def _runbook_limits(settings: Settings) -> RunbookLimits:
    """The default bounds, a read cut to `CHATOPS_TOOL_MAX_BYTES` when that is smaller."""
    default = RunbookLimits()
    return replace(default, max_read_bytes=min(settings.tool_max_bytes, default.max_read_bytes))


async def _mcp_tools(settings: Settings, stack: AsyncExitStack, limit: BodyLimit) -> list[Tool]:
    """The tools of every `CHATOPS_MCP_SERVERS` server, their sessions closed by `stack`.

    Raises:
        BotConfigError: The server list cannot be parsed.
    """
    if not settings.mcp_servers.strip():
        return []
    # The MCP SDK is imported by the first of these calls, so only when configured.
    try:
        servers = parse_mcp_servers(settings.mcp_servers)
    except ConfigError as exc:
        raise BotConfigError(f"CHATOPS_MCP_SERVERS: {exc}") from exc
    return await open_mcp_tools(servers, stack, max_bytes=limit.max_bytes)
