"""The platforms' routes: Slack's events, Feishu's events and card callbacks, the console's events.

Contract: verify → normalize → decide → enqueue → ack, within the platform deadline
(docs/design.md §External contract). A route whose platform is not configured answers 404; a request
that fails verification 401, a malformed one 400 (`bot.adapters.untrusted_json`, X14), both counted
by platform and status. Feishu's verification and write share one `ACK_BUDGET_S`, and a nonce is
forgotten when its event was not written, so a redelivery of the same bytes is not taken for a
replay. No model or tool work happens in the request.
"""

from __future__ import annotations

import asyncio
import json
import logging

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from bot.adapters.console.inbound import parse_console, verify_console
from bot.adapters.slack.inbound import parse_slack, verify_slack
from bot.errors import MalformedRequest, QueueUnavailable, RequestRejected
from bot.ingress.ack import accept, read_body, rejected, unavailable
from bot.ingress.context import ACK_BUDGET_S, Ingress

__all__ = ["add_webhooks"]

log = logging.getLogger("bot.ingress.app")  # the logger name the ingress's log lines always had


def add_webhooks(app: FastAPI) -> None:
    """Add the platforms' POST routes to `app`."""
    # Webhooks are plain Starlette routes: FastAPI's parameter and dependency machinery has
    # nothing to do for a raw-body endpoint, and skipping it was measured in bench/ingress.py.
    app.add_route("/slack/events", _slack_events, methods=["POST"], name="slack_events")
    app.add_route("/feishu/events", _feishu_events, methods=["POST"], name="feishu_events")
    app.add_route("/feishu/card", _feishu_card, methods=["POST"], name="feishu_card")
    app.add_route("/console/events", _console_events, methods=["POST"], name="_console")


async def _slack_events(request: Request) -> Response:
    ingress: Ingress = request.app.state.ingress
    secret = ingress.settings.slack_signing_secret
    if secret is None or ingress.slack is None:
        return JSONResponse({"error": "slack is not configured"}, status_code=404)
    try:
        body = await read_body(request)
        verify_slack(body, request.headers, secret.get_secret_value(), now=ingress.clock)
        inbound = parse_slack(body, request.headers.get("content-type", ""), ingress.slack)
    except RequestRejected as exc:
        ingress.metrics.rejected.labels("slack", str(exc.status)).inc()
        log.info("slack request rejected (%s): %s", exc.status, exc.detail)
        return rejected(exc, slack=True)
    if inbound.challenge is not None:
        return JSONResponse({"challenge": inbound.challenge})
    if inbound.event is None:
        return JSONResponse({"ok": True})
    return await accept(ingress, inbound.event)


async def _feishu_events(request: Request) -> Response:
    return await _feishu(request, card=False)


async def _feishu_card(request: Request) -> Response:
    return await _feishu(request, card=True)


async def _feishu(request: Request, *, card: bool) -> Response:
    ingress: Ingress = request.app.state.ingress
    if ingress.feishu is None:
        return JSONResponse({"error": "feishu is not configured"}, status_code=404)
    clock = asyncio.get_running_loop().time
    deadline = clock() + ACK_BUDGET_S  # one budget for verification and the write together
    try:
        async with asyncio.timeout_at(deadline):
            body = await read_body(request)
            inbound = await ingress.feishu.open(
                body,
                request.headers,
                now=ingress.clock(),
                nonce_guard=ingress.fresh_nonce,
                card=card,
            )
    except RequestRejected as exc:
        ingress.metrics.rejected.labels("feishu", str(exc.status)).inc()
        log.info("feishu request rejected (%s): %s", exc.status, exc.detail)
        return rejected(exc)
    except (TimeoutError, QueueUnavailable) as exc:
        log.warning("feishu request not accepted: %s", exc)
        return unavailable()
    if inbound.challenge is not None:
        return JSONResponse({"challenge": inbound.challenge})
    if inbound.replay:
        ingress.metrics.event("feishu", "replay")
        return JSONResponse({"ok": True})
    if inbound.event is None:
        return JSONResponse({"ok": True})
    response = await accept(ingress, inbound.event, budget=deadline - clock())
    if response.status_code == 503:
        # Not written: forget the nonce, so a redelivery of these very bytes is not taken for
        # a replay (the event-id dedupe still guarantees it is written once).
        await ingress.forget_nonce(request.headers.get("x-lark-request-nonce", ""))
    if card and response.status_code == 200:
        said = json.loads(bytes(response.body)).get("message", "Received.")
        return JSONResponse({"toast": {"type": "info", "content": said}})
    return response


async def _console_events(request: Request) -> Response:
    """The console platform's events: bearer token, then the same path as Slack's events.

    An Approve or Deny is decided by the approval desk, as a Slack or Feishu button press is:
    200 with the desk's `approval` and `message` (a refusal too, as on Slack), 400 for a value
    that is not `<call id>|<digest>`, 404 for a call of no waiting request.
    """
    ingress: Ingress = request.app.state.ingress
    token = ingress.settings.console_token
    if token is None:
        return JSONResponse({"error": "console is not configured"}, status_code=404)
    try:
        verify_console(request.headers, token.get_secret_value())
        body = await read_body(request)
        event = parse_console(body, now=ingress.clock())
    except RequestRejected as exc:
        ingress.metrics.rejected.labels("console", str(exc.status)).inc()
        log.info("console request rejected (%s): %s", exc.status, exc.detail)
        if isinstance(exc, MalformedRequest):
            # The client proved it holds the token: tell it which field is wrong (the detail
            # names a field and the rule it breaks, never the value sent).
            return JSONResponse({"error": exc.public, "detail": exc.detail}, status_code=400)
        return rejected(exc)
    # An Approve or Deny naming no waiting call is the client's mistake, said with a 404 (the
    # chat platforms' buttons get a 200 whatever the desk decided: they must not retry).
    return await accept(ingress, event, unknown_call_status=404)
