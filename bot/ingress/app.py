"""The HTTP ingress: verify → normalize → decide → enqueue → ack, within the platform deadline.

Contract (DESIGN.md invariant 8): an event is written to Redis before the 200 goes out; when
Redis cannot take it in time the answer is 503, so the platform delivers it again (RELIABILITY
S10, S14). A request that fails verification gets 401, a malformed one 400 (text that cannot be
encoded too: `bot.adapters.untrusted_json`, X14), an oversized one 413 and a body not received
within `CHATOPS_BODY_READ_TIMEOUT_S` 408, both before any signature work and with the connection
closed (`bot.ingress.body_limits`, X13); never a 500, and bodies are generic. No model or tool
work happens in the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from redis.exceptions import RedisError
from starlette.types import Scope

from agent_core import StoreError
from bot.adapters.console.inbound import parse_console, verify_console
from bot.adapters.slack.inbound import SlackIdentity, parse_slack, verify_slack
from bot.control.approval_desk import ApprovalDesk
from bot.control.killswitch import KillSwitch, KillSwitchDesk
from bot.errors import (
    BodyTooLarge,
    BotConfigError,
    MalformedRequest,
    QueueUnavailable,
    RequestRejected,
)
from bot.events import ChatEvent
from bot.ingress.body_limits import BodyLimits, BoundedBody
from bot.intake.accept import Intake
from bot.intake.metrics import IngressMetrics
from bot.intake.queue import Queue
from bot.ops.runs import replay_page
from bot.process.loop_lag import monitor_loop_lag
from bot.settings import Settings
from bot.state.audit import AuditLog

if TYPE_CHECKING:  # lark_oapi is imported only when Feishu is configured
    from bot.adapters.feishu.inbound import FeishuIdentity, FeishuVerifier

__all__ = ["ACK_BUDGET_S", "MAX_BODY_BYTES", "Ingress", "create_app", "ingress_redis"]

NONCE_TTL_S = 600
"""Feishu nonces are remembered for twice the ±5-minute window, so no replay fits in it."""

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1_000_000
"""Larger bodies are refused with 413 before any signature work (RELIABILITY S16)."""
ACK_BUDGET_S = 2.5
"""Time allowed for the Redis work of one request; the platforms give up after 3 s."""
_REDIS_CALL_S = 5.0
"""Deadline of the ingress's Redis calls that no request waits on (startup, cleanup)."""


@dataclass(eq=False)
class Ingress:
    """What the routes need, built once per app."""

    settings: Settings
    redis: aioredis.Redis
    queue: Queue
    metrics: IngressMetrics
    slack: SlackIdentity | None = None
    feishu: FeishuVerifier | None = None
    clock: Callable[[], float] = time.time
    intake: Intake = field(init=False)

    def __post_init__(self) -> None:
        audit = AuditLog.from_settings(self.redis, self.queue.keys, self.settings)
        desk = ApprovalDesk(
            self.redis, self.queue.keys, self.settings.responder_ids, self.clock, audit
        )
        switch_desk = KillSwitchDesk(
            KillSwitch(self.redis, self.queue.keys, audit), self.settings.admin_ids
        )
        self.intake = Intake(self.queue, desk, switch_desk, self.redis, audit)

    async def forget_nonce(self, nonce: str) -> None:
        """Drop a recorded nonce (best effort: Redis just failed us once already)."""
        if not nonce:
            return
        try:
            async with asyncio.timeout(_REDIS_CALL_S):
                await self.redis.delete(self.queue.keys.seen_nonce(nonce))
        except (RedisError, TimeoutError) as exc:
            log.warning("could not forget a nonce: %s", exc)

    async def fresh_nonce(self, nonce: str) -> bool:
        """Record a Feishu nonce; False when it was seen within the window (a replay)."""
        key = self.queue.keys.seen_nonce(nonce)
        try:
            return bool(await self.redis.set(key, "1", nx=True, ex=NONCE_TTL_S))
        except RedisError as exc:
            raise QueueUnavailable(f"cannot check the nonce: {exc}") from exc


async def _read_body(request: Request) -> bytes:
    # `BoundedBody` has read the body within its deadline and limit already; counting again
    # costs nothing and keeps a route safe should it ever be mounted without the middleware.
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


def _ok() -> Response:
    return Response(b'{"ok":true}', media_type="application/json")


def _rejected(exc: RequestRejected, *, slack: bool = False) -> JSONResponse:
    headers = {"X-Slack-No-Retry": "1"} if slack and exc.status == 400 else None
    return JSONResponse({"error": exc.public}, status_code=exc.status, headers=headers)


def _unavailable() -> JSONResponse:
    # No X-Slack-No-Retry: the platform must deliver this event again.
    return JSONResponse({"error": "temporarily unavailable, retry"}, status_code=503)


async def _accept(ingress: Ingress, event: ChatEvent, budget: float = ACK_BUDGET_S) -> Response:
    """Decide and enqueue within `budget` seconds; 503 when Redis cannot take the event.

    An Approve or Deny press is decided at once (`bot.intake.accept`); its answer is the body's
    `message` (a Feishu card callback shows it as a toast). So is an admin's kill switch command.
    """
    try:
        async with asyncio.timeout(max(budget, 0.0)):
            taken = await ingress.intake.take(event)
    except (TimeoutError, QueueUnavailable, StoreError) as exc:
        ingress.metrics.unavailable.inc()
        log.warning("event %s not accepted: %s", event.event_id, exc)
        return _unavailable()
    ingress.metrics.event(event.platform.value, taken.outcome)
    if (press := taken.press) is not None:
        return JSONResponse({"ok": True, "approval": press.outcome.value, "message": press.message})
    if (switched := taken.switched) is not None:
        said = {"killswitch": switched.outcome.value, "message": switched.message}
        return JSONResponse({"ok": True, **said})
    return _ok()


async def _feishu(request: Request, *, card: bool) -> Response:
    ingress: Ingress = request.app.state.ingress
    if ingress.feishu is None:
        return JSONResponse({"error": "feishu is not configured"}, status_code=404)
    clock = asyncio.get_running_loop().time
    deadline = clock() + ACK_BUDGET_S  # one budget for verification and the write together
    try:
        async with asyncio.timeout_at(deadline):
            body = await _read_body(request)
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
        return _rejected(exc)
    except (TimeoutError, QueueUnavailable) as exc:
        log.warning("feishu request not accepted: %s", exc)
        return _unavailable()
    if inbound.challenge is not None:
        return JSONResponse({"challenge": inbound.challenge})
    if inbound.replay:
        ingress.metrics.event("feishu", "replay")
        return JSONResponse({"ok": True})
    if inbound.event is None:
        return JSONResponse({"ok": True})
    response = await _accept(ingress, inbound.event, budget=deadline - clock())
    if response.status_code == 503:
        # Not written: forget the nonce, so a redelivery of these very bytes is not taken for
        # a replay (the event-id dedupe still guarantees it is written once).
        await ingress.forget_nonce(request.headers.get("x-lark-request-nonce", ""))
    if card and response.status_code == 200:
        said = json.loads(bytes(response.body)).get("message", "Received.")
        return JSONResponse({"toast": {"type": "info", "content": said}})
    return response


async def _console(request: Request) -> Response:
    """The console platform's events: bearer token, then the same path as Slack's events."""
    ingress: Ingress = request.app.state.ingress
    token = ingress.settings.console_token
    if token is None:
        return JSONResponse({"error": "console is not configured"}, status_code=404)
    try:
        verify_console(request.headers, token.get_secret_value())
        body = await _read_body(request)
        event = parse_console(body, now=ingress.clock())
    except RequestRejected as exc:
        ingress.metrics.rejected.labels("console", str(exc.status)).inc()
        log.info("console request rejected (%s): %s", exc.status, exc.detail)
        if isinstance(exc, MalformedRequest):
            # The client proved it holds the token: tell it which field is wrong (the detail
            # names a field and the rule it breaks, never the value sent).
            return JSONResponse({"error": exc.public, "detail": exc.detail}, status_code=400)
        return _rejected(exc)
    return await _accept(ingress, event)


def _routes(app: FastAPI) -> None:
    # Webhooks are plain Starlette routes: FastAPI's parameter and dependency machinery has
    # nothing to do for a raw-body endpoint, and skipping it was measured in bench/ingress.py.
    async def slack_events(request: Request) -> Response:
        ingress: Ingress = request.app.state.ingress
        secret = ingress.settings.slack_signing_secret
        if secret is None or ingress.slack is None:
            return JSONResponse({"error": "slack is not configured"}, status_code=404)
        try:
            body = await _read_body(request)
            verify_slack(body, request.headers, secret.get_secret_value(), now=ingress.clock)
            inbound = parse_slack(body, request.headers.get("content-type", ""), ingress.slack)
        except RequestRejected as exc:
            ingress.metrics.rejected.labels("slack", str(exc.status)).inc()
            log.info("slack request rejected (%s): %s", exc.status, exc.detail)
            return _rejected(exc, slack=True)
        if inbound.challenge is not None:
            return JSONResponse({"challenge": inbound.challenge})
        if inbound.event is None:
            return JSONResponse({"ok": True})
        return await _accept(ingress, inbound.event)

    async def feishu_events(request: Request) -> Response:
        return await _feishu(request, card=False)

    async def feishu_card(request: Request) -> Response:
        return await _feishu(request, card=True)

    app.add_route("/slack/events", slack_events, methods=["POST"])
    app.add_route("/feishu/events", feishu_events, methods=["POST"])
    app.add_route("/feishu/card", feishu_card, methods=["POST"])
    app.add_route("/console/events", _console, methods=["POST"])
    app.add_route("/runs/{turn_id}", _run_page, methods=["GET"])

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz(request: Request) -> Response:
        ingress: Ingress = request.app.state.ingress
        try:
            async with asyncio.timeout(1.0):
                await ingress.redis.ping()
        except (TimeoutError, RedisError):
            return JSONResponse({"status": "redis unreachable"}, status_code=503)
        return JSONResponse({"status": "ready"})

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        ingress: Ingress = request.app.state.ingress
        await _observe_analyses(ingress)
        body, content_type = ingress.metrics.render()
        return PlainTextResponse(body, media_type=content_type)


_PAGE_HEADERS = {
    # The page is self-contained and runs no script; these say so to the browser, so even a
    # rendering bug cannot make audit text (model and tool output) act as markup that loads.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


async def _run_page(request: Request) -> Response:
    """The replay page of one analysis (`bot.ops.runs`); 404 unless `CHATOPS_PUBLIC_URL` is set."""
    ingress: Ingress = request.app.state.ingress
    turn_id = str(request.path_params["turn_id"])
    if not ingress.settings.public_url:
        return JSONResponse({"error": "replay pages are not enabled"}, status_code=404)
    try:
        async with asyncio.timeout(_REDIS_CALL_S):
            page = await replay_page(ingress.redis, turn_id, ingress.queue.keys)
    except (StoreError, TimeoutError) as exc:
        log.warning("replay page of %s not read: %s", turn_id, exc)
        return _unavailable()
    if page is None:
        return JSONResponse({"error": "no such run"}, status_code=404)
    return HTMLResponse(page, headers=_PAGE_HEADERS)


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


def create_app(
    settings: Settings,
    *,
    redis: aioredis.Redis | None = None,
    slack: SlackIdentity | None = None,
    feishu: FeishuIdentity | None = None,
    feishu_long_connection: bool = False,
    clock: Callable[[], float] = time.time,
) -> FastAPI:
    """Build the ingress app. Clients passed in are used as they are and not closed.

    Raises:
        BotConfigError: The settings cannot work (checked here, before anything is served).
    """
    if redis is None and not settings.redis_url:
        raise BotConfigError("REDIS_URL is not set (the embedded Redis is for `chatops demo`)")
    _check_feishu(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own_redis = redis is None
        client = redis if redis is not None else _redis_from(settings)
        try:
            identity = slack or await _slack_identity(settings)
            verifier = await _feishu_verifier(settings, feishu)
            queue = Queue(client)
            try:
                async with asyncio.timeout(_REDIS_CALL_S):
                    await queue.ensure_group()
            except (QueueUnavailable, TimeoutError) as exc:
                # serve anyway: /readyz says 503, events get 503
                log.warning("starting without Redis: %s", exc)
            app.state.ingress = Ingress(
                settings, client, queue, IngressMetrics(), identity, verifier, clock
            )
            if feishu_long_connection and verifier is not None:
                from bot.adapters.feishu.long_connection import start_long_connection

                start_long_connection(
                    settings, queue, verifier.identity, submit=app.state.ingress.intake.submit
                )
            async with (
                monitor_loop_lag(app.state.ingress.metrics.event_loop_lag),
                _socket_mode(settings, app.state.ingress),
            ):
                yield
        finally:
            if own_redis:
                await client.aclose()

    app = FastAPI(title="chatops ingress", lifespan=lifespan, docs_url=None, redoc_url=None)
    limits = BodyLimits(max_bytes=MAX_BODY_BYTES, read_timeout_s=settings.body_read_timeout_s)
    app.add_middleware(BoundedBody, limits=limits, on_refused=_count_refused)
    _routes(app)
    return app


def _count_refused(scope: Scope, status: int) -> None:
    """Count a body refused by `BoundedBody` (408, 413) with the route's platform."""
    ingress: Ingress | None = getattr(scope["app"].state, "ingress", None)
    if ingress is None:
        return  # before the lifespan ran: nothing to count on
    platform = str(scope["path"]).strip("/").partition("/")[0]
    label = platform if platform in ("slack", "feishu", "console") else "other"
    ingress.metrics.rejected.labels(label, str(status)).inc()


def ingress_redis(url: str) -> aioredis.Redis:
    """The ingress's Redis client (bench/ingress.py builds the same).

    redis-py's per-command socket timeout is off: it wraps every read in a timer of its own, a
    cost on the webhook's hot path (with it off, bench/ingress.py moved from 0.48-0.50x to
    0.51-0.53x of a bare endpoint, together with the lookup caching in routing and metrics).
    Every command this client sends runs under a deadline of the caller's instead (the 2.5 s
    ack budget, readyz's 1 s, `_REDIS_CALL_S` elsewhere), and redis-py drops a connection
    whose command was cancelled. A URL that sets
    `socket_timeout` still wins.
    """
    return aioredis.Redis.from_url(url, socket_timeout=None, socket_connect_timeout=_REDIS_CALL_S)


def _redis_from(settings: Settings) -> aioredis.Redis:
    assert settings.redis_url, "checked in create_app"
    return ingress_redis(settings.redis_url)


@asynccontextmanager
async def _socket_mode(settings: Settings, ingress: Ingress) -> AsyncIterator[None]:
    """Receive Slack over Socket Mode too while the app runs, when `SLACK_APP_TOKEN` is set."""
    if settings.slack_app_token is None or ingress.slack is None:
        yield
        return
    from bot.adapters.slack.socket_mode import run_socket_mode

    async with asyncio.TaskGroup() as group:  # a receiver that fails takes the app down
        receiver = group.create_task(
            run_socket_mode(
                settings,
                ingress.queue,
                ingress.slack,
                metrics=ingress.metrics,
                submit=ingress.intake.submit,
            )
        )
        try:
            yield
        finally:
            receiver.cancel()  # stops gracefully: in-flight envelopes finish and are acked


async def _slack_identity(settings: Settings) -> SlackIdentity | None:
    """The bot's identity, when a bot token is set (webhooks also need the signing secret)."""
    if settings.slack_bot_token is None:
        return None
    from bot.adapters.slack.client import fetch_identity

    return await fetch_identity(settings)


def _check_feishu(settings: Settings) -> None:
    """Refuse to run Feishu without encryption and a verification token (RELIABILITY F2)."""
    if not settings.feishu_app_id:
        return
    if settings.feishu_encrypt_key is None or settings.feishu_verification_token is None:
        raise BotConfigError(
            "Feishu needs FEISHU_ENCRYPT_KEY and FEISHU_VERIFICATION_TOKEN: unencrypted, "
            "unsigned event delivery is refused"
        )


async def _feishu_verifier(
    settings: Settings, identity: FeishuIdentity | None
) -> FeishuVerifier | None:
    if not settings.feishu_app_id:
        return None
    # Imported only when Feishu is configured: `import lark_oapi` takes seconds.
    from bot.adapters.feishu.client import fetch_identity
    from bot.adapters.feishu.inbound import FeishuVerifier

    assert settings.feishu_encrypt_key and settings.feishu_verification_token
    return FeishuVerifier(
        encrypt_key=settings.feishu_encrypt_key.get_secret_value(),
        verification_token=settings.feishu_verification_token.get_secret_value(),
        identity=identity or await fetch_identity(settings),
    )
