"""MCP servers for a worker, reachable from `agent_core` without importing the MCP SDK.

`agent_core.tools._mcp` imports the `mcp` SDK, which takes a noticeable part of a second; only a
worker with servers configured should pay for it. These two functions are what `agent_core`
exports of it: each imports the connector when it is first called.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_core.tools._base import Tool
    from agent_core.tools._mcp import McpServerConfig

__all__ = ["open_mcp_tools", "parse_mcp_servers"]


def parse_mcp_servers(text: str) -> tuple[McpServerConfig, ...]:
    """Parse `CHATOPS_MCP_SERVERS` (see `agent_core.tools._mcp.config`); blank means none.

    Raises:
        ConfigError: The text is not a valid list of servers.
    """
    from agent_core.tools import _mcp as mcp  # here: the SDK loads with it

    return mcp.parse_mcp_servers(text)


async def open_mcp_tools(
    servers: tuple[McpServerConfig, ...], stack: AsyncExitStack, *, max_bytes: int
) -> list[Tool]:
    """Connect every server; return the tools they offer (`agent_core.tools._mcp`).

    Each session is supervised (reconnected when it ends) until `stack` closes; a server that
    fails to start is logged and skipped.
    """
    from agent_core.tools import _mcp as mcp  # here: the SDK loads with it

    return await mcp.open_mcp_tools(servers, stack, max_bytes=max_bytes)
