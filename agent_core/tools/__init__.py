"""Tools the model may call, and how each may be interrupted."""

from agent_core.tools.base import Interruptibility, Tool, ToolContext, ToolHandler, Toolset
from agent_core.tools.http_get import HostAllowlist, http_get_tool

__all__ = [
    "HostAllowlist",
    "Interruptibility",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "Toolset",
    "http_get_tool",
]
