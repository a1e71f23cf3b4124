"""The chat-completions stream read as server-sent events, each chunk a plain `json.loads` dict.

The openai SDK builds a pydantic object for every streamed chunk, which cost about 90 µs of CPU a
chunk against 3-6 µs for reading the same lines and decoding their JSON (`bench/model_client.py`).
The SDK still sends the request (auth, base URL, retries, status errors: `client.post` with our
own body, see `convert.request_body`, and the response handed back unread); only the body is
read here. Deliberately not the SDK's own SSE
decoder: it is private API, and what it does is small enough to keep in view.

Contract, as the SDK's `AsyncStream` reads a chat-completions stream: the body is split into
lines at CR, LF and CRLF only, as the SSE standard says (`body_lines`; not httpx's `aiter_lines`,
which also splits at U+2028, U+0085 and the like, which JSON carries unescaped inside strings:
a model quoting such a character would break its stream), each line decoded as UTF-8 with bad
bytes replaced, in time linear in the body however long a line is. `data:` lines are joined
with newlines into one event at a blank line (or at the end of the body); `event:`, `id:`,
`retry:` and `:` comment lines are read and ignored; `[DONE]` ends the stream, and what follows
it is read and dropped for at most `DRAIN_S` (an HTTP/1.1 connection whose body was not read to
its end cannot go back to the pool, so every request would connect anew); an event whose
JSON holds a truthy `error` raises `openai.APIError` with its message, as the SDK does, so that
`map_openai_errors` maps it the same way; JSON that does not parse, nests past what the decoder
can follow, or an event or line longer than `MAX_EVENT_BYTES` raises `ValueError` (a malformed
stream), so a hostile or broken server costs bounded memory and one clear model error.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

__all__ = ["DRAIN_S", "MAX_EVENT_BYTES", "body_lines", "sse_chunks"]

MAX_EVENT_BYTES = 1_048_576
"""One line, and one event's data, at most: a chunk is a few hundred bytes (a delta each)."""
DRAIN_S = 1.0
"""How long the rest of a body after `[DONE]` is read (the SDK waits as long)."""
_BREAK = re.compile(rb"\r\n|\r|\n")

_STREAM_ERROR = "An error occurred during streaming"
"""The SDK's message for an error event that names none."""


async def sse_chunks(lines: AsyncIterator[str], request: Any) -> AsyncGenerator[Any, None]:
    """The decoded JSON of each event in `lines`, until `[DONE]` or the end of the body.

    Args:
        lines: The response body's lines (`body_lines`: line breaks removed).
        request: The HTTP request, named by an `openai.APIError` for an error event.

    Raises:
        openai.APIError: An event carried an error.
        ValueError: An event's data is not JSON, or is longer than `MAX_EVENT_BYTES`.
    """
    data: list[str] = []
    size = 0
    async for line in lines:
        if line:
            field, _, value = line.partition(":")
            if field == "data":
                size += len(value)
                if size > MAX_EVENT_BYTES:
                    raise ValueError(f"an event of more than {MAX_EVENT_BYTES} bytes")
                data.append(value[1:] if value.startswith(" ") else value)
            continue
        if not data:
            continue
        payload = "\n".join(data)
        data.clear()
        size = 0
        if payload.startswith("[DONE]"):
            await _drain(lines)
            return
        yield _checked(_decoded(payload), request)
    if data and not (payload := "\n".join(data)).startswith("[DONE]"):
        yield _checked(_decoded(payload), request)


def _decoded(payload: str) -> Any:
    """`json.loads(payload)`; nesting too deep for the decoder is a `ValueError` like bad JSON."""
    try:
        return json.loads(payload)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def _checked(chunk: Any, request: Any) -> Any:
    """`chunk`, or the `openai.APIError` it carries."""
    if isinstance(chunk, Mapping) and chunk.get("error"):
        import openai

        error = chunk["error"]
        message = error.get("message") if isinstance(error, Mapping) else None
        if not message or not isinstance(message, str):
            message = _STREAM_ERROR
        raise openai.APIError(message=message, request=request, body=error)
    return chunk


async def body_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of a body read as `chunks`, split at CR, LF and CRLF only, breaks removed.

    Raises:
        ValueError: A line grew past `MAX_EVENT_BYTES` without a break.
    """
    pending = bytearray()
    async for chunk in chunks:
        if b"\n" not in chunk and b"\r" not in chunk:
            pending += chunk  # no break in it: only the new bytes were searched
            if len(pending) > MAX_EVENT_BYTES:
                raise ValueError(f"a line of more than {MAX_EVENT_BYTES} bytes")
            continue
        data = bytes(pending) + chunk
        pending.clear()
        if data.endswith(b"\r"):  # perhaps the first half of a CRLF: decided by the next chunk
            pending += b"\r"
            data = data[:-1]
        *lines, rest = _BREAK.split(data)
        pending[:0] = rest
        for line in lines:
            yield line.decode("utf-8", "replace")
    if pending:
        *lines, rest = _BREAK.split(bytes(pending))
        for line in lines:
            yield line.decode("utf-8", "replace")
        if rest:
            yield rest.decode("utf-8", "replace")


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read what follows `[DONE]` to the end of the body, for `DRAIN_S` at most."""
    try:
        async with asyncio.timeout(DRAIN_S):
            async for _ in lines:
                pass
    except Exception:  # the answer is complete: a broken tail changes nothing
        return
