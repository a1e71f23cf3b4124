"""What a tool is: a name, a JSON schema, an async handler, and how it may be interrupted."""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agent_core.errors import ConfigError

__all__ = ["Interruptibility", "Tool", "ToolContext", "ToolHandler", "Toolset"]


class Interruptibility(StrEnum):
    """What a stop (or a steer) may do to a call that is already running."""

    ABORTABLE = "abortable"
    """Cancelled at once; answers "interrupted". Right for reads and probes."""
    MUST_COMPLETE = "must_complete"
    """Always runs to its end (or its timeout): stopping it halfway would be worse."""


class ToolContext(Protocol):
    """What a running tool may ask of the turn that called it."""

    @property
    def session_id(self) -> str:
        """The session the call belongs to."""
        ...

    @property
    def turn_id(self) -> str:
        """The turn the call belongs to."""
        ...

    def raise_dispatch(self) -> None:
        """Ask the turn to end at the next cut because work was handed to sub-agents."""
        ...

    def raise_await(self) -> None:
        """Ask the turn to end at the next cut to wait for an answer from the parent."""
        ...


ToolHandler = Callable[[Mapping[str, Any], ToolContext], Coroutine[Any, Any, str]]
"""Runs one call with validated arguments; returns the text the model sees."""


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A tool the model may call."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON schema of the arguments object."""
    handler: ToolHandler
    interruptibility: Interruptibility = Interruptibility.ABORTABLE
    timeout_s: float = 30.0
    """A call still running after this long answers with a timeout error."""

    @property
    def interruptible(self) -> bool:
        """True when a stop or a steer may cancel a running call."""
        return self.interruptibility is Interruptibility.ABORTABLE


@dataclass(frozen=True)
class Toolset:
    """The tools offered to the model for one turn, by name."""

    tools: Mapping[str, Tool] = field(default_factory=dict)

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> Toolset:
        """Build a toolset; tool names must be unique."""
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in by_name:
                raise ConfigError(f"two tools are named {tool.name!r}")
            by_name[tool.name] = tool
        return cls(by_name)

    def get(self, name: str) -> Tool | None:
        """Return the tool called `name`, if offered."""
        return self.tools.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)
