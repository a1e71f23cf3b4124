"""The ack: a route's body read, its event handed to intake within the budget, and the answers.

Contract: an event is written to Redis before the 200 goes out (docs/design.md §Invariants I8); when
Redis cannot take it within the budget the answer is 503 without `X-Slack-No-Retry`, so the
platform delivers it again (docs/reliability.md S10, S14). A rejected request gets its own status
(`RequestRejected.status`) and a generic body; a 400 to Slack says not to retry.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import Request, Response
from fastapi.responses import JSONResponse

from agent_core import StoreError
from bot.errors import BodyTooLarge, QueueUnavailable, RequestRejected
from bot.events import ChatEvent
from bot.ingress.body_limits import READ_BODY
from bot.ingress.context import ACK_BUDGET_S, MAX_BODY_BYTES, Ingress

__all__ = ["accept", "ok", "read_body", "rejected", "unavailable"]

log = logging.getLogger("bot.ingress.app")  # the logger name the ingress's log lines always had


async def read_body(request: Request) -> bytes:
    """The request's body, refused past `MAX_BODY_BYTES`.

    Raises:
        BodyTooLarge: The body is declared or read past the limit.
    """
    # `BoundedBody` has read the body within its deadline and limit already, and left it in
    # the request's scope; reading it again keeps a route safe should it ever be mounted
    # without the middleware.
    read = request.scope.get(READ_BODY)
    if isinstance(read, bytes):
        return read
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BodyTooLarge()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def ok() -> Response:
    """The plain acknowledgement."""
    return Response(b'{"ok":true}', media_type="application/json")


def rejected(exc: RequestRejected, *, slack: bool = False) -> JSONResponse:
    """The answer to a request that failed verification or parsing."""
    headers = {"X-Slack-No-Retry": "1"} if slack and exc.status == 400 else None
    return JSONResponse({"error": exc.public}, status_code=exc.status, headers=headers)


def unavailable() -> JSONResponse:
    """503: the event was not written, and the platform must deliver it again."""
    # No X-Slack-No-Retry: the platform must deliver this event again.
    return JSONResponse({"error": "temporarily unavailable, retry"}, status_code=503)


async def accept(
    ingress: Ingress,
    event: ChatEvent,
    budget: float = ACK_BUDGET_S,
    *,
    unknown_call_status: int = 200,
) -> Response:
    """Decide and enqueue within `budget` seconds; 503 when Redis cannot take the event.

    An Approve or Deny press is decided at once (`bot.intake.accept`); its answer is the body's
    `message` (a Feishu card callback shows it as a toast). So is an admin's kill switch
    command, and a "Mark answer wrong" press (`marked_wrong`: whether the analysis was on
    record). A press naming no waiting call (`Press.unknown`) is answered
    `unknown_call_status`: the chat platforms need their 200, the console's client is told 404.
    """
    try:
        async with asyncio.timeout(max(budget, 0.0)):
            taken = await ingress.intake.take(event)
    except (TimeoutError, QueueUnavailable, StoreError) as exc:
        ingress.metrics.unavailable.inc()
        log.warning("event %s not accepted: %s", event.event_id, exc)
        return unavailable()
    ingress.metrics.event(event.platform.value, taken.outcome)
    if (press := taken.press) is not None:
        said = {"approval": press.outcome.value, "message": press.message}
        if press.unknown and unknown_call_status != 200:
            return JSONResponse({"error": "no such call", **said}, status_code=unknown_call_status)
        return JSONResponse({"ok": True, **said})
    if (switched := taken.switched) is not None:
        said = {"killswitch": switched.outcome.value, "message": switched.message}
        return JSONResponse({"ok": True, **said})
    if (marked := taken.marked) is not None:
        return JSONResponse({"ok": True, "marked_wrong": marked.marked, "message": marked.message})
    return ok()
