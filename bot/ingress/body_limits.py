"""Every request body read under a deadline and a size limit before any route sees it.

Contract (fault matrix X13, docs/reliability.md S16), for every HTTP request the ingress serves:

- a declared `Content-Length` over the limit is answered 413 at once, the body unread;
- the body is counted as it streams, and answered 413 as soon as it passes the limit;
- a body not complete `read_timeout_s` after the request's headers arrived is answered 408;
- both answers carry `Connection: close`, so the server closes the connection after them (h11
  moves to `MUST_CLOSE` once a response that says so is sent) and an unread remainder is never
  parsed as a next request;
- a client that disconnects mid-body gets nothing, and no route runs;
- otherwise the route receives the whole body, in one `http.request` message, and runs with no
  signature or parsing work having happened before these checks.

Why a middleware: uvicorn (0.54, its h11 and httptools protocols alike) has no deadline for a
request's body. `timeout_keep_alive` runs only between requests and `data_received` cancels it
on every byte; `RequestResponseCycle.receive` waits for the next chunk with no timer (the
request-complete timeout of Kludex/uvicorn#157 was never built). So an unauthenticated client
that sends headers and then trickles, or never finishes, its body holds the connection and the
route's task for as long as it likes. An ASGI middleware sees a request only once its headers
are in: the header phase is bounded in bytes by h11's incomplete-event limit (16 KiB), not in
time; a proxy in front (its client header timeout) bounds that.

`chatops serve` leaves uvicorn's `h11_max_incomplete_event_size` at its default (16 KiB of
request line and headers, far above any platform's) and sets no `limit_concurrency`: past that
limit uvicorn answers every new request 503 while connections stay open, so a few hundred
clients stalling in their headers would turn away the platforms' real deliveries; without it
they cost only a file descriptor each, and the body deadline frees each connection that got
as far as a route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimits", "BoundedBody", "Refused"]

READ_BODY = "chatops.read_body"
"""The scope key under which the body `BoundedBody` read is given to the route: the request's
own scope (a new one per request, as ASGI has it), never the `state` a server may copy from the
app's lifespan state, so no request can ever see another's body."""

log = logging.getLogger(__name__)

Refused = Callable[[Scope, int], None]
"""Told of each refused request: its scope and the status answered (408 or 413)."""

_PUBLIC = {
    408: "request body not received in time",
    413: "request body too large",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyLimits:
    """How much of a body, and how slowly, the ingress accepts."""

    max_bytes: int
    """Larger bodies are refused with 413 (counted as they stream, or declared up front)."""
    read_timeout_s: float
    """The whole body must arrive within this many seconds of the request's headers."""


class _TooLarge(Exception):
    """The body passed the limit while it streamed."""


class BoundedBody:
    """Pure ASGI middleware enforcing `BodyLimits` on every HTTP request (module docstring)."""

    def __init__(
        self, app: ASGIApp, *, limits: BodyLimits, on_refused: Refused | None = None
    ) -> None:
        """Wrap `app`; `on_refused` counts refusals (metrics), it must not raise."""
        self.app = app
        self.limits = limits
        self.on_refused = on_refused

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Read the body within the limits, then run `app` on it; or refuse the request."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limits.max_bytes:
            await self._refuse(scope, send, 413)
            return
        try:
            async with asyncio.timeout(self.limits.read_timeout_s):
                body = await _read(receive, self.limits.max_bytes)
        except TimeoutError:
            await self._refuse(scope, send, 408)
            return
        except _TooLarge:
            await self._refuse(scope, send, 413)
            return
        if body is None:
            return  # the client left mid-body: nobody to answer
        scope[READ_BODY] = body  # `bot.ingress.ack.read_body` takes it
        await self.app(scope, _replay(body, receive), send)

    async def _refuse(self, scope: Scope, send: Send, status: int) -> None:
        log.info("%s %s refused (%s): %s", scope["method"], scope["path"], status, _PUBLIC[status])
        if self.on_refused is not None:
            self.on_refused(scope, status)
        response = JSONResponse(
            {"error": _PUBLIC[status]}, status_code=status, headers={"Connection": "close"}
        )
        await response(scope, _no_body, send)


def _content_length(scope: Scope) -> int | None:
    """The declared length, when it is a plain number (the server already refused others)."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None if the client disconnected first.

    Raises:
        _TooLarge: More than `limit` bytes arrived.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives the read body once, then the server's own messages."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


async def _no_body() -> Message:
    """The refusal's `receive`: a response never reads the request."""
    return {"type": "http.disconnect"}
