"""Progress cards on Feishu/Lark: `ChatPlatform` over lark-oapi's typed IM API.

Contract:

* `post_card` replies to the thread's root message (`POST /open-apis/im/v1/messages/{root}/reply`,
  `msg_type=interactive`, `reply_in_thread=true`), so the card opens (or joins) the root's
  thread the way a Slack reply does. `update_card` is `PATCH /open-apis/im/v1/messages/{id}`
  with the whole re-rendered card. `set_status` is a no-op: Feishu has no status line.
* A card's key is its reply's `uuid`: Feishu makes at most one message per `uuid` within an
  hour and answers a repeat with the first, so a worker that took over from one killed
  mid-post finds that card by posting again (`find_card` has nothing to look up).
* Every failure leaves this module as one of the `bot.publishing.platform` errors: an SDK exception
  through `map_feishu_errors()`, a non-zero `code` in an answer through `check_response()`.
  Feishu answers errors as HTTP 4xx/5xx with `{"code", "msg"}`; lark-oapi does not raise for
  them, it returns them.
* Calls run lark-oapi's *synchronous* client in a worker thread. Its async methods
  (`areply`, `apatch`) do parse answers, but they fetch the tenant token with a blocking
  `requests` call on the event loop (`lark_oapi.core.token.auth.verify`, on the first call and
  again every ~2 h), and open a fresh `httpx.AsyncClient` per call anyway, so they buy no
  connection reuse. A cancelled caller stops waiting at once; the thread finishes its request
  within the client's `timeout` (set to `timeout_s` by `from_settings`).
* lark-oapi never retries; the publisher owns retries and coalesces updates while rate limited.

Only `bot/adapters/feishu*.py` import lark_oapi; the worker imports this module only when
Feishu is configured (importing lark_oapi costs seconds, docs/design.md §Platform facts).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import lark_oapi as lark
from lark_oapi.api.im.v1 import (
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.exception import ObtainAccessTokenException

from bot.adapters.feishu.client import open_client
from bot.events import Platform
from bot.publishing.channel_posts import bounded_key
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
from cards import ProgressCard, render_feishu

__all__ = [
    "DEFAULT_RETRY_AFTER_S",
    "DEFAULT_TIMEOUT_S",
    "FeishuCards",
    "check_response",
    "map_feishu_errors",
]

DEFAULT_TIMEOUT_S = 10.0
"""Upper bound on one Open API call, token fetch included."""
DEFAULT_RETRY_AFTER_S = 1.0
"""Backoff when a rate limit carries no `x-ogw-ratelimit-reset` (230020's window is 1 s)."""

_RATE_LIMITED = frozenset({99991400, 230020})
"""Gateway frequency limit; IM "This operation triggers the frequency limit" (5 PATCH/s/msg)."""
_GONE = frozenset({230011, 231003})
"""230011 "The message is recalled"; 231003 "message not found" (seen on IM message APIs).

230001 "invalid message_id" is deliberately not here: 230001 is Feishu's generic invalid-
parameter code, and telling its cases apart would mean parsing `msg`.
"""


class FeishuCards:
    """Posts and updates progress cards as replies in Feishu threads."""

    def __init__(
        self,
        client: lark.Client,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        reply_in_thread: bool = True,
    ) -> None:
        """Wrap an Open API client.

        Args:
            client: A lark-oapi client with the app's credentials.
            timeout_s: Upper bound on each call, in seconds (the wait; see the module docstring).
            reply_in_thread: Post cards into the root's thread (topic) rather than as a quoted
                reply in the main chat.
        """
        self._client = client
        self._timeout_s = timeout_s
        self._reply_in_thread = reply_in_thread

    @classmethod
    def from_settings(
        cls, settings: Settings, *, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> FeishuCards:
        """Build the client from `FEISHU_APP_ID` / `FEISHU_APP_SECRET` / `FEISHU_DOMAIN`.

        Raises:
            BotConfigError: The app credentials are not set.
        """
        client = open_client(settings)
        client.config.timeout = timeout_s  # `requests` timeout in the worker thread
        return cls(client, timeout_s=timeout_s)

    @property
    def platform(self) -> Platform:
        """Always `Platform.FEISHU`."""
        return Platform.FEISHU

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        """Reply to the thread's root message with `card`, `key` as the reply's `uuid`.

        Raises:
            PlatformError: One of its subclasses; `CardGone` if the root message was recalled.
        """
        content = await asyncio.to_thread(_content, card)  # an answer can be 40 KB
        body = (
            ReplyMessageRequestBody.builder()
            .msg_type("interactive")
            .content(content)
            .reply_in_thread(self._reply_in_thread)
            .uuid(bounded_key(key))
            .build()
        )
        request = ReplyMessageRequest.builder().message_id(target.thread).request_body(body).build()
        response = await self._call(self._client.im.v1.message.reply, request)
        message_id = getattr(response.data, "message_id", None)
        if not isinstance(message_id, str) or not message_id:
            raise PlatformRejected("Feishu reply answered without a message_id")
        return CardRef(platform=Platform.FEISHU, channel=target.channel, message_id=message_id)

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        """None: a reply repeated with the same `uuid` answers with the first one instead."""
        return None

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        """Replace the posted card's content.

        Raises:
            PlatformError: One of its subclasses; `CardGone` if the card was recalled.
        """
        content = await asyncio.to_thread(_content, card)
        body = PatchMessageRequestBody.builder().content(content).build()
        request = (
            PatchMessageRequest.builder().message_id(ref.message_id).request_body(body).build()
        )
        await self._call(self._client.im.v1.message.patch, request)

    async def set_status(self, target: CardTarget, status: str) -> None:
        """Do nothing: Feishu threads have no "is doing…" line."""

    async def aclose(self) -> None:
        """Nothing to release: lark-oapi opens a connection per call."""

    async def _call(self, method: Callable[[Any], Any], request: Any) -> Any:
        """Run one synchronous typed call in a thread, bounded, and check its answer."""
        with map_feishu_errors():
            async with asyncio.timeout(self._timeout_s):
                response = await asyncio.to_thread(method, request)
        check_response(response)
        return response


def _content(card: ProgressCard) -> str:
    return json.dumps(render_feishu(card), ensure_ascii=False)


@contextmanager
def map_feishu_errors() -> Iterator[None]:
    """Translate lark-oapi / `requests` exceptions into platform errors, `from` the original.

    `asyncio.CancelledError` is a `BaseException` and passes through untouched.

    Raises:
        PlatformRateLimited: The token endpoint answered a frequency limit.
        PlatformUnavailable: Connection failures, timeouts, answers that are not JSON.
        PlatformRejected: The token endpoint refused the app's credentials.
    """
    try:
        yield
    except ObtainAccessTokenException as exc:
        # The token endpoint's answer, e.g. 10003/10014 for a wrong app id or secret.
        raise _from_code(exc.code, str(exc.msg), status=0, headers={}) from exc
    except (TimeoutError, OSError) as exc:
        # `requests` exceptions all derive from OSError (RequestException is an IOError).
        raise PlatformUnavailable(f"Feishu unreachable: {type(exc).__name__}: {exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        # lark-oapi parses every body (as UTF-8 JSON) before we see the status: a body that is
        # not JSON comes from something in front of Feishu (a gateway's 502 page, a cut stream).
        raise PlatformUnavailable(f"Feishu answered something that is not JSON: {exc}") from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # lark-oapi's unmarshalling of an answer of unexpected shape
        raise PlatformUnavailable(f"Feishu answer not understood: {exc!r}") from exc


def check_response(response: Any) -> None:
    """Raise the `bot.publishing.platform` error for a typed lark-oapi answer whose `code` is not 0.

    Raises:
        PlatformRateLimited: HTTP 429, code 99991400 or 230020.
        CardGone: Code 230011 or 231003.
        PlatformUnavailable: HTTP 5xx.
        PlatformRejected: Any other non-zero code (bad token 99991663, invalid card, ...).
    """
    if response.success():
        return
    raw = response.raw
    raise _from_code(
        response.code, str(response.msg or ""), status=raw.status_code, headers=raw.headers
    )


def _from_code(code: Any, msg: str, *, status: int, headers: Mapping[str, str]) -> PlatformError:
    """The platform error for a Feishu answer (`status` 0: not known)."""
    detail = f"Feishu HTTP {status or '?'} code {code}: {msg}"
    if status == 429 or code in _RATE_LIMITED:
        return PlatformRateLimited(_retry_after(headers), detail)
    if code in _GONE:
        return CardGone(detail)
    if status >= 500:
        return PlatformUnavailable(detail)
    return PlatformRejected(detail)


def _retry_after(headers: Mapping[str, str]) -> float:
    """Seconds from `x-ogw-ratelimit-reset`, looked up case-insensitively, else the default.

    lark-oapi copies the headers into a plain dict, so their case is whatever the server sent.
    """
    value = next((v for k, v in headers.items() if k.lower() == "x-ogw-ratelimit-reset"), "")
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_RETRY_AFTER_S
    return seconds if seconds >= 0 else DEFAULT_RETRY_AFTER_S
