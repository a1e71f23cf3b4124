"""The model client: one `ChatModel` protocol and its OpenAI-compatible implementation.

Errors: `provider_errors.map_openai_errors` maps the SDK's exceptions (the context window, a
history the provider refused, a 5xx that is a validation error of our request, the SDK's own
retries); see that module.

Provider differences the client absorbs (README §Models):
- `tool_choice` (`ToolChoice`): `auto` or `required` is sent with every request that offers
  tools, `omit` sends none (for providers that reject the field); a request without tools never
  carries it. `ForcedTool(name)` instead sends OpenAI's named-function object
  (`{"type": "function", "function": {"name": ...}}`) with every request that offers that tool
  (llama-cpp-python forces a call only so), and no field with a request that offers other tools
  only: the provider's default, never a demand for a tool the request does not offer.
- Streaming (`ModelStreaming`): `on` streams every request; `off` sends `stream: false` and
  assembles the whole message (`on_delta` hears its text once); `auto` streams, and when a
  request that offered tools gets a stream that ends before any data and without a finish
  (llama-cpp-python answers 200, then raises "Automatic streaming tool choice is not supported"
  and closes), asks again without streaming and sends every later request with tools that way
  for the life of the model (warned once in the log). A stream cut before any data (a transport
  error: a proxy's idle timeout, a reset) is asked again without streaming too, but only two
  such cuts in a row, with no good stream between, make the switch: one cut says nothing of the
  server, and a server that cannot stream tools and drops the connection is caught by the second.
- Usage: a response without `usage` (llama-cpp-python sends none, even with `include_usage`)
  is counted with the runtime's estimates (`agent_core._tokens`) and marked `estimated`; the
  token budget spends the estimate like a count (warned once in the log).

Import cost: `openai` is imported when a model is used, not with `agent_core`, so the
processes that never call a model (the ingress, the scheduler, the CLI) do not pay for it.

Cancellation: `respond` may be cancelled at any point (a stop), streaming or not. The stream is
closed by its context manager (a whole response's request is cancelled inside the SDK, which
closes its connection), and the partial response is discarded: nothing of it is returned or
persisted.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from agent_core._errors import ModelUnavailable
from agent_core._llm.convert import ToolCallAssembler, request_body, tools_json
from agent_core._llm.provider_errors import context_too_long, map_openai_errors, one_line
from agent_core._llm.sse import body_lines, sse_chunks
from agent_core._messages import AssistantMessage, Message, whole_text
from agent_core._tokens import estimate_tokens, message_tokens
from agent_core.tools._base import Toolset

if TYPE_CHECKING:
    import openai

__all__ = [
    "ChatModel",
    "DeltaSink",
    "ForcedTool",
    "ModelResponse",
    "ModelStreaming",
    "OpenAIChatModel",
    "ToolChoice",
    "Usage",
    "context_too_long",
    "map_openai_errors",
]

log = logging.getLogger(__name__)

DeltaSink = Callable[[str], Awaitable[None]]
"""Receives streamed text deltas as they arrive."""

_INCOMPLETE = "the response stream ended before the response was complete"


class ToolChoice(StrEnum):
    """The `tool_choice` sent with a request that offers tools."""

    AUTO = "auto"
    """The model calls tools or answers (OpenAI's default)."""
    REQUIRED = "required"
    """The model must call a tool: an answer comes only once no tool is offered (the wrap-up)."""
    OMIT = "omit"
    """No `tool_choice` field (for providers that reject it)."""


FORCED_TOOL_PREFIX = "function:"
"""How a `ForcedTool` is spelled in the settings: `function:<tool name>`."""


@dataclass(frozen=True, slots=True)
class ForcedTool:
    """A `tool_choice` naming one tool: each request offering it must call it (module docstring)."""

    name: str

    def __post_init__(self) -> None:
        if not self.name or self.name != self.name.strip():
            raise ValueError(
                f"a forced tool needs a tool's name ({FORCED_TOOL_PREFIX}<tool name>), "
                f"got {self.name!r}"
            )

    def __str__(self) -> str:
        return f"{FORCED_TOOL_PREFIX}{self.name}"

    def wire(self) -> dict[str, Any]:
        """The `tool_choice` object sent (OpenAI's named-function form)."""
        return {"type": "function", "function": {"name": self.name}}


class ModelStreaming(StrEnum):
    """How responses are requested (module docstring)."""

    AUTO = "auto"
    """Stream; once a stream with tools ends empty (or is cut twice in a row before any data),
    requests with tools stop streaming."""
    ON = "on"
    """Stream every request."""
    OFF = "off"
    """Never stream: `stream: false`, the whole message at once."""


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one or more model requests."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    estimated: bool = False
    """Some of it is the runtime's estimate: the provider reported no usage."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.estimated or other.estimated,
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


class _EmptyStream(ModelUnavailable):
    """A stream that ended before any data and without a finish."""


class _CutStream(_EmptyStream):
    """A stream cut by a transport error before any data."""


_CUTS_TO_STOP_STREAMING = 2
"""Cuts before any data, in a row, after which `auto` stops streaming requests with tools."""


class OpenAIChatModel:
    """`ChatModel` over any OpenAI-compatible chat-completions endpoint (module docstring)."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        *,
        tool_choice: ToolChoice | ForcedTool = ToolChoice.AUTO,
        streaming: ModelStreaming = ModelStreaming.AUTO,
    ) -> None:
        self._client = client
        self._model = model
        self._tool_choice = tool_choice
        self._streaming = streaming
        self._streams_tools = streaming is not ModelStreaming.OFF
        """False once a stream with tools ended empty (`auto`): such requests stop streaming."""
        self._cuts = 0
        """Streams with tools cut before any data since the last that was not (`auto`)."""
        self._warned_estimate = False

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        """Request one response and assemble it, streamed or whole (module docstring)."""
        fields: dict[str, Any] = {"model": self._model}
        offers_tools = len(toolset) > 0
        if offers_tools:
            if isinstance(self._tool_choice, ForcedTool):
                if toolset.get(self._tool_choice.name) is not None:
                    fields["tool_choice"] = self._tool_choice.wire()
            elif self._tool_choice is not ToolChoice.OMIT:
                fields["tool_choice"] = self._tool_choice.value
        request = _Request(fields, messages, toolset if offers_tools else None)
        if self._streaming is ModelStreaming.OFF or (offers_tools and not self._streams_tools):
            response = await self._complete(request)
            if on_delta is not None and response.message.content:
                await on_delta(response.message.content)
        else:
            try:
                response = await self._stream(request, on_delta)
                self._cuts = 0
            except _EmptyStream as empty:
                if not offers_tools or self._streaming is not ModelStreaming.AUTO:
                    raise
                self._after_empty_stream(cut=isinstance(empty, _CutStream))
                response = await self._complete(request)
                if on_delta is not None and response.message.content:
                    await on_delta(response.message.content)
        return self._counted(response, request)

    def _after_empty_stream(self, *, cut: bool) -> None:
        """Book a stream with tools that gave no data; stop streaming them if it says so."""
        self._cuts = self._cuts + 1 if cut else 0
        if cut and self._cuts < _CUTS_TO_STOP_STREAMING:
            log.warning(
                "model %s: a streamed response with tools was cut before any data; asked again "
                "without streaming (streaming stays on)",
                self._model,
            )
            return
        self._streams_tools = False
        log.warning(
            "model %s: a streamed response with tools %s; requests with tools are sent without "
            "streaming from now on (CHATOPS_MODEL_STREAMING=off skips the first try)",
            self._model,
            f"was cut before any data {self._cuts} times in a row" if cut else "ended empty",
        )

    async def _stream(self, request: _Request, on_delta: DeltaSink | None) -> ModelResponse:
        # The SDK sends our body (auth, base URL, retries, status errors) and hands back the
        # unread response; the body is read as plain JSON (`agent_core._llm.sse`: a pydantic
        # object per chunk was most of the CPU).
        import httpx2

        body = request.body(stream=True, stream_options={"include_usage": True})
        with map_openai_errors():
            http = await self._client.post(
                "/chat/completions",
                cast_to=httpx2.Response,
                content=body,
                options=_CHAT_OPTIONS,
                stream=True,
            )
            try:
                lines = body_lines(http.aiter_bytes())
                async with aclosing(sse_chunks(lines, http.request)) as chunks:
                    return await _assemble(chunks, on_delta)
            finally:
                await http.aclose()

    async def _complete(self, request: _Request) -> ModelResponse:
        from openai.types.chat import ChatCompletion

        with map_openai_errors():
            completion = await self._client.post(
                "/chat/completions",
                cast_to=ChatCompletion,
                content=request.body(stream=False),
                options=_CHAT_OPTIONS,
            )
        if not completion.choices:
            raise ModelUnavailable("the response has no choices")
        message = completion.choices[0].message
        calls = ToolCallAssembler()
        for position, tc in enumerate(message.tool_calls or ()):
            fn = getattr(tc, "function", None)
            calls.feed(
                position,
                id=tc.id,
                name=fn.name if fn else None,
                arguments=fn.arguments if fn else None,
            )
        response_id = completion.id or ""
        assistant = AssistantMessage(
            content=message.content or "", tool_calls=calls.calls(salt=response_id)
        )
        return ModelResponse(assistant, _usage_of(completion.usage), response_id)

    def _counted(self, response: ModelResponse, request: _Request) -> ModelResponse:
        """The response with its usage estimated when the provider reported none."""
        if not response.usage.estimated:
            return response
        if not self._warned_estimate:
            self._warned_estimate = True
            log.warning(
                "model %s reports no token usage: tokens are estimated (the token budget and "
                "the settle records use the estimate)",
                self._model,
            )
        prompt = sum(message_tokens(m) for m in request.messages)
        if request.toolset is not None:
            prompt += estimate_tokens(tools_json(request.toolset).decode())
        completion = message_tokens(response.message)
        usage = Usage(prompt, completion, estimated=True)
        return ModelResponse(response.message, usage, response.response_id)


@dataclass(frozen=True, slots=True)
class _Request:
    """What one `respond` sends: its fields, history and tools (`None`: none offered)."""

    fields: dict[str, Any]
    messages: Sequence[Message]
    toolset: Toolset | None

    def body(self, **more: Any) -> bytes:
        """The JSON body, with `more` fields (`stream`, ...): see `convert.request_body`."""
        return request_body({**self.fields, **more}, self.messages, self.toolset)


_CHAT_OPTIONS: Any = {"security": {"bearer_auth": True}}
"""What the SDK's own `chat.completions.create` asks for: the API key as a bearer token only
(`post`'s default would also offer an admin key taken from the environment)."""

_NO_USAGE = Usage(estimated=True)
"""A placeholder for a response without usage: `_counted` replaces it with the estimate."""


def _usage_of(reported: Any) -> Usage:
    if reported is None:
        return _NO_USAGE
    return Usage(reported.prompt_tokens or 0, reported.completion_tokens or 0)


class _Parts:
    """What a stream's choices have said so far (plain JSON: anything may be any type)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls = ToolCallAssembler()
        self.finished = False
        self.received = False

    def take(self, choice: Any) -> str | None:
        """Book one choice of a chunk; return its text delta, if any."""
        if not isinstance(choice, dict):
            return None
        self.finished = self.finished or choice.get("finish_reason") is not None
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return None
        for tc in _list(delta.get("tool_calls")):
            if not isinstance(tc, dict):
                continue
            fn = tc.get("function")
            fn = fn if isinstance(fn, dict) else {}
            parts = _text(tc.get("id")), _text(fn.get("name")), _text(fn.get("arguments"))
            if parts == (None, None, None):
                continue  # nothing of a call in it (not even an id): not booked as one
            self.received = True
            index = tc.get("index")
            self.calls.feed(
                index if isinstance(index, int) and not isinstance(index, bool) else None,
                id=parts[0],
                name=parts[1],
                arguments=parts[2],
            )
        content = delta.get("content")
        if not isinstance(content, str) or not content:
            return None
        self.received = True
        self.text.append(content)
        return content


async def _assemble(chunks: AsyncIterator[Any], on_delta: DeltaSink | None) -> ModelResponse:
    """One response from its stream's decoded chunks."""
    parts = _Parts()
    usage: Usage = _NO_USAGE
    response_id = ""
    while True:
        try:
            chunk = await anext(chunks)
        except StopAsyncIteration:
            break
        except Exception as exc:
            if not _transport_error(exc):
                raise
            if not parts.received:  # cut before any data: asked again whole (module docstring)
                raise _CutStream(_INCOMPLETE) from exc
            raise ModelUnavailable(one_line(f"the response stream broke: {exc!r}")) from exc
        if not isinstance(chunk, dict):
            continue
        if not response_id and isinstance(chunk_id := chunk.get("id"), str):
            response_id = chunk_id
        if isinstance(reported := chunk.get("usage"), dict):
            usage = _usage_of_wire(reported)
        for choice in _list(chunk.get("choices")):
            if (content := parts.take(choice)) is not None and on_delta is not None:
                await on_delta(whole_text(content))  # as the message will hold it
    if not parts.finished:
        # The connection ended before the provider said the response was complete: what we
        # have is a partial response, and a partial response is never persisted.
        raise ModelUnavailable(_INCOMPLETE) if parts.received else _EmptyStream(_INCOMPLETE)
    calls = parts.calls.calls(salt=response_id)
    message = AssistantMessage(content="".join(parts.text), tool_calls=calls)
    return ModelResponse(message=message, usage=usage, response_id=response_id)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _usage_of_wire(reported: dict[str, Any]) -> Usage:
    """A chunk's `usage` object: token counts that are not whole numbers count as 0."""

    def count(key: str) -> int:
        value = reported.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return Usage(count("prompt_tokens"), count("completion_tokens"))


def _transport_error(exc: BaseException) -> bool:
    """A connection error raised while the stream is read (a server that closed it mid-body).

    Newer SDKs wrap it in `APIConnectionError`; older ones pass `httpx`'s or `httpcore`'s
    through unwrapped.
    """
    import openai

    if isinstance(exc, openai.APIConnectionError):
        return True
    return any(
        cls.__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "httpcore2"}
        for cls in type(exc).__mro__
    )
