"""Tools the model may call: their risk, schema, and how each may be interrupted or retried."""

from agent_core.tools._base import (
    Interruptibility,
    RetryPolicy,
    Risk,
    Tool,
    ToolContext,
    ToolHandler,
    Toolset,
)
from agent_core.tools._http_get import HostAllowlist, http_get_tool

__all__ = [
    "HostAllowlist",
    "Interruptibility",
    "RetryPolicy",
    "Risk",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "Toolset",
    "http_get_tool",
]
