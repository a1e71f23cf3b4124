"""Run events: what the runtime observes while a turn runs.

Every event carries parts (text, function call, function response) and a `partial` flag. Streaming
deltas are partial; a complete model response or a finished tool call is final. The balance ledger
counts only final events (see `agent_core._ledger`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import StrEnum

from agent_core._messages import ToolCall, ToolMessage

__all__ = [
    "EventSource",
    "FunctionCallPart",
    "FunctionResponsePart",
    "Part",
    "RunEvent",
    "TextPart",
]


class EventSource(StrEnum):
    """Who produced an event."""

    MODEL = "model"
    """The model stream (deltas and the assembled response)."""
    TOOL = "tool"
    """A tool call that finished (or was interrupted, refused or timed out)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TextPart:
    """Model text (a delta when the event is partial)."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionCallPart:
    """A complete function call requested by the model."""

    call: ToolCall


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionResponsePart:
    """The answer to one function call."""

    response: ToolMessage


Part = TextPart | FunctionCallPart | FunctionResponsePart


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEvent:
    """One observation of a running turn."""

    source: EventSource
    parts: tuple[Part, ...]
    partial: bool = False
    """True for streaming deltas; they never move the balance."""
    id: str = field(default_factory=lambda: f"ev-{uuid.uuid4().hex}")
    """Globally unique id; the final answer's id goes into the durable settle record."""

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """The function calls this event carries."""
        return tuple(p.call for p in self.parts if isinstance(p, FunctionCallPart))

    @property
    def responses(self) -> tuple[ToolMessage, ...]:
        """The function responses this event carries."""
        return tuple(p.response for p in self.parts if isinstance(p, FunctionResponsePart))
