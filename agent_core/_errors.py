"""Errors raised by the runtime.

```
AgentError
├── ConfigError            bad construction arguments; raised before any side effect
├── HistoryError           a history breaks a provider rule (index, call ids)
├── StoreError             the state store (Redis) failed or refused a write
├── ModelError             the model request failed
│   ├── ModelUnavailable   network errors, 429/5xx after the client's own retries
│   ├── ModelRejected      a 400 that is not about the history: never retried
│   │   └── ContextTooLong the request exceeds the model's context window: compacted once more
│   └── HistoryRejected    a 400 about the history: repaired once, then the turn fails
└── ToolFailed             model-facing: becomes an error tool result, never ends the run
```

`ToolFailed` is the only one a tool raises on purpose; the loop turns it into a tool message the
model reads. Every other error ends the turn as `Failed` with its message.
"""

from __future__ import annotations

__all__ = [
    "AgentError",
    "ConfigError",
    "ContextTooLong",
    "HistoryError",
    "HistoryRejected",
    "ModelError",
    "ModelRejected",
    "ModelUnavailable",
    "StoreError",
    "ToolFailed",
]


class AgentError(Exception):
    """Base of every error the runtime raises."""


class ConfigError(AgentError):
    """Invalid configuration, detected at construction."""


class HistoryError(AgentError):
    """A history that a strict provider would reject.

    Attributes:
        index: Position of the offending message.
        call_ids: The tool call ids involved, if any.
    """

    def __init__(self, message: str, *, index: int, call_ids: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.index = index
        self.call_ids = call_ids


class StoreError(AgentError):
    """The state store failed, or rejected a write (for example a fenced one)."""


class ModelError(AgentError):
    """A model request failed.

    Attributes:
        status: HTTP status from the provider, when there was a response.
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ModelUnavailable(ModelError):
    """The provider could not be reached or kept failing after retries."""


class ModelRejected(ModelError):
    """The provider refused the request (4xx) for a reason other than the history."""


class ContextTooLong(ModelRejected):
    """The request does not fit the model's context window (OpenAI's `context_length_exceeded`).

    The run loop compacts what it sends harder and retries once; a second one fails the turn.

    Attributes:
        window: The context window the provider named, in its tokens, when it named one.
        requested: The tokens the provider counted in the request's messages, when it said.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        window: int | None = None,
        requested: int | None = None,
    ) -> None:
        super().__init__(message, status=status)
        self.window = window
        self.requested = requested


class HistoryRejected(ModelError):
    """The provider refused the history itself (a dangling, orphan or duplicate tool call)."""


class ToolFailed(AgentError):
    """Raised by a tool to report a failure the model should see as the tool's result.

    Attributes:
        retryable: The failure is transient (a refused connection, say): the batch may run the
            call again, if the tool is idempotent and its `RetryPolicy` allows more attempts.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
