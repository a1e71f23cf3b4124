"""The HTTP ingress: verify → normalize → decide → enqueue → ack, within the platform deadline.

Contract (docs/design.md §Invariants I8): an event is written to Redis before the 200 goes out; when
Redis cannot take it in time the answer is 503, so the platform delivers it again
(docs/reliability.md S10, S14). A request that fails verification gets 401, a malformed one 400
(text that cannot be encoded too: `bot.adapters.untrusted_json`, X14), an oversized one 413 and a
body not received within `CHATOPS_BODY_READ_TIMEOUT_S` 408, both before any signature work and with
the connection closed (`bot.ingress.body_limits`, X13); never a 500, and bodies are generic. No
model or tool work happens in the request.

This module builds the app and runs its lifespan: the settings checked before anything is
served, the clients opened (and closed when it owns them), Slack's Socket Mode and Feishu's long
connection received alongside the webhooks. The routes are `bot.ingress.webhooks` (platforms),
`bot.ingress.alert_webhooks` (alert senders), `bot.ingress.probes` (health, readiness, metrics)
and `bot.ingress.run_pages` (replay pages); what they share is `bot.ingress.context`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from fastapi import FastAPI
from starlette.types import Scope

from bot.adapters.slack.inbound import SlackIdentity
from bot.errors import BotConfigError, QueueUnavailable
from bot.ingress.alert_webhooks import add_alert_webhooks
from bot.ingress.body_limits import BodyLimits, BoundedBody
from bot.ingress.context import (
    ACK_BUDGET_S,
    MAX_BODY_BYTES,
    REDIS_CALL_S,
    Ingress,
    ingress_redis,
)
from bot.ingress.probes import add_probes
from bot.ingress.run_pages import add_run_pages
from bot.ingress.webhooks import add_webhooks
from bot.intake.metrics import IngressMetrics
from bot.intake.queue import Queue
from bot.policy.alert_routes import AlertRoute, parse_alert_routes
from bot.process.loop_lag import monitor_loop_lag
from bot.settings import Settings

if TYPE_CHECKING:  # lark_oapi is imported only when Feishu is configured
    from bot.adapters.feishu.inbound import FeishuIdentity, FeishuVerifier

__all__ = ["MAX_BODY_BYTES", "create_app", "ingress_redis"]

log = logging.getLogger(__name__)


_NO_NATIVE_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)
"""FastAPI's own OpenTelemetry spans, metrics and exception logs stay off: the ingress's spans
are `bot.tracing`'s, which redact what they carry, while FastAPI's logs would export exception
messages as they are. Off, FastAPI also skips its per-request look at the global providers.
FastAPI before its native telemetry has no such parameter, nor the cost."""


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
    routes = parse_alert_routes(settings.alert_routes)  # an invalid route stops start-up

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = redis if redis is not None else _redis_from(settings)
        try:
            app.state.ingress = await _open_ingress(settings, client, slack, feishu, clock, routes)
            try:
                async with _receivers(settings, app.state.ingress, feishu_long_connection):
                    yield
            finally:
                await app.state.ingress.queue.aclose()
        finally:
            if redis is None:  # its own client
                await client.aclose()

    app = FastAPI(
        title="chatops ingress",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        **_NO_NATIVE_TELEMETRY,
    )
    limits = BodyLimits(max_bytes=MAX_BODY_BYTES, read_timeout_s=settings.body_read_timeout_s)
    app.add_middleware(BoundedBody, limits=limits, on_refused=_count_refused)
    add_webhooks(app)
    add_alert_webhooks(app)
    add_run_pages(app)
    add_probes(app)
    return app


async def _open_ingress(
    settings: Settings,
    client: aioredis.Redis,
    slack: SlackIdentity | None,
    feishu: FeishuIdentity | None,
    clock: Callable[[], float],
    routes: tuple[AlertRoute, ...],
) -> Ingress:
    """What the routes need: the platforms' identities, and the queue (its group made if it can)."""
    identity = slack or await _slack_identity(settings)
    verifier = await _feishu_verifier(settings, feishu)
    metrics = IngressMetrics()
    queue = Queue(
        client,
        replicas=settings.redis_wait_replicas,
        on_unreplicated=metrics.unreplicated.inc,
        batched=True,
    )
    try:
        async with asyncio.timeout(REDIS_CALL_S):
            await queue.ensure_group()
    except (QueueUnavailable, TimeoutError) as exc:
        # serve anyway: /readyz says 503, events get 503
        log.warning("starting without Redis: %s", exc)
    return Ingress(settings, client, queue, metrics, identity, verifier, clock, routes)


@asynccontextmanager
async def _receivers(
    settings: Settings, ingress: Ingress, feishu_long_connection: bool
) -> AsyncIterator[None]:
    """While the app runs: the loop-lag monitor, Feishu's long connection, Slack's Socket Mode."""
    if feishu_long_connection and ingress.feishu is not None:
        from bot.adapters.feishu.long_connection import start_long_connection

        start_long_connection(
            settings, ingress.queue, ingress.feishu.identity, submit=ingress.intake.submit
        )
    async with monitor_loop_lag(ingress.metrics.event_loop_lag), _socket_mode(settings, ingress):
        yield


def _count_refused(scope: Scope, status: int) -> None:
    """Count a body refused by `BoundedBody` (408, 413) with the route's platform."""
    ingress: Ingress | None = getattr(scope["app"].state, "ingress", None)
    if ingress is None:
        return  # before the lifespan ran: nothing to count on
    platform = str(scope["path"]).strip("/").partition("/")[0]
    label = platform if platform in ("slack", "feishu", "console") else "other"
    ingress.metrics.rejected.labels(label, str(status)).inc()


def _redis_from(settings: Settings) -> aioredis.Redis:
    assert settings.redis_url, "checked in create_app"
    return ingress_redis(
        settings.redis_url,
        max_connections=settings.redis_max_connections,
        wait_s=min(settings.redis_pool_timeout_s, ACK_BUDGET_S),
        topology=settings.redis_topology,
    )


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
    """Refuse to run Feishu without encryption and a verification token (docs/reliability.md F2)."""
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
