"""What the ingress answers to orchestrators and scrapers: `/healthz`, `/readyz`, `/metrics`.

Contract: `/healthz` says the process serves; `/readyz` is 503 unless Redis takes a write within 1 s
(a short-lived key beside the turns stream: a Redis that answers a ping but refuses writes, as a
replica, one out of memory or one failing its snapshots does, cannot take an event either, and an
orchestrator should send no traffic there); `/metrics` sets its scrape-time gauges (the oldest live
analysis, the kill switch) from Redis within 1 s, or skips them with a log, and always renders the
rest.
"""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_core import StoreError
from bot.control.killswitch import KillSwitch
from bot.ingress.context import Ingress

__all__ = ["add_probes"]

log = logging.getLogger("bot.ingress.app")  # the logger name the ingress's log lines always had


def add_probes(app: FastAPI) -> None:
    """Add the health, readiness and metrics routes to `app`."""
    # FastAPI routes, named after their functions as `@app.get` names them (the OpenAPI ids).
    app.add_api_route("/healthz", healthz, methods=["GET"])
    app.add_api_route("/readyz", readyz, methods=["GET"])
    app.add_api_route("/metrics", metrics, methods=["GET"])


async def healthz() -> Response:
    return JSONResponse({"status": "ok"})


READY_PROBE_TTL_MS = 10_000
"""The probe key expires on its own: nothing is left behind, whoever wrote it last."""


async def readyz(request: Request) -> Response:
    ingress: Ingress = request.app.state.ingress
    try:
        async with asyncio.timeout(1.0):
            await ingress.redis.set(ingress.queue.keys.ready_probe, "1", px=READY_PROBE_TTL_MS)
    except (TimeoutError, ConnectionError, RedisConnectionError, RedisTimeoutError):
        return JSONResponse({"status": "redis unreachable"}, status_code=503)
    except RedisError as exc:  # READONLY, OOM, MISCONF, MOVED, NOPERM, ...
        refusal = str(exc).split("\n", 1)[0][:200]
        return JSONResponse({"status": "redis refuses writes", "error": refusal}, status_code=503)
    return JSONResponse({"status": "ready"})


async def metrics(request: Request) -> Response:
    ingress: Ingress = request.app.state.ingress
    await _observe_analyses(ingress)
    body, content_type = ingress.metrics.render()
    return PlainTextResponse(body, media_type=content_type)


async def _observe_analyses(ingress: Ingress) -> None:
    """Set the scrape-time gauges from Redis: the oldest live analysis, the kill switch.

    Skipped, with a log, if Redis is slow.
    """
    try:
        async with asyncio.timeout(1.0):
            oldest = await ingress.redis.zrange(
                ingress.queue.keys.lease_starts, 0, 0, withscores=True
            )
            switch = await KillSwitch(ingress.redis, ingress.queue.keys).state()
    except (RedisError, StoreError, TimeoutError) as exc:
        log.info("scrape-time gauges not read: %s", exc)
        return
    age = time.time() - float(oldest[0][1]) / 1000 if oldest else 0.0
    ingress.metrics.oldest_analysis.set(max(0.0, age))
    ingress.metrics.killswitch.set(1 if switch.on else 0)
