"""The alert senders' routes: Alertmanager's, Grafana's and PagerDuty's webhooks.

Contract, as for the chat webhooks (docs/design.md §External contract): verify → parse → route →
write → ack. Each request is verified before anything of it is parsed (`bot.adapters.alerts`):
Alertmanager and Grafana by the bearer token `CHATOPS_ALERT_TOKEN` (and Grafana's HMAC signature
when `CHATOPS_GRAFANA_SECRET` is set), PagerDuty by its `X-PagerDuty-Signature` with
`CHATOPS_PAGERDUTY_SECRET`. A sender that is not configured is 404; a bad token or signature 401;
a malformed body 400; a routed notification is written to the alerts stream
(`bot.intake.alert_intake`) before the 200, and when Redis cannot take it within the ack budget
the answer is 503, which every one of these senders retries. A notification no route takes is
counted (`chatops_ingress_alerts_total{outcome="unrouted"}`) and dropped with a 200: a sender
would only retry it. Nothing slow happens here: the posts and the analysis are the workers'
(`bot.worker.alert_dispatch`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from agent_core import StoreError
from bot.adapters.alerts import (
    parse_alertmanager,
    parse_grafana,
    parse_pagerduty,
    verify_bearer,
    verify_grafana,
    verify_pagerduty,
)
from bot.alerts import AlertNotification, AlertSender
from bot.errors import QueueUnavailable, RequestRejected
from bot.ingress.ack import read_body, rejected, unavailable
from bot.ingress.context import ACK_BUDGET_S, Ingress
from bot.intake.alert_intake import AlertEntry
from bot.policy.alert_routes import AlertRoute, route_for

__all__ = ["add_alert_webhooks"]

log = logging.getLogger("bot.ingress.alerts")

OFF_LOOP_BYTES = 64 * 1024
"""Bodies larger than this are verified and parsed off the event loop."""


def add_alert_webhooks(app: FastAPI) -> None:
    """Add the alert senders' POST routes to `app`."""
    app.add_route("/alerts/alertmanager", _alertmanager, methods=["POST"], name="alertmanager")
    app.add_route("/alerts/grafana", _grafana, methods=["POST"], name="grafana")
    app.add_route("/alerts/pagerduty", _pagerduty, methods=["POST"], name="pagerduty")


def _not_configured(sender: AlertSender) -> JSONResponse:
    return JSONResponse({"error": f"{sender} alerts are not configured"}, status_code=404)


async def _alertmanager(request: Request) -> Response:
    ingress: Ingress = request.app.state.ingress
    token = ingress.settings.alert_token
    if token is None:
        return _not_configured(AlertSender.ALERTMANAGER)

    def opened(body: bytes) -> AlertNotification | None:
        verify_bearer(request.headers, token.get_secret_value())
        return parse_alertmanager(body)

    return await _receive(request, AlertSender.ALERTMANAGER, opened)


async def _grafana(request: Request) -> Response:
    ingress: Ingress = request.app.state.ingress
    token, secret = ingress.settings.alert_token, ingress.settings.grafana_secret
    if token is None:
        return _not_configured(AlertSender.GRAFANA)

    def opened(body: bytes) -> AlertNotification | None:
        verify_bearer(request.headers, token.get_secret_value())
        if secret is not None:
            verify_grafana(body, request.headers, secret.get_secret_value(), now=ingress.clock())
        return parse_grafana(body)

    return await _receive(request, AlertSender.GRAFANA, opened)


async def _pagerduty(request: Request) -> Response:
    ingress: Ingress = request.app.state.ingress
    secret = ingress.settings.pagerduty_secret
    if secret is None:
        return _not_configured(AlertSender.PAGERDUTY)

    def opened(body: bytes) -> AlertNotification | None:
        verify_pagerduty(body, request.headers, secret.get_secret_value())
        return parse_pagerduty(body)

    return await _receive(request, AlertSender.PAGERDUTY, opened)


async def _receive(
    request: Request,
    sender: AlertSender,
    opened: Callable[[bytes], AlertNotification | None],
) -> Response:
    """Read, verify and parse (`opened`), route, write; the answer the sender gets."""
    ingress: Ingress = request.app.state.ingress

    def routed(body: bytes) -> tuple[AlertNotification | None, AlertRoute | None]:
        notification = opened(body)
        route = None if notification is None else route_for(ingress.alert_routes, notification)
        return notification, route

    try:
        body = await read_body(request)
        # A large body is verified, parsed and routed in a thread: the loop keeps serving.
        notification, route = (
            routed(body) if len(body) <= OFF_LOOP_BYTES else await asyncio.to_thread(routed, body)
        )
    except RequestRejected as exc:
        ingress.metrics.rejected.labels(str(sender), str(exc.status)).inc()
        log.info("%s alert rejected (%s): %s", sender, exc.status, exc.detail)
        return rejected(exc)
    if notification is None:  # an event type nothing is done with (PagerDuty's ping, …)
        ingress.metrics.alerts.labels(str(sender), "ignored").inc()
        return JSONResponse({"ok": True})
    if route is None:
        ingress.metrics.alerts.labels(str(sender), "unrouted").inc()
        log.info("%s alert %s: no route takes it; dropped", sender, notification.incident[:200])
        return JSONResponse({"ok": True, "routed": False})
    entry = AlertEntry(notification=notification, route=route, received_at=ingress.clock())
    try:
        async with asyncio.timeout(ACK_BUDGET_S):
            written = await ingress.alerts.take(entry)
    except (TimeoutError, QueueUnavailable, StoreError) as exc:
        ingress.metrics.unavailable.inc()
        log.warning("%s alert not accepted: %s", sender, exc)
        return unavailable()
    ingress.metrics.alerts.labels(str(sender), "accepted" if written else "duplicate").inc()
    return JSONResponse({"ok": True, "routed": True, "route": route.name})
