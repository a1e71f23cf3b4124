"""Progress cards on Slack: `ChatPlatform` over slack_sdk's `AsyncWebClient`.

Contract:

* `post_card` is `chat.postMessage` in the mention's thread, `update_card` is `chat.update`,
  `set_status` is `assistant.threads.setStatus` ("" clears the line). Each sends the rendered
  blocks plus the fallback text Slack shows in notifications.
* Slack has no idempotency key for `chat.postMessage`: a card carries its key in its message
  metadata (`CARD_EVENT`), and `find_card` looks for it with `conversations.replies`, so a
  worker that took over from one killed mid-post shows its state on that card.
* Every failure leaves this module as one of the `bot.publishing.platform` errors, decided by
  `map_slack_errors()`; nothing else in `bot` sees a `slack_sdk` or `aiohttp` exception.
* The SDK never retries or sleeps on our behalf. The publisher owns retries: it coalesces card
  updates while rate limited, which an SDK sleeping inside `chat.update` would defeat (a 429
  held for `Retry-After` seconds, then replayed with stale content). slack_sdk 3.x adds only an
  `AsyncConnectionErrorRetryHandler` by default (one retry); `AsyncRateLimitErrorRetryHandler`
  exists but is opt-in. `from_settings` clears the list, and the constructor refuses a client
  that would sleep on 429.
* Every call is bounded by `timeout_s`, whatever the injected client's own timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from bot.adapters.slack.client import web_client
from bot.errors import BotConfigError
from bot.events import Platform
from bot.publishing.platform import (
    CardGone,
    CardRef,
    CardTarget,
    PlatformError,
    PlatformRateLimited,
    PlatformRejected,
    PlatformUnavailable,
)
from bot.settings import Settings
from cards import ProgressCard, render_slack, slack_text

__all__ = [
    "CARD_EVENT",
    "DEFAULT_RETRY_AFTER_S",
    "DEFAULT_TIMEOUT_S",
    "SlackCards",
    "map_slack_errors",
]

DEFAULT_TIMEOUT_S = 10.0
"""Upper bound on one Web API call; a card update that takes longer is better retried."""
DEFAULT_RETRY_AFTER_S = 1.0
"""Backoff for a 429 without a usable `Retry-After` header."""

CARD_EVENT = "chatops_card"
"""The `event_type` of a card's message metadata; its `event_payload` is `{"key": key}`."""
FIND_PAGE_SIZE = 200
"""Replies a `conversations.replies` page of `find_card` asks for."""
FIND_PAGES = 5
"""Pages `find_card` reads at most (from the post's start, so its card is on the first)."""

_GONE = frozenset({"message_not_found", "cant_update_message"})
"""The card's message was deleted, or the ts names a message the bot did not write."""
_TRANSIENT = frozenset({"internal_error", "fatal_error", "service_unavailable", "request_timeout"})
"""Slack's own "try again later" errors (api.slack.com/methods/chat.postMessage, Errors)."""


class SlackCards:
    """Posts and updates progress cards in Slack threads."""

    def __init__(self, client: AsyncWebClient, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        """Wrap a Web API client.

        Args:
            client: The bot-token client; its retry handlers must not retry 429.
            timeout_s: Upper bound on each call, in seconds.

        Raises:
            BotConfigError: The client would sleep on rate limits itself.
        """
        if any(isinstance(h, AsyncRateLimitErrorRetryHandler) for h in client.retry_handlers):
            raise BotConfigError(
                "SlackCards needs 429s surfaced: remove AsyncRateLimitErrorRetryHandler"
            )
        self._client = client
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        """Ours, shared by every call (opened on the first, in the worker's loop; closed by
        `aclose`): without one slack_sdk opens a session, and a TCP connection, per call,
        5% of a busy worker's CPU (bench/load.py)."""

    @classmethod
    def from_settings(
        cls, settings: Settings, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> SlackCards:
        """Build the client from `SLACK_BOT_TOKEN` / `SLACK_API_URL`, with no SDK retries.

        Raises:
            BotConfigError: `SLACK_BOT_TOKEN` is not set.
        """
        client = web_client(settings)
        client.retry_handlers = []  # the publisher retries; see the module docstring
        client.timeout = max(1, round(timeout_s))  # aiohttp's own bound, in whole seconds
        return cls(client, timeout_s=timeout_s)

    @property
    def platform(self) -> Platform:
        """Always `Platform.SLACK`."""
        return Platform.SLACK

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        """Post `card` as a reply in the target thread, `key` in its metadata.

        Raises:
            PlatformError: One of its subclasses, from `map_slack_errors()`.
        """
        blocks = await asyncio.to_thread(render_slack, card)  # an answer can be 40 KB
        with map_slack_errors():
            async with asyncio.timeout(self._timeout_s):
                response = await self._web().chat_postMessage(
                    channel=target.channel,
                    thread_ts=target.thread,
                    blocks=blocks,
                    text=slack_text(card),
                    metadata={"event_type": CARD_EVENT, "event_payload": {"key": key}},
                )
        return CardRef(platform=Platform.SLACK, channel=target.channel, message_id=_ts(response))

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        """The thread's reply since `posted_after` whose metadata names `key`, if any.

        `conversations.replies` with `include_all_metadata` (scopes `channels:history`,
        `groups:history`), from `oldest`, at most `FIND_PAGES` pages.

        Raises:
            PlatformError: One of its subclasses, from `map_slack_errors()`.
        """
        cursor = ""
        for _ in range(FIND_PAGES):
            with map_slack_errors():
                async with asyncio.timeout(self._timeout_s):
                    response = await self._web().conversations_replies(
                        channel=target.channel,
                        ts=target.thread,
                        oldest=f"{posted_after:.6f}",
                        inclusive=True,
                        include_all_metadata=True,
                        limit=FIND_PAGE_SIZE,
                        cursor=cursor or None,
                    )
            page = response.data if isinstance(response.data, dict) else {}
            messages = page.get("messages")
            for message in messages if isinstance(messages, list) else ():
                if _names_card(message, key):
                    ts = message["ts"]
                    return CardRef(platform=Platform.SLACK, channel=target.channel, message_id=ts)
            more = page.get("response_metadata")
            following = more.get("next_cursor") if isinstance(more, dict) else None
            if not page.get("has_more") or not isinstance(following, str) or not following:
                return None
            cursor = following
        return None

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        """Replace the posted card's blocks and fallback text.

        Raises:
            PlatformError: One of its subclasses; `CardGone` if the message was deleted.
        """
        blocks = await asyncio.to_thread(render_slack, card)
        with map_slack_errors():
            async with asyncio.timeout(self._timeout_s):
                await self._web().chat_update(
                    channel=ref.channel,
                    ts=ref.message_id,
                    blocks=blocks,
                    text=slack_text(card),
                )

    async def set_status(self, target: CardTarget, status: str) -> None:
        """Set (or with "" clear) the thread's "is doing…" line.

        Raises:
            PlatformError: One of its subclasses, from `map_slack_errors()`.
        """
        with map_slack_errors():
            async with asyncio.timeout(self._timeout_s):
                await self._web().assistant_threads_setStatus(
                    channel_id=target.channel, thread_ts=target.thread, status=status
                )

    def _web(self) -> AsyncWebClient:
        """The client, with the shared session attached (a new one if it was closed)."""
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=self._client.timeout)
            self._session = aiohttp.ClientSession(timeout=timeout)
            self._client.session = self._session
        return self._client

    async def aclose(self) -> None:
        """Close the shared session, if a call opened it. Idempotent."""
        session, self._session = self._session, None
        if session is not None:
            self._client.session = None
            await session.close()


def _names_card(message: Any, key: str) -> bool:
    """Whether a `conversations.replies` message is the card posted with `key`."""
    if not isinstance(message, dict) or not isinstance(message.get("ts"), str):
        return False
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != CARD_EVENT:
        return False
    payload = metadata.get("event_payload")
    return isinstance(payload, dict) and payload.get("key") == key


def _ts(response: AsyncSlackResponse) -> str:
    ts = response.get("ts")
    if not isinstance(ts, str) or not ts:
        raise PlatformRejected(f"chat.postMessage answered without a ts: {response.data!r:.200}")
    return ts


@contextmanager
def map_slack_errors() -> Iterator[None]:
    """Translate slack_sdk / aiohttp failures into platform errors, `from` the original.

    `asyncio.CancelledError` is a `BaseException` and passes through untouched.

    Raises:
        PlatformRateLimited: HTTP 429 or `ratelimited`.
        CardGone: `message_not_found`, `cant_update_message`.
        PlatformUnavailable: Connection failures, timeouts, 5xx, Slack's transient errors.
        PlatformRejected: Anything else (`invalid_auth`, `channel_not_found`, bad blocks, ...).
    """
    try:
        yield
    except SlackApiError as exc:
        raise _from_api_error(exc) from exc
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        # ClientConnectorError (refused, DNS), ServerDisconnectedError, payload errors; aiohttp's
        # own timeout and ours both surface as TimeoutError.
        raise PlatformUnavailable(f"Slack unreachable: {type(exc).__name__}: {exc}") from exc
    except SlackClientError as exc:
        raise PlatformRejected(f"Slack client error: {exc}") from exc


def _from_api_error(exc: SlackApiError) -> PlatformError:
    """The platform error for one failed Web API answer."""
    status, headers, error = _answer(exc.response)
    if status == 429 or error == "ratelimited":
        return PlatformRateLimited(_retry_after(headers), f"Slack rate limited ({error})")
    if error in _GONE:
        return CardGone(f"Slack: {error}")
    if status >= 500 or error in _TRANSIENT:
        return PlatformUnavailable(f"Slack HTTP {status}: {error}")
    return PlatformRejected(f"Slack HTTP {status}: {error}")


def _answer(response: Any) -> tuple[int, Mapping[str, str], str]:
    """HTTP status, headers and `error` of a failed answer.

    slack_sdk normally attaches an `AsyncSlackResponse`, but when the body is not JSON (a
    proxy's HTML error page) it attaches the raw `aiohttp.ClientResponse` instead.
    """
    if isinstance(response, AsyncSlackResponse):
        data = response.data if isinstance(response.data, dict) else {}
        return response.status_code, response.headers, str(data.get("error") or "")
    if isinstance(response, aiohttp.ClientResponse):
        return response.status, response.headers, "unparsable_response"
    return 0, {}, "unparsable_response"


def _retry_after(headers: Mapping[str, str]) -> float:
    """Seconds from `Retry-After`, looked up case-insensitively, else the default."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), "")
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_RETRY_AFTER_S
    return seconds if seconds >= 0 else DEFAULT_RETRY_AFTER_S
