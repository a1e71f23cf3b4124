"""Messages the bot posts on its own in a channel: a new top-level message, and more in its thread.

An alert's incident opens with a root message at the top of its route's channel (title,
severity, key labels, links) and its analysis runs in that message's thread; a scheduled job's
run likewise starts under a message naming the job. `ChatPlatform` posts cards into threads
only; `ChannelPoster` is the other half, implemented by each adapter
(`bot/adapters/*/posts.py`) and built per platform by `bot.worker.clients.channel_posters`.

Contract:

* `post_root` posts a new top-level message and returns a `PostedRoot`: the `workspace` and
  `thread` a `ChatEvent` in that thread carries (so a reply, a Stop press or the analysis's
  card reach the same session: Slack's team id and the message's `ts`; Feishu's tenant key and
  the root's `message_id`; the console's workspace and the key itself, as console threads are
  named by their client), and a `link` to the message ("" when the platform gives none).
* `post_in_thread` posts into that thread (Slack `thread_ts`; Feishu a reply in the root's
  topic; the console an entry of the thread).
* `key` is an idempotency key: the same message retried carries the same key. Feishu dedupes on
  it (`uuid`, at most 50 characters: `bounded_key` hashes a longer one); Slack has no such key,
  so a retry after a post whose answer was lost posts twice; the console names the message by it.
* Failures are the `PlatformError` tree of `bot.errors` (re-exported by
  `bot.publishing.platform`), from each adapter's own error map.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

from cards import Notice

__all__ = ["FEISHU_UUID_CHARS", "ChannelPoster", "PostedRoot", "bounded_key"]

FEISHU_UUID_CHARS = 50
"""Feishu's `uuid` (im/v1/messages create and reply) is at most 50 characters."""


@dataclass(frozen=True, slots=True)
class PostedRoot:
    """A posted top-level message: the thread it roots, as events in that thread name it."""

    workspace: str
    """Slack team id; Feishu tenant key; the console's workspace."""
    thread: str
    """What replies and the session are keyed by: Slack `ts`, Feishu `message_id`, the console's
    key."""
    link: str
    """A link to the message, or "" when the platform gives none (or it could not be had)."""


class ChannelPoster(Protocol):
    """Posts notices as new top-level messages, and into their threads."""

    async def post_root(self, channel: str, notice: Notice, *, key: str) -> PostedRoot:
        """Post `notice` as a new top-level message in `channel`.

        Raises:
            PlatformError: One of its subclasses, from the adapter's error map.
        """
        ...

    async def post_in_thread(self, channel: str, thread: str, notice: Notice, *, key: str) -> None:
        """Post `notice` in the thread rooted at `thread`.

        Raises:
            PlatformError: One of its subclasses, from the adapter's error map.
        """
        ...


def bounded_key(key: str, limit: int = FEISHU_UUID_CHARS) -> str:
    """`key` itself when it is ASCII and at most `limit` characters, else a digest that is.

    The same key always gives the same result, so a retry is recognised; two different keys
    give different results (a SHA-256 prefix of 192 bits and more, for the limits used here).

    Raises:
        ValueError: `limit` leaves no room for a digest (under 34 characters).
    """
    if limit < 34:
        raise ValueError(f"a key of at most {limit} characters cannot hold a digest")
    if key and len(key) <= limit and key.isascii() and key.isprintable():
        return key
    return "k-" + hashlib.sha256(key.encode(errors="surrogatepass")).hexdigest()[: limit - 2]
