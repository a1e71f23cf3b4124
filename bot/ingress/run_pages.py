"""The replay page of one analysis, `GET /runs/{turn_id}`, served when `CHATOPS_PUBLIC_URL` is set.

Contract: the page (`bot.ops.runs`) is self-contained and runs no script, and its headers say so
to the browser, so even a rendering bug cannot make audit text (model and tool output) act as
markup that loads. 404 when replay pages are off or the run is unknown; 503 when Redis cannot
be read within `REDIS_CALL_S`.
"""

from __future__ import annotations

import asyncio
import logging

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from agent_core import StoreError
from bot.ingress.ack import unavailable
from bot.ingress.context import REDIS_CALL_S, Ingress
from bot.ops.runs import replay_page

__all__ = ["add_run_pages"]

log = logging.getLogger("bot.ingress.app")  # the logger name the ingress's log lines always had

_PAGE_HEADERS = {
    # The page is self-contained and runs no script; these say so to the browser, so even a
    # rendering bug cannot make audit text (model and tool output) act as markup that loads.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def add_run_pages(app: FastAPI) -> None:
    """Add the replay page's route to `app`."""
    app.add_route("/runs/{turn_id}", _run_page, methods=["GET"])


async def _run_page(request: Request) -> Response:
    """The replay page of one analysis (`bot.ops.runs`); 404 unless `CHATOPS_PUBLIC_URL` is set."""
    ingress: Ingress = request.app.state.ingress
    turn_id = str(request.path_params["turn_id"])
    if not ingress.settings.public_url:
        return JSONResponse({"error": "replay pages are not enabled"}, status_code=404)
    try:
        async with asyncio.timeout(REDIS_CALL_S):
            page = await replay_page(ingress.redis, turn_id, ingress.queue.keys)
    except (StoreError, TimeoutError) as exc:
        log.warning("replay page of %s not read: %s", turn_id, exc)
        return unavailable()
    if page is None:
        return JSONResponse({"error": "no such run"}, status_code=404)
    return HTMLResponse(page, headers=_PAGE_HEADERS)
