"""A Feishu thread's earlier messages: the root and the thread's message list, as plain lines.

Contract (`bot.publishing.thread_reader`):
- `FeishuThreads.read` gets the thread's root (`GET /open-apis/im/v1/messages/{root}`), whose
  `thread_id` names the thread, then lists the thread newest first (`GET
  /open-apis/im/v1/messages?container_id_type=thread&container_id={thread_id}&sort_type=
  ByCreateTimeDesc`, `page_size` `PAGE_SIZE`, at most `MAX_PAGES` pages), so the pages bound
  drops the oldest replies, never the latest. A root without a thread (no reply in a topic yet)
  is the whole context. Cards are asked for as sent (`card_msg_content_type=
  user_card_content`) and authors by name (`with_sender_name=true`).
- Left out: the bot's own messages (sender type `app` with this app's id), the event's message
  and anything sent after it, system messages, recalled (`deleted`) ones.
- `message_text` reads `text`, `post` (every locale's title and content lines: text, links,
  mentions, code) and `interactive` cards (their titles, texts and contents, a button's label
  with its URL); other kinds are named (`[image]`). It is pure and bounded
  (`bot.adapters.message_text`); a `body.content` longer than `MAX_CONTENT_CHARS` is not parsed.
- The synchronous lark-oapi client runs in a worker thread (as `bot.adapters.feishu.cards`),
  parsing and extraction with it, one request a thread call: a read cancelled (its timeout)
  sends no further page. Permissions: `im:message:readonly` (or `im:message`), and for
  groups `im:message.group_msg` ("read all messages in groups"). Every failure is a
  `bot.errors.PlatformError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import lark_oapi as lark
from lark_oapi.api.im.v1 import GetMessageRequest, ListMessageRequest

from bot.adapters import untrusted_json
from bot.adapters.feishu.cards import check_response, map_feishu_errors
from bot.adapters.feishu.client import open_client
from bot.adapters.message_text import Lines, runbook_urls, walk
from bot.errors import BotError, PlatformUnavailable
from bot.events import ChatEvent
from bot.publishing.thread_reader import Thread, ThreadMessage
from bot.settings import Settings

__all__ = ["MAX_PAGES", "PAGE_SIZE", "FeishuThreads", "message_text", "thread_message"]

PAGE_SIZE = 50
"""Messages a page of the list asks for (Feishu's most)."""
MAX_PAGES = 5
"""Pages read at most: the newest 250 replies, more than the context's token bound keeps."""
MAX_CONTENT_CHARS = 256 * 1024
"""A longer `body.content` is not parsed (Feishu's own limits are 150 KB for text, 30 KB for
cards)."""
TIMEOUT_S = 5.0
"""The client's own bound on each request, in the worker thread."""
_LABEL_CHARS = 200
_TEXT_KEYS = frozenset({"title", "content", "text"})
_URL_KEYS = frozenset({"url", "href", "default_url"})
_SKIPPED_KINDS = frozenset({"system"})


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _clip(value: Any) -> str:
    return value[:_LABEL_CHARS] if isinstance(value, str) else ""


def _post(content: Mapping[str, Any], lines: Lines) -> None:
    """A rich post: `{locale: {title, content}}`, or `{title, content}` as the list returns it."""
    locales = [content] if "content" in content else list(content.values())
    for locale in locales[: lines.room]:
        if not isinstance(locale, dict):
            continue
        lines.add(locale.get("title"))
        paragraphs = locale.get("content")
        for paragraph in paragraphs[: lines.room] if isinstance(paragraphs, list) else []:
            if lines.full:
                return
            for element in paragraph[: lines.room] if isinstance(paragraph, list) else []:
                _post_element(element, lines)
            lines.end()


def _post_element(element: Any, lines: Lines) -> None:
    if not isinstance(element, dict):
        return
    match element.get("tag"):
        case "at":
            lines.add("@" + _clip(element.get("user_name") or element.get("user_id")), end=False)
        case "a":
            lines.add(element.get("text"), end=False)
            lines.add(element.get("href"), end=False)
        case "img" | "media":
            lines.add("[image]", end=False)
        case _:
            lines.add(element.get("text"), end=False)


def _card(content: Any, lines: Lines) -> None:
    """A card (as sent, or the list's simplified form): every title, text and content, in order.

    Each element (a dict with a `tag`) starts a line, so a button's label and its URL share one.
    """

    def visit(key: str, value: Any) -> bool:
        if isinstance(value, str):
            if key in _TEXT_KEYS or key in _URL_KEYS:
                lines.add(value, end=False)
            return False
        if isinstance(value, dict) and "tag" in value:
            lines.end()
        return isinstance(value, dict | list)

    walk(content, visit)
    lines.end()


def _content(item: Mapping[str, Any]) -> Any:
    body = item.get("body")
    raw = body.get("content") if isinstance(body, dict) else None
    if not isinstance(raw, str) or len(raw) > MAX_CONTENT_CHARS:
        return None
    try:
        return untrusted_json.loads(raw, what="message content")
    except BotError:
        return None


def message_text(item: Mapping[str, Any]) -> str:
    """What Feishu shows of one message of the list, as bounded plain lines."""
    kind = _clip(item.get("msg_type")) or "unknown"
    content = _content(item)
    lines = Lines()
    if kind == "text" and isinstance(content, dict):
        lines.add(content.get("text"))
    elif kind == "post" and isinstance(content, dict):
        _post(content, lines)
    elif kind == "interactive" and isinstance(content, dict | list):
        _card(content, lines)
    elif content is None and kind in ("text", "post", "interactive"):
        lines.add(f"[a {kind} message too large or malformed to read]")
    else:
        lines.add(f"[{kind}]")
    return lines.text()


def _millis(value: Any) -> float:
    try:
        return max(0.0, int(str(value)[:15]) / 1000)
    except ValueError:
        return 0.0


def thread_message(
    item: Any, *, app_id: str, event: ChatEvent, root: bool = False
) -> ThreadMessage | None:
    """One message of the list as context, or None when it is left out (pure)."""
    if not isinstance(item, dict) or item.get("deleted") or item.get("msg_type") in _SKIPPED_KINDS:
        return None
    sender = _dict(item.get("sender"))
    app = sender.get("sender_type") == "app"
    if app and sender.get("id") == app_id:
        return None  # our own card or notice
    sent_at = _millis(item.get("create_time"))
    if item.get("message_id") == event.message_id or (event.sent_at and sent_at > event.sent_at):
        return None
    text = message_text(item)
    name = " ".join(_clip(sender.get("sender_name")).split())  # one line: no forged entries
    author = name or " ".join(_clip(sender.get("id")).split()) or "someone"
    return ThreadMessage(
        author=author,
        sent_at=sent_at,
        text=text,
        bot=app,
        root=root,
        runbooks=runbook_urls(text),
    )


def _items(body: Mapping[str, Any]) -> list[Any]:
    data = body.get("data")
    items = data.get("items") if isinstance(data, dict) else None
    return items if isinstance(items, list) else []


class FeishuThreads:
    """Reads Feishu threads with the app's tenant token."""

    def __init__(
        self,
        client: lark.Client,
        *,
        app_id: str,
        page_size: int = PAGE_SIZE,
        max_pages: int = MAX_PAGES,
    ) -> None:
        """Wrap an Open API client.

        Args:
            client: A lark-oapi client with the app's credentials.
            app_id: This app's id: the sender of the bot's own messages.
            page_size: Messages a page asks for.
            max_pages: Pages read at most.
        """
        self._client = client
        self._app_id = app_id
        self._page_size = page_size
        self._max_pages = max_pages

    @classmethod
    def from_settings(cls, settings: Settings) -> FeishuThreads:
        """The reader for `FEISHU_APP_ID` / `FEISHU_APP_SECRET` / `FEISHU_DOMAIN`.

        Raises:
            BotConfigError: The app credentials are not set.
        """
        client = open_client(settings)
        client.config.timeout = TIMEOUT_S
        return cls(client, app_id=settings.feishu_app_id or "")

    async def read(self, event: ChatEvent) -> Thread:
        """The messages of `event`'s thread before it (see the module docstring).

        Raises:
            PlatformError: Feishu refused (no permission, unknown message, …) or is unreachable.
        """
        with map_feishu_errors():
            root, thread_id = await asyncio.to_thread(self._root, event)
            replies, not_read = await self._replies(thread_id, event) if thread_id else ([], "")
        return Thread(tuple([root] if root else []) + tuple(replies), not_read)

    async def _replies(self, thread_id: Any, event: ChatEvent) -> tuple[list[ThreadMessage], str]:
        """The thread's replies before the event, oldest first, from its newest pages.

        Each page is a worker thread call of its own: a cancellation stops between pages.
        """
        newest: list[ThreadMessage] = []
        token = ""
        for _ in range(self._max_pages):
            page, token = await asyncio.to_thread(self._page, thread_id, token, event)
            newest.extend(page)
            if not token:
                return newest[::-1], ""
        return newest[::-1], f"replies before the newest {self._max_pages * self._page_size:,}"

    def _root(self, event: ChatEvent) -> tuple[ThreadMessage | None, Any]:
        """The root as context and its thread's id (None: no thread yet), in a worker thread."""
        get = (
            GetMessageRequest.builder()
            .message_id(event.thread)
            .card_msg_content_type("user_card_content")
        )
        found = _items(self._call(self._client.im.v1.message.get, get.build()))
        head = found[0] if found and isinstance(found[0], dict) else {}
        root = thread_message(head, app_id=self._app_id, event=event, root=True)
        return root, head.get("thread_id")

    def _page(
        self, thread_id: Any, token: str, event: ChatEvent
    ) -> tuple[list[ThreadMessage], str]:
        """One page of the list, newest first, and the next page's token ("": the last one).

        In a worker thread.
        """
        builder = (
            ListMessageRequest.builder()
            .container_id_type("thread")
            .container_id(str(thread_id))
            .sort_type("ByCreateTimeDesc")
            .page_size(self._page_size)
            .card_msg_content_type("user_card_content")
        )
        if token:
            builder = builder.page_token(token)
        body = self._call(self._client.im.v1.message.list, builder.build())
        page: list[ThreadMessage] = []
        for item in _items(body):
            if isinstance(item, dict) and item.get("message_id") == event.thread:
                continue  # the root, read already
            message = thread_message(item, app_id=self._app_id, event=event)
            if message is not None:
                page.append(message)
        data = _dict(body.get("data"))
        return page, str(data.get("page_token") or "") if data.get("has_more") else ""

    def _call(self, method: Callable[[Any], Any], request: Any) -> dict[str, Any]:
        """One typed call, its answer checked, its body as JSON (what the extraction reads)."""
        request.add_query("with_sender_name", "true")
        response = method(request)
        check_response(response)
        try:
            body = untrusted_json.loads(response.raw.content, what="Feishu answer")
        except BotError as exc:
            raise PlatformUnavailable(f"Feishu answer not understood: {exc}") from exc
        return body if isinstance(body, dict) else {}
