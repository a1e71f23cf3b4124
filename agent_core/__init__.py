"""The balance-gated agent runtime, free of any chat platform.

Run a turn with `Runtime.run(TurnRequest(...))`; stop, steer or drain it from anywhere with
`ControlPlane`; read how it ended from the returned `RunOutcome`.
"""

from agent_core.diagnostics import RunDiagnostics, RunOutcome, SettleRecord
from agent_core.errors import (
    AgentError,
    ConfigError,
    HistoryError,
    HistoryRejected,
    ModelError,
    ModelRejected,
    ModelUnavailable,
    StoreError,
    ToolFailed,
)
from agent_core.events import RunEvent
from agent_core.history import is_closed, validate_history
from agent_core.interrupts import PRIORITY, ControlPlane, Signal, TurnSignals
from agent_core.keys import Keys
from agent_core.ledger import BalanceLedger
from agent_core.llm import ChatModel, ModelResponse, OpenAIChatModel, Usage
from agent_core.loop import EventSink, LoopLimits, Runtime, TurnRequest
from agent_core.messages import (
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
from agent_core.outcome import (
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
from agent_core.repair import RepairReport, repair_history
from agent_core.store import Fence, HistoryStore
from agent_core.tools import (
    HostAllowlist,
    Interruptibility,
    RetryPolicy,
    Risk,
    Tool,
    ToolContext,
    Toolset,
    http_get_tool,
)

__all__ = [
    "PRIORITY",
    "AgentError",
    "AssistantMessage",
    "Awaiting",
    "BalanceLedger",
    "Cancelled",
    "ChatModel",
    "Completed",
    "ConfigError",
    "ControlPlane",
    "Dispatched",
    "Drained",
    "EventSink",
    "Failed",
    "HistoryError",
    "HistoryRejected",
    "Fence",
    "HistoryStore",
    "HostAllowlist",
    "Interruptibility",
    "Keys",
    "LoopLimits",
    "Message",
    "ModelError",
    "ModelRejected",
    "ModelResponse",
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
    "http_get_tool",
    "is_closed",
    "load_message",
    "repair_history",
    "validate_history",
]
