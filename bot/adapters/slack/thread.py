"""A Slack thread's earlier messages: `conversations.replies` read, each message as plain lines.

Contract (`bot.publishing.thread_reader`):
- `SlackThreads.read` pages through `conversations.replies` of the event's thread (`limit`
  `PAGE_SIZE`, `latest` the event's ts, at most `MAX_PAGES` pages) and keeps the root and every
  reply before the event. It leaves out the bot's own posts (its `bot_id` or user id, from
  `auth.test`, asked once) and platform notices (any `subtype` but a bot's message, a reply also
  sent to the channel, a file share or a `/me` message). Authors are named by `users.info`
  (at most `MAX_LOOKUPS` new names a read; without the `users:read` scope, the id stays), bots
  and apps by their profile's name.
- `message_text` is what Slack shows of a message: its `blocks` (section text and fields,
  context elements, headers, rich text, link buttons), else its `text`; then each attachment's
  pretext, author, title, text, fields, link buttons and blocks, or its `fallback` when it shows
  nothing else. It is pure and bounded (`bot.adapters.message_text`), and runs in a worker
  thread, a page at a time, so a page of large messages costs the event loop nothing.
- Scopes: `channels:history` (public channels), `groups:history` (private ones), `users:read`
  (names). Every failure is a `bot.errors.PlatformError` (`map_slack_errors`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from bot.adapters.message_text import Lines, runbook_urls, walk
from bot.adapters.slack.cards import map_slack_errors
from bot.adapters.slack.client import web_client
from bot.adapters.slack.inbound import SlackIdentity
from bot.errors import PlatformRejected
from bot.events import ChatEvent
from bot.publishing.thread_reader import Thread, ThreadMessage
from bot.settings import Settings

__all__ = ["MAX_PAGES", "PAGE_SIZE", "SlackThreads", "message_text", "page_messages"]

PAGE_SIZE = 200
"""Messages a `conversations.replies` page asks for (Slack's advice: no more than 200)."""
MAX_PAGES = 5
"""Pages read at most: 1,000 messages, far more than the context's token bound keeps."""
MAX_LOOKUPS = 20
"""New names looked up (`users.info`) in one read; other authors keep their id."""
MAX_NAMES = 2000
"""Names remembered between reads (forgotten all at once when full)."""
_LABEL_CHARS = 200
_KEPT_SUBTYPES = frozenset({"", "bot_message", "thread_broadcast", "file_share", "me_message"})
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
_RICH_CONTAINERS = frozenset(
    {"rich_text_section", "rich_text_list", "rich_text_quote", "rich_text_preformatted"}
)


@dataclass(frozen=True, slots=True)
class _Read:
    message: ThreadMessage
    user: str
    """The human author's id, to be named; empty for a bot's message."""


def _ts_key(ts: object) -> tuple[int, int] | None:
    """A Slack ts (`"1712345678.123456"`) as a sortable pair; None when it is not one."""
    if not isinstance(ts, str) or not _TS.fullmatch(ts):
        return None
    seconds, fraction = ts.split(".")
    return int(seconds), int(fraction.ljust(9, "0"))


def _text_of(node: Any) -> Any:
    """A text object's text (`{"type": "mrkdwn", "text": …}`), or the string itself."""
    return node.get("text") if isinstance(node, dict) else node


def _clip(value: Any) -> str:
    return value[:_LABEL_CHARS] if isinstance(value, str) else ""


def _one_line(value: Any) -> str:
    """A name on one line: its whitespace runs (line breaks too) as single spaces, clipped."""
    return " ".join(_clip(value).split())


def _link(lines: Lines, label: Any, url: Any) -> None:
    """One line: a button's or a title's label, then its URL."""
    if isinstance(url, str) and url:
        lines.add(_clip(_text_of(label)), end=False)
        lines.add(url)


def _rich_text(elements: Any, lines: Lines) -> None:
    """A `rich_text` block's elements: inline pieces on lines, a new line per section."""

    def visit(key: str, value: Any) -> bool:
        if isinstance(value, list):
            return key == "elements"
        if not isinstance(value, dict):
            return False
        kind = value.get("type")
        if kind in _RICH_CONTAINERS:
            lines.end()
            return True
        if kind == "link":
            lines.add(value.get("text") or value.get("url"), end=False)
        elif kind == "user":
            lines.add(f"<@{_clip(value.get('user_id'))}>", end=False)
        elif kind == "emoji":
            lines.add(f":{_clip(value.get('name'))}:", end=False)
        else:
            lines.add(value.get("text"), end=False)
        return False

    walk(elements, visit)
    lines.end()


def _block(block: Mapping[str, Any], lines: Lines) -> None:
    match block.get("type"):
        case "header" | "markdown":
            lines.add(_text_of(block.get("text")))
        case "section":
            lines.add(_text_of(block.get("text")))
            for field in _items(block.get("fields"), lines):
                lines.add(_text_of(field))
        case "context":
            for element in _items(block.get("elements"), lines):
                lines.add(_text_of(element), end=False)
            lines.end()
        case "rich_text":
            _rich_text(block.get("elements"), lines)
        case "actions":
            for element in _items(block.get("elements"), lines):
                if isinstance(element, dict):
                    _link(lines, element.get("text"), element.get("url"))
        case _:
            pass


def _items(value: Any, lines: Lines) -> list[Any]:
    """The items of a list, as many as the lines can still take."""
    if not isinstance(value, list) or lines.full:
        return []
    return value[: max(0, lines.room)]


def _blocks(blocks: Any, lines: Lines) -> None:
    for block in _items(blocks, lines):
        if lines.full:
            return
        if isinstance(block, dict):
            _block(block, lines)


def _attachment(attachment: Mapping[str, Any], lines: Lines) -> None:
    before = lines.taken
    lines.add(attachment.get("pretext"))
    lines.add(attachment.get("author_name"))
    if attachment.get("title_link"):
        _link(lines, attachment.get("title"), attachment.get("title_link"))
    else:
        lines.add(attachment.get("title"))
    lines.add(attachment.get("text"))
    for field in _items(attachment.get("fields"), lines):
        if isinstance(field, dict):
            title = _clip(field.get("title"))
            lines.add(f"{title}:" if title else "", end=False)
            lines.add(field.get("value"))
    for action in _items(attachment.get("actions"), lines):
        if isinstance(action, dict):
            _link(lines, action.get("text"), action.get("url"))
    _blocks(attachment.get("blocks"), lines)
    lines.add(attachment.get("footer"))
    if lines.taken == before:
        lines.add(attachment.get("fallback"))


def message_text(message: Mapping[str, Any]) -> str:
    """What Slack shows of `message`, as bounded plain lines."""
    lines = Lines()
    _blocks(message.get("blocks"), lines)
    if not lines.taken:  # with blocks, `text` is their notification fallback
        lines.add(message.get("text"))
    for attachment in _items(message.get("attachments"), lines):
        if lines.full:
            break
        if isinstance(attachment, dict):
            _attachment(attachment, lines)
    return lines.text()


def _author(message: Mapping[str, Any]) -> tuple[str, str]:
    """(display name, human user id to look up) of a message's author."""
    if message.get("bot_id") or message.get("subtype") == "bot_message":
        profile = message.get("bot_profile")
        name = profile.get("name") if isinstance(profile, dict) else None
        for candidate in (name, message.get("username"), message.get("bot_id")):
            if isinstance(candidate, str) and candidate.strip():
                return _one_line(candidate), ""
        return "an app", ""
    user = _clip(message.get("user")) or "someone"
    return user, user


def _kept(message: Any, identity: SlackIdentity, before: tuple[int, int] | None) -> bool:
    """Whether a message of the page is context: not ours, not a notice, before the event."""
    if not isinstance(message, dict) or message.get("subtype", "") not in _KEPT_SUBTYPES:
        return False
    if identity.bot_id and message.get("bot_id") == identity.bot_id:
        return False
    if message.get("user") == identity.user_id:
        return False
    key = _ts_key(message.get("ts"))
    return key is not None and (before is None or key < before)


def page_messages(
    page: Mapping[str, Any], identity: SlackIdentity, event: ChatEvent
) -> list[_Read]:
    """The context messages of one `conversations.replies` page, in its order (pure)."""
    messages = page.get("messages")
    before = _ts_key(event.message_id)
    out = []
    for message in messages if isinstance(messages, list) else []:
        if not _kept(message, identity, before):
            continue
        text = message_text(message)
        author, user = _author(message)
        read = ThreadMessage(
            author=author,
            sent_at=float(message["ts"]),
            text=text,
            bot=not user,
            root=message["ts"] == event.thread,
            runbooks=runbook_urls(text),
        )
        out.append(_Read(read, user))
    return out


@contextmanager
def _naming_the_scope() -> Iterator[None]:
    """A `missing_scope` refusal says which scope the app needs (Slack's `needed`)."""
    try:
        yield
    except SlackApiError as exc:
        if exc.response.get("error") != "missing_scope":
            raise
        needed = _clip(exc.response.get("needed")) or "a history scope"
        raise PlatformRejected(f"Slack: missing_scope, the app needs {needed}") from exc


def _cursor(page: Mapping[str, Any]) -> str:
    metadata = page.get("response_metadata")
    cursor = metadata.get("next_cursor") if isinstance(metadata, dict) else ""
    return cursor if page.get("has_more") and isinstance(cursor, str) else ""


class SlackThreads:
    """Reads Slack threads with the bot token."""

    def __init__(
        self, client: AsyncWebClient, *, page_size: int = PAGE_SIZE, max_pages: int = MAX_PAGES
    ) -> None:
        """Wrap a Web API client (`SLACK_BOT_TOKEN`'s)."""
        self._client = client
        self._page_size = page_size
        self._max_pages = max_pages
        self._identity: SlackIdentity | None = None
        self._names: dict[str, str] = {}
        self._lookups = True

    @classmethod
    def from_settings(cls, settings: Settings) -> SlackThreads:
        """The reader for `SLACK_BOT_TOKEN` / `SLACK_API_URL`.

        Raises:
            BotConfigError: `SLACK_BOT_TOKEN` is not set.
        """
        return cls(web_client(settings))

    async def read(self, event: ChatEvent) -> Thread:
        """The messages of `event`'s thread before it (see the module docstring).

        Raises:
            PlatformError: Slack refused (`missing_scope`, `thread_not_found`, …) or is
                unreachable.
        """
        with map_slack_errors(), _naming_the_scope():
            identity = await self._whoami()
            reads, not_read = await self._pages(event, identity)
            await self._name(reads)
        messages = tuple(
            replace(r.message, author=self._names.get(r.user, r.message.author)) for r in reads
        )
        return Thread(messages, not_read)

    async def _whoami(self) -> SlackIdentity:
        if self._identity is None:
            reply = await self._client.auth_test()
            self._identity = SlackIdentity(
                user_id=str(reply["user_id"]), bot_id=str(reply.get("bot_id") or "")
            )
        return self._identity

    async def _pages(self, event: ChatEvent, identity: SlackIdentity) -> tuple[list[_Read], str]:
        reads: list[_Read] = []
        cursor = ""
        latest = event.message_id if _ts_key(event.message_id) else None
        for _ in range(self._max_pages):
            response = await self._client.conversations_replies(
                channel=event.channel,
                ts=event.thread,
                limit=self._page_size,
                latest=latest,
                inclusive=False,
                cursor=cursor or None,
            )
            page = response.data if isinstance(response.data, dict) else {}
            reads.extend(await asyncio.to_thread(page_messages, page, identity, event))
            cursor = _cursor(page)
            if not cursor:
                return reads, ""
        return reads, f"replies after the first {self._max_pages * self._page_size:,}"

    async def _name(self, reads: list[_Read]) -> None:
        """Look up the names not known yet (a few per read, at once); ids stay where it fails."""
        wanted = list(dict.fromkeys(r.user for r in reads if r.user and r.user not in self._names))
        if not wanted or not self._lookups:
            return
        if len(self._names) + len(wanted) > MAX_NAMES:
            self._names.clear()
        async with asyncio.TaskGroup() as group:
            for user in wanted[:MAX_LOOKUPS]:
                group.create_task(self._look_up(user))

    async def _look_up(self, user: str) -> None:
        try:
            reply = await self._client.users_info(user=user)
        except SlackApiError as exc:
            if exc.response.get("error") == "missing_scope":
                self._lookups = False  # no `users:read`: ids it is, without asking again
            return
        except (SlackClientError, aiohttp.ClientError, OSError):
            return  # a name is a nicety: the read goes on with the id
        found = reply.get("user")
        profile = found.get("profile") if isinstance(found, dict) else None
        for candidate in (
            profile.get("display_name") if isinstance(profile, dict) else None,
            profile.get("real_name") if isinstance(profile, dict) else None,
            found.get("name") if isinstance(found, dict) else None,
        ):
            if isinstance(candidate, str) and candidate.strip():
                self._names[user] = _one_line(candidate)
                return
