"""The demo service: a "checkout" service whose dependency `payments-db` is failing.

What an SRE would find by probing it with `http_get`, route by route:

* `GET /health`: 503, `payments-db` named as the failing dependency;
* `GET /logs`: the pool filling up after a deploy, then acquire timeouts and 500s;
* `GET /metrics`: Prometheus text, error rate up, p99 latency at the acquire timeout, pool 100%;
* `GET /dependencies/payments-db`: every connection busy, clients queueing, the last error;
* `GET /deploys`: the deploy 40 minutes ago that quadrupled the workers sharing the pool and cut
  the acquire timeout (the plausible cause).

Every route answers after its own delay (0.6 to 1.5 s, times `scale`), so a parallel batch of
probes stays in flight long enough for a person to redirect the analysis mid-batch; `scale=0`
answers at once. Timestamps are relative to the moment of the request, so the story always
happened "just now".
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

__all__ = [
    "FAILING_DEPENDENCY",
    "KEY_LOG_LINE",
    "ROUTE_DELAYS_S",
    "SERVICE",
    "demo_service_app",
]

SERVICE = "checkout"
"""The service under investigation."""
FAILING_DEPENDENCY = "payments-db"
"""The dependency that is failing."""
KEY_LOG_LINE = (
    "payments-db pool exhausted: 20/20 connections in use, 37 clients waiting; "
    "acquire timed out after 5000 ms"
)
"""The log message that names the failure (the rehearsal model quotes it)."""
ROUTE_DELAYS_S = {
    "/health": 0.6,
    "/logs": 1.5,
    "/metrics": 0.9,
    "/dependencies/payments-db": 0.8,
    "/deploys": 1.2,
}
"""Seconds each route takes before answering, at `scale=1`."""

_DEPLOY_AGE = timedelta(minutes=40)

Page = Callable[[datetime], Response]


def _stamp(now: datetime, ago: timedelta) -> str:
    return (now - ago).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _health(now: datetime) -> Response:
    body = {"service": SERVICE, "status": "degraded", "failing": [FAILING_DEPENDENCY]}
    return JSONResponse(body, status_code=503)


_LOG_LINES: tuple[tuple[float, str, str], ...] = (
    # (minutes ago, level, message): oldest first, as `kubectl logs` prints them.
    (40.0, "INFO", "deploy checkout v2.14.0 rolling out (workers 8 -> 32)"),
    (39.5, "INFO", "payments-db pool ready: max=20 acquire_timeout_ms=5000"),
    (31.2, "WARN", "payments-db pool usage 85% (17/20), 4 clients waiting"),
    (24.8, "WARN", "payments-db pool usage 100% (20/20), 12 clients waiting"),
    (18.3, "ERROR", "POST /api/checkout 500: payments-db acquire timed out after 5000 ms"),
    (11.0, "ERROR", "POST /api/checkout 500: payments-db acquire timed out after 5000 ms"),
    (6.4, "WARN", "http 5xx rate 9.8% over 5m (SLO 1%)"),
    (2.1, "ERROR", KEY_LOG_LINE),
    (0.7, "ERROR", "http 5xx rate 23.5% over 5m (SLO 1%); health check failing: payments-db"),
)


def _logs(now: datetime) -> Response:
    lines = [
        f"{_stamp(now, timedelta(minutes=ago))} {level:<5} {SERVICE} {message}"
        for ago, level, message in _LOG_LINES
    ]
    return PlainTextResponse("\n".join(lines) + "\n")


_METRICS = """\
# HELP http_requests_error_ratio Share of checkout requests answered 5xx over 5m.
# TYPE http_requests_error_ratio gauge
http_requests_error_ratio{service="checkout"} 0.235
# HELP http_request_duration_seconds_p99 p99 latency of POST /api/checkout over 5m.
# TYPE http_request_duration_seconds_p99 gauge
http_request_duration_seconds_p99{service="checkout",route="/api/checkout"} 5.02
# HELP db_pool_connections_in_use_ratio Share of the payments-db pool in use.
# TYPE db_pool_connections_in_use_ratio gauge
db_pool_connections_in_use_ratio{service="checkout",pool="payments-db"} 1.0
# HELP db_pool_waiting_clients Clients queued for a payments-db connection.
# TYPE db_pool_waiting_clients gauge
db_pool_waiting_clients{service="checkout",pool="payments-db"} 37
"""


def _metrics(now: datetime) -> Response:
    return PlainTextResponse(_METRICS, media_type="text/plain; version=0.0.4")


def _payments_db(now: datetime) -> Response:
    body: dict[str, Any] = {
        "name": FAILING_DEPENDENCY,
        "kind": "postgresql",
        "status": "saturated",
        "pool": {"max_connections": 20, "active_connections": 20, "idle_connections": 0},
        "waiting_clients": 37,
        "acquire_timeout_ms": 5000,
        "last_error": {
            "at": _stamp(now, timedelta(seconds=4)),
            "message": "timeout acquiring connection from pool after 5000 ms",
        },
    }
    return JSONResponse(body)


def _deploys(now: datetime) -> Response:
    deploys = [
        {
            "version": "v2.14.0",
            "at": _stamp(now, _DEPLOY_AGE),
            "author": "dana",
            "change": "raise CHECKOUT_WORKERS 8 -> 32; payments-db acquire_timeout_ms "
            "30000 -> 5000 (PR #482)",
        },
        {
            "version": "v2.13.2",
            "at": _stamp(now, timedelta(days=1, hours=3)),
            "author": "lee",
            "change": "fix rounding of discount codes in the order summary (PR #477)",
        },
        {
            "version": "v2.13.1",
            "at": _stamp(now, timedelta(days=3, hours=6)),
            "author": "sam",
            "change": "bump httpx to 0.28.1 (PR #470)",
        },
    ]
    return JSONResponse({"service": SERVICE, "deploys": deploys})


_PAGES: dict[str, Page] = {
    "/health": _health,
    "/logs": _logs,
    "/metrics": _metrics,
    "/dependencies/payments-db": _payments_db,
    "/deploys": _deploys,
}


def _route(path: str, page: Page, delay_s: float) -> Route:
    async def endpoint(request: Request) -> Response:
        if delay_s > 0:
            await anyio.sleep(delay_s)
        return page(datetime.now(UTC))

    return Route(path, endpoint, methods=["GET"])


def demo_service_app(scale: float = 1.0) -> Starlette:
    """Build the demo "checkout" service.

    Args:
        scale: Multiplies every route's delay (`ROUTE_DELAYS_S`); 0 answers at once.

    Returns:
        The ASGI app; serve it with uvicorn.
    """
    if scale < 0:
        raise ValueError(f"scale must be >= 0, got {scale}")
    routes = [_route(path, page, ROUTE_DELAYS_S[path] * scale) for path, page in _PAGES.items()]
    return Starlette(routes=routes)
