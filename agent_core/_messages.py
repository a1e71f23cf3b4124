"""The normalized conversation model every part of the runtime speaks.

A session's history is a list of `Message`s. The loop, the tools, history validation and repair,
and the model client all use these types; provider wire dicts exist only inside
`agent_core/_llm/convert.py`.

Messages are frozen pydantic models with a `role` discriminator, so a history round-trips through
JSON (`dump_messages` / `load_messages`) for the Redis store without pickle.

Every text field is whole Unicode: JSON may escape half of a surrogate pair alone, and Python
decodes that to a string no UTF-8 writer accepts (the history store, the model request, a card
would each fail on it). A model's stream, an MCP result or a Prometheus label written by a
stranger can carry one, so a lone surrogate becomes U+FFFD when a message is built; a proper
pair (one character, or its two halves side by side) is kept.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

__all__ = [
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolMessage",
    "ToolStatus",
    "UserKind",
    "UserMessage",
    "dump_message",
    "dump_messages",
    "load_message",
    "load_messages",
    "whole_text",
]


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def whole_text(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (module docstring).

    Two halves that make a pair (each escaped in its own stream chunk, say) become the one
    character they stand for.
    """
    if text.isascii() or _LONE_SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


Text = Annotated[str, AfterValidator(whole_text)]
"""A message's text: whole Unicode, writable as UTF-8 (module docstring)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One function call requested by the model."""

    id: Text
    """Provider-assigned call id; unique within a session's history."""
    name: Text
    """Name of the tool the model wants to run."""
    arguments: Text = "{}"
    """Raw JSON arguments exactly as the model produced them (may be invalid JSON)."""


class SystemMessage(_Frozen):
    """Instructions for the model."""

    role: Literal["system"] = "system"
    content: Text


class UserKind(StrEnum):
    """Why a user message entered the history."""

    TASK = "task"
    """The request that started an analysis."""
    STEER = "steer"
    """A correction sent while an analysis was running; the original task still stands."""
    NOTICE = "notice"
    """Anything else a person or the system adds between turns."""
    CONTEXT = "context"
    """The thread's earlier messages, quoted as untrusted data, before the task that starts an
    analysis; kept verbatim like the task."""


class UserMessage(_Frozen):
    """Input from a person (or the system speaking for one)."""

    role: Literal["user"] = "user"
    content: Text
    author: Text | None = None
    """Display name of the person who wrote it, when known."""
    kind: UserKind = UserKind.TASK


class AssistantMessage(_Frozen):
    """One complete model response: text, tool calls, or both."""

    role: Literal["assistant"] = "assistant"
    content: Text = ""
    tool_calls: tuple[ToolCall, ...] = ()


class ToolStatus(StrEnum):
    """How a tool call ended, as recorded in its result."""

    OK = "ok"
    """The tool ran and returned a result."""
    ERROR = "error"
    """The tool failed, timed out, was refused or was called with bad arguments."""
    INTERRUPTED = "interrupted"
    """A stop or a steer cancelled the call before it finished."""
    SYNTHETIC = "synthetic"
    """Not produced by the tool: written by history repair to close a dangling call."""


class ToolMessage(_Frozen):
    """The answer to exactly one `ToolCall`."""

    role: Literal["tool"] = "tool"
    call_id: Text
    name: Text
    content: Text
    status: ToolStatus = ToolStatus.OK


Message = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]
"""Any message of a session's history."""

_MESSAGE = TypeAdapter[Message](Message)
_MESSAGES = TypeAdapter(list[Message])


def dump_message(message: Message) -> str:
    """Serialize one message to JSON."""
    return _MESSAGE.dump_json(message).decode()


def load_message(raw: str | bytes) -> Message:
    """Parse one message from JSON."""
    return _MESSAGE.validate_json(raw)


def dump_messages(messages: list[Message]) -> str:
    """Serialize a history to a JSON array."""
    return _MESSAGES.dump_json(messages).decode()


def load_messages(raw: str | bytes) -> list[Message]:
    """Parse a history from a JSON array."""
    return _MESSAGES.validate_json(raw)
