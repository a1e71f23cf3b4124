"""The balance-gated agent runtime, free of any chat platform.

Run a turn with `Runtime.run(TurnRequest(...))`; stop, steer or drain it from anywhere with
`ControlPlane`; read how it ended from the returned `RunOutcome`.
"""

from agent_core._approvals import Approval
from agent_core._approvals import Verdict as ApprovalVerdict
from agent_core._bells import BellHub
from agent_core._budget import Budget
from agent_core._diagnostics import RunDiagnostics, RunOutcome, SettleRecord
from agent_core._errors import (
    AgentError,
    ConfigError,
    ContextTooLong,
    HistoryError,
    HistoryRejected,
    ModelError,
    ModelRejected,
    ModelUnavailable,
    StoreError,
    ToolFailed,
)
from agent_core._events import EventSource, RunEvent
from agent_core._history import is_closed, validate_history
from agent_core._intent_check import IntentCheck
from agent_core._interrupts import (
    PRIORITY,
    TOMBSTONE_TTL_S,
    WATCH_BLOCK_S,
    ControlPlane,
    Signal,
    TurnSignals,
    checkpoint,
    until_set,
)
from agent_core._keys import Keys, SessionKey
from agent_core._ledger import BalanceLedger
from agent_core._llm import (
    ChatModel,
    ForcedTool,
    ModelResponse,
    ModelStreaming,
    OpenAIChatModel,
    ToolChoice,
    Usage,
    openai_http_client,
)
from agent_core._llm.client import DeltaSink
from agent_core._loop import EventSink, LoopLimits, Runtime, TurnRequest
from agent_core._lua import register_lua
from agent_core._mcp_servers import open_mcp_tools, parse_mcp_servers
from agent_core._messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserKind,
    UserMessage,
    dump_message,
    load_message,
)
from agent_core._outcome import (
    Awaiting,
    Cancelled,
    Completed,
    Dispatched,
    Drained,
    Failed,
    RunResult,
    SettleReason,
    Steered,
    Stopped,
)
from agent_core._redaction import redact
from agent_core._repair import RepairReport, repair_history
from agent_core._step_labels import step_numbers
from agent_core._store import TURN_KEY_TTL_S, Fence, HistoryStore, map_redis_errors
from agent_core._tokens import estimate_tokens
from agent_core._untrusted import QuoteKind, aquote_untrusted, neutralise_markers
from agent_core.tools import (
    READ_RUNBOOK,
    SEARCH_RUNBOOKS,
    HostAllowlist,
    Interruptibility,
    RetryPolicy,
    Risk,
    RunbookLibrary,
    RunbookLimits,
    Tool,
    ToolContext,
    Toolset,
    http_get_tool,
    runbook_tools,
)
from agent_core.tools._bounded_body import BodyLimit
from agent_core.tools._connections import ConnectionSlots
from agent_core.tools._http_probe import http_probe_tool
from agent_core.tools._hygiene import guarded
from agent_core.tools._prometheus import prometheus_tool
from agent_core.tools._shell import MAX_OUTPUT_BYTES as SHELL_MAX_OUTPUT_BYTES
from agent_core.tools._shell import CommandAllowlist, ShellProfiles, shell_tool
from agent_core.tools._subagents import ANSWER_CHILD, ASK_PARENT, DISPATCH, subagent_tools

__all__ = [
    "open_mcp_tools",
    "openai_http_client",
    "parse_mcp_servers",
    "ANSWER_CHILD",
    "ASK_PARENT",
    "DISPATCH",
    "SessionKey",
    "WATCH_BLOCK_S",
    "BellHub",
    "register_lua",
    "ApprovalVerdict",
    "SHELL_MAX_OUTPUT_BYTES",
    "Approval",
    "BodyLimit",
    "Budget",
    "CommandAllowlist",
    "DeltaSink",
    "EventSource",
    "QuoteKind",
    "ShellProfiles",
    "TOMBSTONE_TTL_S",
    "TURN_KEY_TTL_S",
    "aquote_untrusted",
    "checkpoint",
    "guarded",
    "http_probe_tool",
    "map_redis_errors",
    "neutralise_markers",
    "prometheus_tool",
    "READ_RUNBOOK",
    "RunbookLibrary",
    "RunbookLimits",
    "SEARCH_RUNBOOKS",
    "runbook_tools",
    "redact",
    "shell_tool",
    "subagent_tools",
    "until_set",
    "PRIORITY",
    "AgentError",
    "AssistantMessage",
    "Awaiting",
    "BalanceLedger",
    "Cancelled",
    "ChatModel",
    "Completed",
    "ConfigError",
    "ConnectionSlots",
    "ContextTooLong",
    "ControlPlane",
    "Dispatched",
    "Drained",
    "EventSink",
    "Failed",
    "HistoryError",
    "HistoryRejected",
    "Fence",
    "ForcedTool",
    "HistoryStore",
    "HostAllowlist",
    "IntentCheck",
    "Interruptibility",
    "Keys",
    "LoopLimits",
    "Message",
    "ModelError",
    "ModelRejected",
    "ModelResponse",
    "ModelStreaming",
    "ModelUnavailable",
    "OpenAIChatModel",
    "RepairReport",
    "RetryPolicy",
    "Risk",
    "RunDiagnostics",
    "RunEvent",
    "RunOutcome",
    "RunResult",
    "Runtime",
    "SettleReason",
    "SettleRecord",
    "Signal",
    "Steered",
    "Stopped",
    "StoreError",
    "SystemMessage",
    "Tool",
    "ToolCall",
    "ToolChoice",
    "ToolContext",
    "ToolFailed",
    "ToolMessage",
    "ToolStatus",
    "Toolset",
    "TurnRequest",
    "TurnSignals",
    "Usage",
    "UserKind",
    "UserMessage",
    "dump_message",
    "estimate_tokens",
    "http_get_tool",
    "is_closed",
    "load_message",
    "repair_history",
    "step_numbers",
    "validate_history",
]
