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
from agent_core.tools._runbooks import (
    READ_RUNBOOK,
    SEARCH_RUNBOOKS,
    RunbookLibrary,
    RunbookLimits,
    runbook_tools,
)

__all__ = [
    "READ_RUNBOOK",
    "SEARCH_RUNBOOKS",
    "HostAllowlist",
    "Interruptibility",
    "RetryPolicy",
    "Risk",
    "RunbookLibrary",
    "RunbookLimits",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "Toolset",
    "http_get_tool",
    "runbook_tools",
]
