"""The alert routes' answers: 404 when not configured, 503 when Redis cannot take a notification.

Through the real ingress app over ASGI. A notification Redis could not take is not marked seen,
so the sender's retry (the same bytes) is written once Redis is back.
"""

from __future__ import annotations

import json

import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from bot.ingress.app import create_app
from bot.keys import BotKeys
from bot.settings import Settings
from tests.fakes import alert_senders as senders
from tests.loopback import free_port

TOKEN = "alert-token-for-the-routes-test"
ROUTES = json.dumps([{"name": "all", "platform": "slack", "channel": "C0123"}])


def settings(redis_url: str, **extra: object) -> Settings:
    return Settings(_env_file=None, REDIS_URL=redis_url, **extra)  # type: ignore[arg-type]


async def post(app: object, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    lifespan = app.router.lifespan_context(app)  # type: ignore[attr-defined]
    async with lifespan:
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://bot") as client:
            return await client.post(path, content=body, headers=headers)


def notification() -> tuple[bytes, dict[str, str]]:
    payload = senders.alertmanager_payload(
        group_key='{}:{alertname="X"}', alerts=[senders.am_alert("X", fingerprint="fp-x")]
    )
    return senders.alertmanager_request(payload, TOKEN)


@pytest.mark.parametrize("path", ["/alerts/alertmanager", "/alerts/grafana", "/alerts/pagerduty"])
async def test_a_sender_that_is_not_configured_is_404(redis_server: str, path: str) -> None:
    app = create_app(settings(redis_server))
    response = await post(app, path, b"{}", {"content-type": "application/json"})
    assert response.status_code == 404


async def test_redis_unavailable_is_503_and_the_retry_is_written_once_it_is_back(
    redis_server: str, redis_client: aioredis.Redis
) -> None:
    body, headers = notification()
    down = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    config = settings(redis_server, alert_token=SecretStr(TOKEN), alert_routes=ROUTES)
    response = await post(create_app(config, redis=down), "/alerts/alertmanager", body, headers)
    assert response.status_code == 503
    await down.aclose()

    response = await post(create_app(config), "/alerts/alertmanager", body, headers)
    assert response.status_code == 200 and response.json()["routed"] is True
    assert await redis_client.xlen(BotKeys().alerts_stream) == 1


def test_an_invalid_route_stops_start_up_naming_it(redis_server: str) -> None:
    from bot.errors import BotConfigError

    bad = json.dumps([{"name": "checkout", "platform": "slack", "channel": ""}])
    with pytest.raises(BotConfigError, match="route 'checkout'"):
        create_app(settings(redis_server, alert_routes=bad))
