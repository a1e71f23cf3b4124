"""The Feishu Open API client (lark-oapi), pointed at `FEISHU_DOMAIN` when it is set."""

from __future__ import annotations

import asyncio
import json

import lark_oapi as lark

from bot.adapters.feishu.inbound import FeishuIdentity
from bot.errors import BotConfigError
from bot.settings import Settings

__all__ = ["fetch_identity", "open_client"]

DEFAULT_FEISHU_DOMAIN = "https://open.feishu.cn"


def open_client(settings: Settings) -> lark.Client:
    """A lark-oapi client for the app's credentials."""
    if not settings.feishu_app_id or settings.feishu_app_secret is None:
        raise BotConfigError("FEISHU_APP_ID and FEISHU_APP_SECRET are required for Feishu")
    return (
        lark.Client.builder()
        .app_id(settings.feishu_app_id)
        .app_secret(settings.feishu_app_secret.get_secret_value())
        .domain(settings.feishu_domain or DEFAULT_FEISHU_DOMAIN)
        .build()
    )


async def fetch_identity(settings: Settings) -> FeishuIdentity:
    """Ask Feishu who the bot is (`GET /open-apis/bot/v3/info`).

    The answer names the bot's `open_id` but not its tenant: our `tenant_key` comes from
    `FEISHU_TENANT_KEY`, when set (asking Feishu would need another permission scope).

    lark-oapi's async raw request never parses the body (it looks up a header httpx has
    lower-cased), and it fetches the tenant token synchronously anyway: the synchronous call
    runs in a worker thread instead, and the body is read directly.
    """
    client = open_client(settings)
    request = (
        lark.BaseRequest.builder()
        .http_method(lark.HttpMethod.GET)
        .uri("/open-apis/bot/v3/info")
        .token_types({lark.AccessTokenType.TENANT})
        .build()
    )
    response = await asyncio.to_thread(client.request, request)
    try:
        body = json.loads(response.raw.content)
        open_id = body["bot"]["open_id"]
    except (TypeError, ValueError, KeyError) as exc:
        raise BotConfigError(f"Feishu bot info failed: {response.raw.content[:200]!r}") from exc
    return FeishuIdentity(
        open_id=str(open_id),
        app_id=settings.feishu_app_id or "",
        tenant_key=settings.feishu_tenant_key or "",
    )
