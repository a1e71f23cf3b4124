"""What a tool is: a name, a schema, a handler, its risk, and how it may be interrupted or retried.

Limits come from configuration only. A tool's timeout, retry policy, risk and idempotence are
fixed when the `Tool` is built (from code or settings); nothing in a call's arguments or in chat
text can change them: the batch reads them from the `Tool`, never from the call.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from agent_core._errors import ConfigError
from agent_core.tools._schema import ArgumentSchema

__all__ = [
    "MAX_ATTEMPTS",
    "Interruptibility",
    "RetryPolicy",
    "Risk",
    "Tool",
    "ToolContext",
    "ToolHandler",
    "Toolset",
]

MAX_ATTEMPTS = 3
"""No policy may run a call more than this many times: a flapping backend gets three tries."""


class Interruptibility(StrEnum):
    """What a stop (or a steer) may do to a call that is already running."""

    ABORTABLE = "abortable"
    """Cancelled at once; answers "interrupted". Right for reads and probes."""
    MUST_COMPLETE = "must_complete"
    """Always runs to its end (or its timeout): stopping it halfway would be worse."""


class Risk(StrEnum):
    """What running a tool may do to the world."""

    READ_ONLY = "read_only"
    """Only reads (a probe, a query); running it twice changes nothing."""
    SIDE_EFFECT = "side_effect"
    """Changes something recoverable (posts a message, scales a deployment)."""
    DESTRUCTIVE = "destructive"
    """Changes something hard to undo (deletes, restarts, rolls back)."""


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How often a failed call is tried again, and how long to wait in between.

    Only an idempotent tool may have more than one attempt, and only a retryable failure
    (`ToolFailed(retryable=True)`, or a timeout) is retried. The wait before attempt n+1 is
    drawn uniformly from [0, min(max_delay_s, base_delay_s * 2**(n-1))]: exponential backoff with
    full jitter, so parallel calls failing together do not retry in lockstep.
    """

    attempts: int = 1
    """Total tries, the first one included: 1 (the default) never retries; at most 3."""
    base_delay_s: float = 0.5
    """The backoff cap before the second attempt; it doubles for each attempt after that."""
    max_delay_s: float = 4.0
    """No wait is longer than this."""

    def __post_init__(self) -> None:
        if not 1 <= self.attempts <= MAX_ATTEMPTS:
            raise ConfigError(f"retry attempts must be 1 to {MAX_ATTEMPTS}, not {self.attempts}")
        if not 0 <= self.base_delay_s <= self.max_delay_s:
            raise ConfigError(
                f"retry delays need 0 <= base_delay_s ({self.base_delay_s:g})"
                f" <= max_delay_s ({self.max_delay_s:g})"
            )

    def delay_s(self, failed_attempt: int, draw: Callable[[], float] = random.random) -> float:
        """The wait after attempt `failed_attempt` (1-based) failed; `draw` returns [0, 1)."""
        cap = min(self.max_delay_s, self.base_delay_s * 2.0 ** (failed_attempt - 1))
        return cap * draw()


NO_RETRY = RetryPolicy()
"""One attempt: the default for every tool."""


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

    @property
    def call_id(self) -> str:
        """The call being run: the same when a resumed batch runs it again ("" outside one)."""
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
    """A tool the model may call.

    Raises:
        ConfigError: More than one attempt for a tool that is not idempotent.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    """JSON schema of the arguments object."""
    handler: ToolHandler
    interruptibility: Interruptibility = Interruptibility.ABORTABLE
    timeout_s: float = 30.0
    """An attempt still running after this long fails with a timeout (retryable)."""
    risk: Risk = Risk.READ_ONLY
    """What a call may change; read-only unless declared otherwise."""
    idempotent: bool | None = None
    """Running the call twice has the effect of running it once. `None` (the default) resolves
    at construction to True for a read-only tool and False otherwise; never `None` afterwards."""
    retry: RetryPolicy = NO_RETRY
    """How a retryable failure is retried; one attempt unless the tool is idempotent."""

    def __post_init__(self) -> None:
        if self.idempotent is None:
            object.__setattr__(self, "idempotent", self.risk is Risk.READ_ONLY)
        if self.retry.attempts > 1 and not self.idempotent:
            raise ConfigError(
                f"tool {self.name!r} is not idempotent: it may not retry"
                f" ({self.retry.attempts} attempts)"
            )
        if self.timeout_s <= 0:
            raise ConfigError(f"tool {self.name!r} needs a positive timeout_s")

    @property
    def interruptible(self) -> bool:
        """True when a stop or a steer may cancel a running call."""
        return self.interruptibility is Interruptibility.ABORTABLE


@dataclass(frozen=True)
class Toolset:
    """The tools offered to the model for one turn, by name.

    Each tool's argument schema is compiled here, once; an invalid schema is a `ConfigError`.
    """

    tools: Mapping[str, Tool] = field(default_factory=dict)
    _schemas: Mapping[str, ArgumentSchema] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        schemas = {name: ArgumentSchema(name, tool.parameters) for name, tool in self.tools.items()}
        object.__setattr__(self, "_schemas", schemas)

    @classmethod
    def of(cls, tools: Iterable[Tool]) -> Toolset:
        """Build a toolset; tool names must be unique."""
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in by_name:
                raise ConfigError(f"two tools are named {tool.name!r}")
            by_name[tool.name] = tool
        return cls(by_name)

    def only(self, names: Iterable[str]) -> Toolset:
        """The tools of this set whose names are in `names`, their compiled schemas shared.

        A turn that names its tools calls this once per turn: compiling each schema again
        (checked against the metaschema) was 6% of a worker's CPU (bench/load.py).
        """
        wanted = set(names)
        subset = Toolset.__new__(Toolset)
        object.__setattr__(
            subset, "tools", {n: tool for n, tool in self.tools.items() if n in wanted}
        )
        object.__setattr__(
            subset, "_schemas", {n: s for n, s in self._schemas.items() if n in wanted}
        )
        return subset

    def get(self, name: str) -> Tool | None:
        """Return the tool called `name`, if offered."""
        return self.tools.get(name)

    def check_arguments(self, name: str, args: Mapping[str, Any]) -> None:
        """Raise `ToolFailed` naming the failing fields when `args` break `name`'s schema."""
        self._schemas[name].check(args)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools.values())

    def __len__(self) -> int:
        return len(self.tools)
