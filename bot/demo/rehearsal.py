"""The rehearsal model: an OpenAI-compatible chat-completions server that plays a script.

`make demo` runs the whole bot without an API key by pointing `OPENAI_BASE_URL` here. It is
labelled so nobody mistakes it for a model: its id is `chatops-rehearsal` and every answer
text starts with `[rehearsal] `. What it says is decided by `bot.demo.investigation` from the
request's `messages` alone.

It speaks the real protocol, as the openai SDK parses it (the same shapes the test fake
`tests/fakes/openai_provider.py` was verified against):

* `stream: false`: one `chat.completion` object with `usage`;
* `stream: true`: `data: {chat.completion.chunk}` events: the role and the text in word-sized
  deltas, then per tool call one header delta (`index`, `id`, `type`, `function.name`) and its
  `arguments` in fragments, then an empty delta with `finish_reason` (`tool_calls` or `stop`),
  a usage chunk (empty `choices`) when `stream_options.include_usage` is set, then
  `data: [DONE]`. `token_delay_s` paces the chunks so a streamed answer looks alive.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bot.demo.investigation import ScriptedReply, next_reply
from bot.demo.openai_rules import check_request

__all__ = ["LABEL", "REHEARSAL_MODEL", "rehearsal_app"]

REHEARSAL_MODEL = "chatops-rehearsal"
"""The model id every answer reports."""
LABEL = "[rehearsal] "
"""The prefix of every answer text."""
TOOL_NAME = "http_get"
"""The only tool the script calls (docs/design.md §External contract)."""


@dataclass(frozen=True)
class _Encoded:
    """One scripted reply with its ids fixed, ready to be written either way."""

    text: str
    calls: tuple[tuple[str, str], ...]
    """(call id, arguments JSON) per `http_get` call."""
    usage: dict[str, int]
    id: str
    created: int

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls else "stop"

    def wire_calls(self) -> list[dict[str, Any]]:
        return [
            {"id": cid, "type": "function", "function": {"name": TOOL_NAME, "arguments": args}}
            for cid, args in self.calls
        ]

    def envelope(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": REHEARSAL_MODEL}


def _encode(reply: ScriptedReply, prompt_chars: int) -> _Encoded:
    text = LABEL + reply.text
    calls = tuple(
        ("call_" + secrets.token_hex(12), json.dumps({"url": url}, separators=(",", ":")))
        for url in reply.urls
    )
    # About four characters a token: enough for the demo's usage counters to move.
    completion_chars = len(text) + sum(len(args) for _, args in calls)
    prompt, completion = max(1, prompt_chars // 4), max(1, completion_chars // 4)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage["total_tokens"] = prompt + completion
    return _Encoded(text, calls, usage, "chatcmpl-" + secrets.token_hex(14), int(time.time()))


def _completion_body(encoded: _Encoded) -> dict[str, Any]:
    """The `chat.completion` object of a non-streamed answer."""
    message: dict[str, Any] = {"role": "assistant", "content": encoded.text, "refusal": None}
    if encoded.calls:
        message["tool_calls"] = encoded.wire_calls()
    choice = {"index": 0, "message": message, "finish_reason": encoded.finish_reason}
    return {**encoded.envelope("chat.completion"), "choices": [choice], "usage": encoded.usage}


def _deltas(encoded: _Encoded) -> Iterator[dict[str, Any]]:
    yield {"role": "assistant", "content": ""}
    for word in re.findall(r"\s*\S+", encoded.text):
        yield {"content": word}
    for index, (cid, args) in enumerate(encoded.calls):
        header = {"index": index, "id": cid, "type": "function"}
        yield {"tool_calls": [{**header, "function": {"name": TOOL_NAME, "arguments": ""}}]}
        half = max(1, len(args) // 2)
        for fragment in (args[:half], args[half:]):
            yield {"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}


def _stream_chunks(encoded: _Encoded, *, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The `chat.completion.chunk` objects of a streamed answer, in order."""
    base = encoded.envelope("chat.completion.chunk")
    if include_usage:
        base["usage"] = None  # the API sends an explicit null until the usage chunk
    ends: list[tuple[dict[str, Any], str | None]] = [(delta, None) for delta in _deltas(encoded)]
    ends.append(({}, encoded.finish_reason))
    for delta, finish in ends:
        yield {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if include_usage:
        yield {**base, "choices": [], "usage": encoded.usage}


async def _sse(chunks: Sequence[dict[str, Any]], token_delay_s: float) -> AsyncIterator[bytes]:
    for n, chunk in enumerate(chunks):
        if n and token_delay_s > 0:
            await anyio.sleep(token_delay_s)
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


def _bad_request(message: str, param: str | None = None) -> JSONResponse:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": None}
    return JSONResponse({"error": error}, status_code=400)


def rehearsal_app(service_url: str, *, token_delay_s: float = 0.0) -> Starlette:
    """Build the rehearsal model server.

    Args:
        service_url: Base URL of the demo service the script investigates.
        token_delay_s: Seconds between streamed chunks (0 in tests).

    Returns:
        The ASGI app, serving `POST /v1/chat/completions` and `GET /v1/models`; point
        `AsyncOpenAI(base_url=".../v1")` at it. `app.state.rejected` counts the requests it
        answered with a 400 (a history the real API would refuse).
    """

    async def chat(request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _bad_request("We could not parse the JSON body of your request.")
        rejection = check_request(body)
        if rejection is not None:  # the real API's rules, and its 400s
            app.state.rejected += 1
            return JSONResponse(rejection.body(), status_code=400)
        messages = body["messages"]
        wire = [m for m in messages if isinstance(m, dict)]
        encoded = _encode(next_reply(wire, service_url), len(json.dumps(messages)))
        if not body.get("stream"):
            return JSONResponse(_completion_body(encoded))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        chunks = list(_stream_chunks(encoded, include_usage=include_usage))
        return StreamingResponse(_sse(chunks, token_delay_s), media_type="text/event-stream")

    async def models(request: Request) -> Response:
        card = {"id": REHEARSAL_MODEL, "object": "model", "created": 0, "owned_by": "chatops"}
        return JSONResponse({"object": "list", "data": [card]})

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )
    app.state.rejected = 0  # requests answered 400, as the real API would have
    return app
