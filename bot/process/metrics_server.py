"""`GET /metrics` for processes that have no HTTP app of their own (the worker).

aiohttp's `AppRunner`, on the process's own event loop, rather than
`prometheus_client.start_http_server` (a thread: the scrape-time gauges read Redis through the
process's asyncio client, which lives on the loop) or uvicorn's `Server.serve()` (it installs
SIGTERM/SIGINT handlers of its own, which would replace the worker's drain). aiohttp is a
dependency already (slack-bolt's async app), installs no signal handler when run this way, and
`cleanup()` closes the socket and any scrape in progress.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["Render", "serve_metrics"]

Render = Callable[[], Awaitable[bytes]]
"""Produces the exposition body, reading scrape-time values first."""


@asynccontextmanager
async def serve_metrics(render: Render, host: str, port: int) -> AsyncIterator[None]:
    """Serve `GET /metrics` on `host:port` while the context is open.

    Raises:
        OSError: The address cannot be bound (in use, not local).
    """

    async def metrics(_: web.Request) -> web.Response:
        body = await render()
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield
    finally:
        await runner.cleanup()
