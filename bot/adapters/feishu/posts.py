"""Notices on Feishu/Lark: `ChannelPoster` over lark-oapi's IM API (create, and reply in topic).

Contract:

* `post_root` is `POST /open-apis/im/v1/messages?receive_id_type=chat_id`: a new message at
  the top of the chat (`channel` is its `oc_` chat id), `msg_type` and `content` from
  `render_feishu_notice`. The root's `thread` is its `message_id`, which is what Feishu's events
  in its topic name as their root (`bot.adapters.feishu.inbound`), and what `FeishuCards` replies
  to. Its `workspace` is the tenant key those events carry: `FEISHU_TENANT_KEY` when set, else
  the `sender.tenant_key` Feishu answers the message with (kept once known). Its `link` is the
  answer's `message_app_link` when Feishu gives one (an `https` applink, checked by
  `safe_url`), else "".
* `post_in_thread` is `POST /open-apis/im/v1/messages/{root}/reply` with `reply_in_thread`, so
  the notice lands in the root's topic, like the analysis's card.
* `key` is sent as `uuid` (`bounded_key`: at most 50 characters): Feishu posts at most one
  message per `uuid` within an hour, and answers a repeat with the first message, so a retry
  after a lost answer posts once.
* Failures leave as `bot.publishing.platform` errors, through `map_feishu_errors()` and
  `check_response()` (`CardGone` when the root was recalled). Calls run lark-oapi's synchronous
  client in a worker thread, bounded by `timeout_s`, for the reasons `bot.adapters.feishu.cards`
  gives; lark-oapi never retries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import lark_oapi as lark
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)

from bot.adapters.feishu.cards import DEFAULT_TIMEOUT_S, check_response, map_feishu_errors
from bot.adapters.feishu.client import open_client
from bot.errors import PlatformRejected
from bot.publishing.channel_posts import PostedRoot, bounded_key
from bot.settings import Settings
from cards import Notice, render_feishu_notice, safe_url

__all__ = ["FeishuPoster"]


class FeishuPoster:
    """Posts notices at the top of Feishu chats, and into their topics."""

    def __init__(
        self, client: lark.Client, *, tenant_key: str = "", timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        """Wrap an Open API client.

        Args:
            client: A lark-oapi client with the app's credentials.
            tenant_key: Our tenant (`FEISHU_TENANT_KEY`); empty: learnt from the first post.
            timeout_s: Upper bound on each call, in seconds.
        """
        self._client = client
        self._tenant = tenant_key
        self._timeout_s = timeout_s

    @classmethod
    def from_settings(
        cls, settings: Settings, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> FeishuPoster:
        """Build the client from `FEISHU_APP_ID` / `FEISHU_APP_SECRET` / `FEISHU_DOMAIN`.

        Raises:
            BotConfigError: The app credentials are not set.
        """
        client = open_client(settings)
        client.config.timeout = timeout_s  # `requests` timeout in the worker thread
        return cls(client, tenant_key=settings.feishu_tenant_key or "", timeout_s=timeout_s)

    async def post_root(self, channel: str, notice: Notice, *, key: str) -> PostedRoot:
        """Post `notice` at the top of the chat `channel`; its tenant, message id and link.

        Raises:
            PlatformError: One of its subclasses, from the Feishu error map.
        """
        msg_type, content = render_feishu_notice(notice)
        body = (
            CreateMessageRequestBody.builder()
            .receive_id(channel)
            .msg_type(msg_type)
            .content(content)
            .uuid(bounded_key(key))
            .build()
        )
        request = (
            CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
        )
        data = (await self._call(self._client.im.v1.message.create, request)).data
        message_id = getattr(data, "message_id", None)
        if not isinstance(message_id, str) or not message_id:
            raise PlatformRejected("Feishu create answered without a message_id")
        if not self._tenant:
            tenant = getattr(getattr(data, "sender", None), "tenant_key", None)
            self._tenant = tenant if isinstance(tenant, str) else ""
        link = getattr(data, "message_app_link", None)
        return PostedRoot(
            workspace=self._tenant,
            thread=message_id,
            link=safe_url(link) if isinstance(link, str) else "",
        )

    async def post_in_thread(self, channel: str, thread: str, notice: Notice, *, key: str) -> None:
        """Reply to the root `thread` with `notice`, in its topic.

        Raises:
            PlatformError: One of its subclasses; `CardGone` if the root was recalled.
        """
        msg_type, content = render_feishu_notice(notice)
        body = (
            ReplyMessageRequestBody.builder()
            .msg_type(msg_type)
            .content(content)
            .reply_in_thread(True)
            .uuid(bounded_key(key))
            .build()
        )
        request = ReplyMessageRequest.builder().message_id(thread).request_body(body).build()
        await self._call(self._client.im.v1.message.reply, request)

    async def _call(self, method: Callable[[Any], Any], request: Any) -> Any:
        """Run one synchronous typed call in a thread, bounded, and check its answer."""
        with map_feishu_errors():
            async with asyncio.timeout(self._timeout_s):
                response = await asyncio.to_thread(method, request)
        check_response(response)
        return response
