"""A protocol-faithful OpenAI-compatible chat completions server for tests.

Tests point the real ``openai.AsyncOpenAI(base_url=fake.base_url, api_key="test")`` client at
a Starlette app served by uvicorn on a loopback port, so everything from request building to
SSE parsing, retries and stream cancellation runs the SDK's own code. Only the model is fake.

Contract:

* Every request's ``messages`` is checked with the strictest provider rules (docs/design.md
  §Invariants I1, §Platform facts) before anything else. A broken history gets the real OpenAI 400
  error body (wording and ``param`` copied from real API responses quoted in public issue threads),
  is recorded, and does not consume a scripted reply.
* Otherwise the next scripted reply is consumed FIFO, one per request. When the script is
  empty the answer is a 500 that says so, with ``x-should-retry: false`` so the SDK does not
  retry it: a test that makes an unexpected request fails at once and loudly.
* Or, with a responder set (:meth:`FakeProvider.respond_with`), the reply is whatever the
  responder decides from the request's (valid) ``messages``: for many interleaved
  conversations whose requests may be repeated (a worker killed mid-stream asks again), where a
  global FIFO script cannot know which conversation comes next. A responder that raises gets
  the same non-retried 500, with its error.
* With a context window set (:meth:`FakeProvider.set_context_window`), a valid request that
  counts more tokens than the window gets OpenAI's exact ``context_length_exceeded`` 400
  (``bot.demo.openai_rules.check_context``: the fake counts tokens its own way, not with
  chatops's estimator) and consumes no reply; one within it is answered with its counted size
  as ``usage.prompt_tokens``, as a real provider reports it. Every request's count is recorded.
* Streams use the real wire format: blank-line separated ``data: {json}`` events of
  ``chat.completion.chunk`` objects; tool calls as one header delta per call followed by
  argument fragments; a final empty delta with ``finish_reason``; an optional usage chunk;
  then ``data: [DONE]``.

Example:
    >>> fake.script(
    ...     ToolCallsReply([ToolCall("get_logs", {"service": "api"})]),
    ...     TextReply("The api pods are crash-looping."),
    ... )
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import secrets
import string
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from bot.demo.openai_rules import (
    CONTEXT_LENGTH_EXCEEDED,
    DUPLICATE_CALL_ID,
    ORPHAN_TOOL_MESSAGE,
    UNANSWERED_CALLS,
    check_context,
    check_history,
    check_request,
    count_prompt_tokens,
    error_body,
)
from tests.fakes.loopback_server import LoopbackServer

__all__ = [
    "CONTEXT_LENGTH_EXCEEDED",
    "DUPLICATE_CALL_ID",
    "EXHAUSTED",
    "ORPHAN_TOOL_MESSAGE",
    "UNANSWERED_CALLS",
    "ErrorReply",
    "FakeProvider",
    "RecordedRequest",
    "Reply",
    "Responder",
    "TextReply",
    "ToolCall",
    "ToolCallsReply",
    "check_history",
    "check_request",
    "count_prompt_tokens",
    "fake_llm",
]

_ALNUM = string.ascii_letters + string.digits
_FINGERPRINT = "fp_f4ke0penai"
_STALL_POLL_S = 0.005
_WAIT_S = 5.0

EXHAUSTED = "FakeProvider script is exhausted: no reply was scripted for request #{n}."
"""Message of the 500 served when a request arrives and the script is empty."""

RESPONDER_FAILED = "FakeProvider responder failed on request #{n}: {error}"
"""Message of the 500 served when the responder raised."""


def _random_id(prefix: str, length: int) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(length))


# --- Scripted replies ------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Knobs:
    """Delivery knobs shared by the successful reply kinds."""

    chunk_delay: float = 0.0
    """Seconds to wait before each SSE chunk after the first."""
    stall_after: int | None = None
    """Stop after this many chunks (0: before any) and hold the response open.

    A non-streamed reply is one chunk, so only 0 matters there: the status line and headers
    go out and the body is held, which the client sees as a read timeout.
    """
    release: threading.Event | None = None
    """When set, a stalled response resumes; otherwise it is held until the client leaves."""
    cut_after: int | None = None
    """End the body cleanly after this many chunks, as a dropped upstream connection does:
    no ``finish_reason``, no ``[DONE]``."""
    prompt_tokens: int = 10
    """Reported ``usage.prompt_tokens``."""
    completion_tokens: int = 5
    """Reported ``usage.completion_tokens``."""


@dataclass(frozen=True, kw_only=True)
class TextReply(_Knobs):
    """An assistant text answer, streamed as several small content deltas."""

    text: str = field(kw_only=False)
    """The assistant message content."""


@dataclass(frozen=True)
class ToolCall:
    """One function call inside a :class:`ToolCallsReply`."""

    name: str
    """Function name."""
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    """A dict (sent as compact JSON) or a raw string, which may be invalid JSON on purpose."""
    id: str | None = None
    """Explicit call id (duplicates and ``""`` allowed); default ``call_`` + 24 alphanumerics."""

    def arguments_json(self) -> str:
        """Return the arguments string exactly as the model would emit it."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclass(frozen=True, kw_only=True)
class ToolCallsReply(_Knobs):
    """One or more parallel function calls, optionally after some assistant text."""

    calls: Sequence[ToolCall] = field(kw_only=False)
    """The calls, in index order."""
    text: str = ""
    """Content streamed before the calls (the "text, then call" shape)."""
    text_after: str = ""
    """Content streamed after the calls: OpenAI never does this, some compatible servers do."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "calls", tuple(self.calls))


@dataclass(frozen=True, kw_only=True)
class ErrorReply:
    """An HTTP error answer in OpenAI's error JSON shape.

    Use it for 429/500/503 faults, or for a 400 with any message, e.g. Anthropic's stricter
    "`tool_use` ids were found without `tool_result` blocks immediately after: ...".
    """

    status: int = field(kw_only=False)
    """HTTP status code."""
    message: str = field(kw_only=False)
    """``error.message``."""
    type: str | None = None
    """``error.type``; derived from the status when None."""
    param: str | None = None
    """``error.param``."""
    code: str | None = None
    """``error.code``; ``rate_limit_exceeded`` for a 429 when None."""
    retry_after: str | None = None
    """Value of the ``retry-after`` header (seconds; the SDK honours 0 < value <= 120)."""
    headers: Mapping[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. ``{"x-should-retry": "false"}``."""

    def body(self) -> dict[str, Any]:
        """Return the JSON error body."""
        return error_body(self.message, self._type(), self.param, self._code())

    def response_headers(self) -> dict[str, str]:
        """Return the headers to send with the error."""
        extra = {"retry-after": self.retry_after} if self.retry_after is not None else {}
        return {**extra, **self.headers}

    def _type(self) -> str:
        if self.type is not None:
            return self.type
        if self.status == 429:
            return "requests"
        return "server_error" if self.status >= 500 else "invalid_request_error"

    def _code(self) -> str | None:
        if self.code is None and self.status == 429:
            return "rate_limit_exceeded"
        return self.code


Reply = TextReply | ToolCallsReply | ErrorReply
"""Anything :meth:`FakeProvider.script` accepts."""

Responder = Callable[[list[dict[str, Any]]], Reply]
"""Decides the reply to one valid request from its ``messages``; see ``respond_with``."""


def _status_of(reply: Reply | None) -> int:
    """The HTTP status a reply is served with (None: the exhausted script's 500)."""
    if reply is None:
        return 500
    return reply.status if isinstance(reply, ErrorReply) else 200


# --- Wire format -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Meta:
    id: str
    created: int
    model: str


def _text_pieces(text: str) -> list[str]:
    """Split like a tokenizer would: words with their leading whitespace."""
    return re.findall(r"\s*\S+|\s+$", text)


def _argument_fragments(arguments: str) -> list[str]:
    """Split an arguments string into at least two fragments when it has 2+ characters."""
    size = min(8, max(1, math.ceil(len(arguments) / 2)))
    return [arguments[k : k + size] for k in range(0, len(arguments), size)]


def _call_ids(reply: ToolCallsReply) -> list[str]:
    return [call.id if call.id is not None else _random_id("call_", 24) for call in reply.calls]


def _stream_deltas(
    reply: TextReply | ToolCallsReply, call_ids: Sequence[str]
) -> list[dict[str, Any]]:
    opening: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
    deltas: list[dict[str, Any]] = [opening] if reply.text or isinstance(reply, TextReply) else []
    deltas += [{"content": piece} for piece in _text_pieces(reply.text)]
    calls = reply.calls if isinstance(reply, ToolCallsReply) else ()
    for i, (call, call_id) in enumerate(zip(calls, call_ids, strict=True)):
        function = {"name": call.name, "arguments": ""}
        header = {"index": i, "id": call_id, "type": "function", "function": function}
        # The real API puts role and the first call header in the same (first) delta.
        first = {"role": "assistant", "content": None, "refusal": None} if not deltas else {}
        deltas.append({**first, "tool_calls": [header]})
        deltas += [
            {"tool_calls": [{"index": i, "function": {"arguments": fragment}}]}
            for fragment in _argument_fragments(call.arguments_json())
        ]
    trailing = reply.text_after if isinstance(reply, ToolCallsReply) else ""
    return deltas + [{"content": piece} for piece in _text_pieces(trailing)]


def _usage(reply: TextReply | ToolCallsReply) -> dict[str, Any]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def _finish_reason(reply: TextReply | ToolCallsReply) -> str:
    return "tool_calls" if isinstance(reply, ToolCallsReply) else "stop"


def _sse_events(
    reply: TextReply | ToolCallsReply, meta: _Meta, call_ids: Sequence[str], include_usage: bool
) -> list[bytes]:
    def chunk(choices: list[dict[str, Any]], usage: dict[str, Any] | None = None) -> dict[str, Any]:
        extra = {"usage": usage} if include_usage else {}
        return {
            "id": meta.id,
            "object": "chat.completion.chunk",
            "created": meta.created,
            "model": meta.model,
            "system_fingerprint": _FINGERPRINT,
            "choices": choices,
            **extra,
        }

    def choice(delta: dict[str, Any], finish_reason: str | None = None) -> list[dict[str, Any]]:
        return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]

    chunks = [chunk(choice(delta)) for delta in _stream_deltas(reply, call_ids)]
    chunks.append(chunk(choice({}, _finish_reason(reply))))
    if include_usage:
        chunks.append(chunk([], _usage(reply)))
    events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
    return [*events, b"data: [DONE]\n\n"]


def _completion(
    reply: TextReply | ToolCallsReply, meta: _Meta, call_ids: Sequence[str]
) -> dict[str, Any]:
    trailing = reply.text_after if isinstance(reply, ToolCallsReply) else ""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text + trailing or None,
        "refusal": None,
        "annotations": [],
    }
    if isinstance(reply, ToolCallsReply):
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json()},
            }
            for call, call_id in zip(reply.calls, call_ids, strict=True)
        ]
    choice = {"index": 0, "message": message, "logprobs": None}
    return {
        "id": meta.id,
        "object": "chat.completion",
        "created": meta.created,
        "model": meta.model,
        "system_fingerprint": _FINGERPRINT,
        "choices": [{**choice, "finish_reason": _finish_reason(reply)}],
        "usage": _usage(reply),
    }


# --- Recording and serving -------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake saw it."""

    body: dict[str, Any]
    """The parsed JSON body (``{}`` if it was not a JSON object)."""
    headers: dict[str, str]
    """Request headers, lower-cased names (e.g. ``x-stainless-retry-count``)."""
    arrived_at: float
    """``time.monotonic()`` when the request arrived."""
    status: int
    """HTTP status served."""
    prompt_tokens: int = 0
    """The request's size as the fake counts it (``count_prompt_tokens``)."""

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages``."""
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The request's ``tools``, if any."""
        return self.body.get("tools")

    @property
    def stream(self) -> bool:
        """Whether the client asked for a stream."""
        return bool(self.body.get("stream"))


class _HeldResponse:
    """ASGI response that sends prepared chunks with delays and stalls, and notices aborts.

    The client leaving is seen as ``http.disconnect`` on ``receive`` while chunks remain; it is
    counted in :attr:`FakeProvider.aborted_streams` and stops the sending.
    """

    def __init__(
        self, provider: FakeProvider, knobs: _Knobs, chunks: list[bytes], *, stream: bool
    ) -> None:
        self._provider = provider
        self._knobs = knobs
        self._chunks = chunks
        self._complete = False
        if stream:
            # No content-length: uvicorn then uses chunked transfer encoding, as the API does.
            self._headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
        else:
            length = str(sum(len(c) for c in chunks)).encode()
            self._headers = [(b"content-type", b"application/json"), (b"content-length", length)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self._headers})
        async with anyio.create_task_group() as group:

            async def watch_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                # uvicorn also answers "disconnect" once the response is complete, and anyio
                # may let this task run once more after the sender finished: only a client
                # that left while chunks remained is an abort.
                if not self._complete:
                    self._provider._count_abort()
                group.cancel_scope.cancel()

            group.start_soon(watch_disconnect)
            await self._send_chunks(send)
            group.cancel_scope.cancel()

    async def _send_chunks(self, send: Send) -> None:
        generation = self._provider._generation_now()
        for n, chunk in enumerate(self._chunks):
            if n == self._knobs.cut_after:
                break
            if n == self._knobs.stall_after:
                await self._hold(generation)
            if n and self._knobs.chunk_delay:
                await anyio.sleep(self._knobs.chunk_delay)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        self._complete = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _hold(self, generation: int) -> None:
        # A threading.Event cannot be awaited, and a thread blocked in Event.wait() would
        # outlive a client that disconnects first; a short poll ends cleanly either way.
        # reset() and stop() also release held responses so nothing outlives its test.
        release = self._knobs.release
        while not (release is not None and release.is_set()):
            if self._provider._released_all(generation):
                return
            await anyio.sleep(_STALL_POLL_S)


class FakeProvider(LoopbackServer):
    """A scripted OpenAI-compatible chat completions endpoint on a loopback port.

    All methods are safe to call from the test's thread while the server thread serves.
    """

    _thread_name = "fake-openai"

    def __init__(self) -> None:
        self._state = threading.Lock()
        self._waiters: list[
            tuple[Callable[[], bool], asyncio.AbstractEventLoop, asyncio.Event]
        ] = []
        self._script: deque[Reply] = deque()
        self._responder: Responder | None = None
        self._requests: list[RecordedRequest] = []
        self._aborted = 0
        self._generation = 0
        self._closing = False
        self._window: int | None = None
        super().__init__(
            Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        )

    # -- lifecycle

    @property
    def base_url(self) -> str:
        """Base URL for ``AsyncOpenAI(base_url=...)``, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting and inspection

    def script(self, *replies: Reply) -> None:
        """Append replies, consumed FIFO one per (valid) request."""
        with self._state:
            self._script.extend(replies)

    def respond_with(self, responder: Responder | None) -> None:
        """Answer every valid request with ``responder(messages)`` instead of the script.

        The responder is called once per request that passed the history check (a broken
        history still gets its 400 and never reaches it), on the server's event loop thread,
        one request at a time: it must answer at once. ``None`` goes back to the FIFO script.

        Example:
            >>> def reply(messages):
            ...     if messages[-1]["role"] == "tool":
            ...         return TextReply("All probes answered.")
            ...     return ToolCallsReply([ToolCall("http_get", {"url": "http://h/a"})])
            >>> fake.respond_with(reply)
        """
        with self._state:
            self._responder = responder

    def set_context_window(self, tokens: int | None) -> None:
        """Enforce a context window of ``tokens`` (None: none); :meth:`reset` clears it.

        A request counted over it gets the ``context_length_exceeded`` 400.
        """
        with self._state:
            self._window = tokens

    def reset(self) -> None:
        """Clear script, responder, window, records and aborts; release held answers."""
        with self._state:
            self._window = None
            self._script.clear()
            self._responder = None
            self._requests.clear()
            self._aborted = 0
            self._generation += 1

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of the requests received so far, in arrival order."""
        with self._state:
            return list(self._requests)

    @property
    def remaining(self) -> int:
        """How many scripted replies are not consumed yet."""
        with self._state:
            return len(self._script)

    @property
    def aborted_streams(self) -> int:
        """Responses the client disconnected from while the fake still had chunks to send."""
        with self._state:
            return self._aborted

    async def wait_for_aborted_streams(self, count: int = 1) -> None:
        """Wait until at least ``count`` aborts were seen (the server notices asynchronously).

        Raises:
            TimeoutError: The count was not reached within 5 seconds.
        """
        await self._wait_until(lambda: self._aborted >= count, f"{count} aborted streams")

    async def wait_for_requests(self, count: int = 1) -> None:
        """Wait until at least ``count`` requests have arrived (recorded, whatever their status).

        Raises:
            TimeoutError: The count was not reached within 5 seconds.
        """
        await self._wait_until(lambda: len(self._requests) >= count, f"{count} requests")

    async def _wait_until(self, predicate: Callable[[], bool], wanted: str) -> None:
        reached = asyncio.Event()
        waiter = (predicate, asyncio.get_running_loop(), reached)
        with self._state:
            if predicate():
                return
            self._waiters.append(waiter)
        try:
            async with asyncio.timeout(_WAIT_S):
                await reached.wait()
        except TimeoutError:
            raise TimeoutError(
                f"wanted {wanted}; saw {len(self.requests)} requests, "
                f"{self.aborted_streams} aborted streams"
            ) from None
        finally:
            with self._state:
                self._waiters.remove(waiter)

    def _notify(self) -> None:
        """Wake the waiters whose condition now holds; the caller holds ``self._state``."""
        for predicate, loop, reached in self._waiters:
            if predicate():
                loop.call_soon_threadsafe(reached.set)

    # -- server side (runs on the server thread)

    def _count_abort(self) -> None:
        with self._state:
            self._aborted += 1
            self._notify()

    def _generation_now(self) -> int:
        with self._state:
            return self._generation

    def _released_all(self, generation: int) -> bool:
        with self._state:
            return self._closing or self._generation != generation

    def _release_held(self) -> None:
        with self._state:
            self._closing = True

    def _record(self, request: Request, body: dict[str, Any], arrived: float, status: int) -> None:
        """Append a record; the caller holds ``self._state``."""
        headers = {name.lower(): value for name, value in request.headers.items()}
        tokens = count_prompt_tokens(body)
        self._requests.append(RecordedRequest(body, headers, arrived, status, tokens))
        self._notify()

    def _take(self, request: Request, body: dict[str, Any], arrived: float) -> Reply | None:
        """Pop the next reply (or ask the responder) and record the request with its status."""
        with self._state:
            responder = self._responder
        if responder is not None:
            answer = self._ask(responder, body)
            with self._state:
                self._record(request, body, arrived, _status_of(answer))
            return answer
        with self._state:
            reply = self._script.popleft() if self._script else None
            self._record(request, body, arrived, _status_of(reply))
            return reply

    def _ask(self, responder: Responder, body: dict[str, Any]) -> Reply:
        """The responder's reply; a non-retried 500 saying why when it raised."""
        messages = body.get("messages")
        try:
            return responder(messages if isinstance(messages, list) else [])
        except Exception as exc:
            message = RESPONDER_FAILED.format(n=len(self.requests) + 1, error=repr(exc))
            return ErrorReply(500, message, headers={"x-should-retry": "false"})

    async def _chat(self, request: Request) -> Response | _HeldResponse:
        arrived = time.monotonic()
        try:
            body = await request.json()
        except ValueError:
            body = None
        rejection = check_request(body)
        body = body if isinstance(body, dict) else {}
        with self._state:
            window = self._window
        if rejection is None and window is not None:
            rejection = check_context(body, window)
        if rejection is not None:
            with self._state:
                self._record(request, body, arrived, 400)
            return JSONResponse(rejection.body(), status_code=400)
        reply = self._take(request, body, arrived)
        if window is not None and isinstance(reply, TextReply | ToolCallsReply):
            reply = dataclasses.replace(reply, prompt_tokens=count_prompt_tokens(body))
        return self._respond(reply, body)

    def _respond(self, reply: Reply | None, body: dict[str, Any]) -> Response | _HeldResponse:
        if reply is None:
            message = EXHAUSTED.format(n=len(self.requests))
            reply = ErrorReply(500, message, headers={"x-should-retry": "false"})
        if isinstance(reply, ErrorReply):
            return JSONResponse(
                reply.body(), status_code=reply.status, headers=reply.response_headers()
            )
        meta = _Meta(_random_id("chatcmpl-", 29), int(time.time()), str(body.get("model", "")))
        call_ids = _call_ids(reply) if isinstance(reply, ToolCallsReply) else []
        if body.get("stream"):
            options = body.get("stream_options") or {}
            events = _sse_events(reply, meta, call_ids, bool(options.get("include_usage")))
            return _HeldResponse(self, reply, events, stream=True)
        payload = json.dumps(_completion(reply, meta, call_ids)).encode()
        return _HeldResponse(self, reply, [payload], stream=False)


# --- pytest fixtures -------------------------------------------------------------------------


# Names are pinned so that an aliased import (``import fake_llm as _fixture``, which keeps
# ruff's F811 quiet in test modules whose tests take a ``fake_llm`` argument) still registers
# the fixtures under their real names.
@pytest.fixture(scope="session", name="_fake_llm_server")
def _fake_llm_server() -> Iterator[FakeProvider]:
    """One fake provider for the whole session (its startup costs ~50 ms)."""
    provider = FakeProvider()
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture(name="fake_llm")
def fake_llm(_fake_llm_server: FakeProvider) -> Iterator[FakeProvider]:
    """A started :class:`FakeProvider` with an empty script and no records."""
    _fake_llm_server.reset()
    yield _fake_llm_server
    _fake_llm_server.reset()
