"""Tools from MCP servers: configured per server, connected for the worker's lifetime.

`parse_mcp_servers` reads `CHATOPS_MCP_SERVERS` (see `config` for the format and its safe
defaults); `open_mcp_tools` connects the servers and returns their allowlisted tools.
"""

from agent_core.tools._mcp.config import (
    ALL_TOOLS,
    HttpServerConfig,
    McpServerConfig,
    StdioServerConfig,
    parse_mcp_servers,
)
from agent_core.tools._mcp.connector import open_mcp_tools, tool_name
from agent_core.tools._mcp.content import render_result

__all__ = [
    "ALL_TOOLS",
    "HttpServerConfig",
    "McpServerConfig",
    "StdioServerConfig",
    "open_mcp_tools",
    "parse_mcp_servers",
    "render_result",
    "tool_name",
]
