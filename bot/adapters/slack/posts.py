"""Notices on Slack: `ChannelPoster` over `chat.postMessage`, with the message's permalink.

Contract:

* `post_root` is `chat.postMessage` with no `thread_ts` (a new top-level message), then
  `chat.getPermalink` for its link, best effort: a failed permalink is logged and the link is
  "", the message stays posted. The root's `workspace` is the team id `auth.test` names (asked
  once, then kept), which is what Slack's events carry, so a reply in the thread reaches the
  session the root's thread opened.
* `post_in_thread` is `chat.postMessage` with `thread_ts`, not broadcast to the channel.
* Neither unfurls links (an alert's dashboard preview would bury the thread), neither sets
  `link_names`, so no text can ping anyone (the renderer defuses and escapes it as well).
* Slack has no idempotency key for `chat.postMessage`: `key` is not sent; a retry after a post
  whose answer was lost posts twice (the caller's record decides whether to retry).
* Failures leave as `bot.publishing.platform` errors through `map_slack_errors()`; the SDK
  does not retry (a connection-error retry could post a root twice), and every call is
  bounded by `timeout_s`.
"""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.web.async_client import AsyncWebClient

from bot.adapters.slack.cards import DEFAULT_TIMEOUT_S, map_slack_errors
from bot.adapters.slack.client import fetch_identity, web_client
from bot.errors import BotConfigError, PlatformError, PlatformRejected
from bot.publishing.channel_posts import PostedRoot
from bot.settings import Settings
from cards import Notice, render_slack_notice, safe_url

__all__ = ["SlackPoster"]

log = logging.getLogger(__name__)


class SlackPoster:
    """Posts notices in Slack channels and their threads."""

    def __init__(self, settings: Settings, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Build the client from `SLACK_BOT_TOKEN` / `SLACK_API_URL`, with no SDK retries.

        Raises:
            BotConfigError: `SLACK_BOT_TOKEN` is not set.
        """
        self._settings = settings
        self._client: AsyncWebClient = web_client(settings)
        self._client.retry_handlers = []
        self._client.timeout = max(1, round(timeout_s))
        self._timeout_s = timeout_s
        self._team = ""

    async def post_root(self, channel: str, notice: Notice, *, key: str) -> PostedRoot:
        """Post `notice` at the top of `channel`; its team, `ts` and permalink.

        Raises:
            PlatformError: One of its subclasses, from `map_slack_errors()`; `PlatformRejected`
                when `auth.test` refuses the token.
        """
        team = await self._team_id()
        ts = await self._post(channel, notice, thread="")
        return PostedRoot(workspace=team, thread=ts, link=await self._permalink(channel, ts))

    async def post_in_thread(self, channel: str, thread: str, notice: Notice, *, key: str) -> None:
        """Post `notice` in the thread of `thread` (a root's `ts`).

        Raises:
            PlatformError: One of its subclasses, from `map_slack_errors()`.
        """
        await self._post(channel, notice, thread=thread)

    async def _team_id(self) -> str:
        """The team id events carry, so a reply's session is the root's; asked once."""
        if not self._team:
            try:
                with map_slack_errors():
                    async with asyncio.timeout(self._timeout_s):
                        self._team = (await fetch_identity(self._settings)).team_id
            except BotConfigError as exc:  # auth.test refused the token
                raise PlatformRejected(str(exc)) from exc
        return self._team

    async def _post(self, channel: str, notice: Notice, *, thread: str) -> str:
        text, blocks = render_slack_notice(notice)
        with map_slack_errors():
            async with asyncio.timeout(self._timeout_s):
                response = await self._client.chat_postMessage(
                    channel=channel,
                    text=text,
                    blocks=blocks,
                    unfurl_links=False,
                    unfurl_media=False,
                    thread_ts=thread or None,
                    reply_broadcast=False if thread else None,
                )
        ts = response.get("ts")
        if not isinstance(ts, str) or not ts:
            raise PlatformRejected(
                f"chat.postMessage answered without a ts: {response.data!r:.200}"
            )
        return ts

    async def _permalink(self, channel: str, ts: str) -> str:
        """The message's permalink, or "" when Slack does not give one."""
        try:
            with map_slack_errors():
                async with asyncio.timeout(self._timeout_s):
                    response = await self._client.chat_getPermalink(channel=channel, message_ts=ts)
        except PlatformError as exc:
            log.warning("no permalink for the message %s in %s: %s", ts, channel, exc)
            return ""
        link = response.get("permalink")
        return safe_url(link) if isinstance(link, str) else ""
