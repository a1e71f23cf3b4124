"""The Slack Web API client (slack_sdk), pointed at `SLACK_API_URL` when it is set."""

from __future__ import annotations

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.adapters.slack.inbound import SlackIdentity
from bot.errors import BotConfigError
from bot.settings import Settings

__all__ = ["fetch_identity", "web_client"]

DEFAULT_SLACK_API_URL = "https://slack.com/api/"


def web_client(settings: Settings) -> AsyncWebClient:
    """A Web API client for the bot token, at `SLACK_API_URL` or Slack's own address."""
    if settings.slack_bot_token is None:
        raise BotConfigError("SLACK_BOT_TOKEN is not set")
    base = settings.slack_api_url or DEFAULT_SLACK_API_URL
    return AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(),
        base_url=base if base.endswith("/") else base + "/",
    )


async def fetch_identity(settings: Settings) -> SlackIdentity:
    """Ask Slack who the bot is (`auth.test`), so its own posts are never taken as input."""
    client = web_client(settings)  # no shared session: slack_sdk opens and closes one per call
    try:
        reply = await client.auth_test()
    except SlackApiError as exc:
        raise BotConfigError(f"Slack auth.test failed: {exc.response.get('error')}") from exc
    return SlackIdentity(
        user_id=str(reply["user_id"]),
        bot_id=str(reply.get("bot_id") or ""),
        team_id=str(reply.get("team_id") or ""),
    )
