"""The model client: one `ChatModel` protocol and its OpenAI-compatible implementation.

Context window: a 400 saying the request exceeds the model's context window becomes
`ContextTooLong`, with the window and the request's size when the provider names them. Read
from `code` (OpenAI's `context_length_exceeded`), `type` (llama.cpp's
`exceed_context_size_error`, with `n_ctx` and `n_prompt_tokens`) or the message (vLLM answers
`code: 400` and says "maximum context length is N tokens. However, you requested M tokens (K in
the messages, …)"; older llama.cpp says "exceeds the available context size").

Retries: the openai SDK already retries connection errors, 408, 409, 429 and 5xx with exponential
backoff (honouring `Retry-After`) and never retries other 4xx; we rely on it (`max_retries`) rather
than layering a second retry loop. A 400 is never retried here: when it is about the history, the
run loop repairs once and retries once (docs/design.md §Platform facts).

Import cost: `openai` is imported when a model is used, not with `agent_core`, so the
processes that never call a model (the ingress, the scheduler, the CLI) do not pay for it.

Cancellation: `respond` may be cancelled at any point (a stop). The stream is closed by its
context manager and the partial response is discarded: nothing of it is returned or persisted.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agent_core._errors import (
    ContextTooLong,
    HistoryRejected,
    ModelError,
    ModelRejected,
    ModelUnavailable,
)
from agent_core._llm.convert import ToolCallAssembler, messages_to_wire, tools_to_wire
from agent_core._messages import AssistantMessage, Message
from agent_core.tools._base import Toolset

if TYPE_CHECKING:
    import openai

__all__ = [
    "ChatModel",
    "DeltaSink",
    "ModelResponse",
    "OpenAIChatModel",
    "Usage",
    "context_too_long",
]

DeltaSink = Callable[[str], Awaitable[None]]
"""Receives streamed text deltas as they arrive."""

# Substrings of the providers' 400 messages about broken tool-call histories (docs/design.md
# §Platform facts): unanswered or duplicate call ids, orphan tool messages, empty ids, Anthropic's
# tool_use blocks.
_HISTORY_MARKERS = ("tool_call", "role 'tool'", "tool_use", "tool_result")
# What OpenAI, vLLM and llama.cpp answer for a request over the context window (module docstring).
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_MARKERS = ("maximum context length", "exceeds the available context size")
_WINDOW = (
    re.compile(r"maximum context length is (\d{1,9}) tokens"),
    re.compile(r"available context size \((\d{1,9}) tokens\)"),
)
_REQUESTED = (
    re.compile(r"resulted in (\d{1,9}) tokens"),
    re.compile(r"(\d{1,9}) in the messages"),
    re.compile(r"request \((\d{1,9}) tokens\)"),
)
_MESSAGE_SCAN_CHARS = 2_000  # a provider's message is read this far, no further
# Statuses the SDK retries itself; when they still fail, the provider is unavailable.
_TRANSIENT = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one or more model requests."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
        )

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One complete model response."""

    message: AssistantMessage
    usage: Usage
    response_id: str


class ChatModel(Protocol):
    """Anything that turns a history into one assistant message."""

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        """Request one response; stream text deltas to `on_delta`."""
        ...


@contextmanager
def map_openai_errors() -> Iterator[None]:
    """Translate openai SDK exceptions into the runtime's `ModelError` tree."""
    import openai  # here, not at the top: the SDK costs a second of CPU to import

    try:
        yield
    except openai.BadRequestError as exc:
        text = str(exc.message)
        body = exc.body if isinstance(exc.body, Mapping) else {}
        said = body.get("message")
        too_long = context_too_long(
            said if isinstance(said, str) else text, code=exc.code, type_=exc.type, body=body
        )
        if too_long is not None:
            raise too_long from exc
        kind = HistoryRejected if any(m in text for m in _HISTORY_MARKERS) else ModelRejected
        raise kind(text, status=exc.status_code) from exc
    except openai.APIStatusError as exc:
        transient = exc.status_code in _TRANSIENT or exc.status_code >= 500
        status_kind: type[ModelError] = ModelUnavailable if transient else ModelRejected
        raise status_kind(str(exc.message), status=exc.status_code) from exc
    except openai.APIError as exc:  # connection errors, timeouts, malformed responses
        raise ModelUnavailable(f"{type(exc).__name__}: {exc}") from exc
    except ValueError as exc:  # a stream chunk that is not valid JSON
        raise ModelUnavailable(f"malformed response stream: {exc}") from exc


def context_too_long(
    message: str, *, code: str | None, type_: str | None, body: Mapping[str, Any]
) -> ContextTooLong | None:
    """The `ContextTooLong` a provider's 400 means, or None when it is about something else.

    Args:
        message: The error's message.
        code: Its `error.code` (OpenAI: `context_length_exceeded`; vLLM: `400`).
        type_: Its `error.type` (llama.cpp: `exceed_context_size_error`).
        body: Its `error` object (llama.cpp adds `n_ctx` and `n_prompt_tokens`).
    """
    text = message[:_MESSAGE_SCAN_CHARS]
    lowered = text.lower()
    if code not in _CONTEXT_CODES and type_ not in _CONTEXT_CODES:
        if not any(marker in lowered for marker in _CONTEXT_MARKERS):
            return None
    window = _first_number(_WINDOW, text, body.get("n_ctx"))
    requested = _first_number(_REQUESTED, text, body.get("n_prompt_tokens"))
    return ContextTooLong(text, status=400, window=window, requested=requested)


def _first_number(patterns: Sequence[re.Pattern[str]], text: str, given: object) -> int | None:
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given
    for pattern in patterns:
        if (found := pattern.search(text)) is not None:
            return int(found.group(1))
    return None


class OpenAIChatModel:
    """`ChatModel` over any OpenAI-compatible chat-completions endpoint, streaming."""

    def __init__(self, client: openai.AsyncOpenAI, model: str) -> None:
        self._client = client
        self._model = model

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        """Stream one response and assemble it."""
        kwargs: dict[str, Any] = {
            "model": self._model,
            "messages": messages_to_wire(messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if len(toolset):
            kwargs["tools"] = tools_to_wire(toolset)
        with map_openai_errors():
            stream = await self._client.chat.completions.create(**kwargs)
            async with stream:
                return await _assemble(stream, on_delta)


async def _assemble(stream: Any, on_delta: DeltaSink | None) -> ModelResponse:
    text: list[str] = []
    calls = ToolCallAssembler()
    usage = Usage()
    response_id = ""
    finished = False
    async for chunk in stream:
        response_id = response_id or chunk.id
        if chunk.usage is not None:
            usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            finished = finished or choice.finish_reason is not None
            delta = choice.delta
            if delta.content:
                text.append(delta.content)
                if on_delta is not None:
                    await on_delta(delta.content)
            for tc in delta.tool_calls or ():
                fn = tc.function
                calls.feed(
                    tc.index,
                    id=tc.id,
                    name=fn.name if fn else None,
                    arguments=fn.arguments if fn else None,
                )
    if not finished:
        # The connection ended before the provider said the response was complete: what we
        # have is a partial response, and a partial response is never persisted.
        raise ModelUnavailable("the response stream ended before the response was complete")
    message = AssistantMessage(content="".join(text), tool_calls=calls.calls(salt=response_id))
    return ModelResponse(message=message, usage=usage, response_id=response_id)
