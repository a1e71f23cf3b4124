"""Notices on the console: `ChannelPoster` as entries of the console's cards stream.

Contract:

* A notice is one entry of `BotKeys.console_cards` (trimmed with `MAXLEN ~ CARDS_MAXLEN`, as the
  cards are), with the fields

  ```
  op          "notice"
  channel     the channel, as given
  thread      the thread it roots or belongs to
  message_id  the notice's id: its key (bounded)
  text        render_console_notice(notice): plain text, 80 characters wide
  ```

  and no `card`: a console client prints it as a message of the thread
  (`ConsoleChannel.next_entry`), and never updates it.
* `post_root` names the new thread by the key itself (bounded to the console's 200-character
  ids), since console threads are named by their client: the root's `thread` is that name,
  its workspace the console's, its link "". The same key names the same thread, so a retried
  root roots the same thread (the entry itself is written again).
* Failures leave as `bot.publishing.platform` errors (`map_console_errors`); every write is
  bounded by `timeout_s`. The Redis client is the caller's.
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from redis.typing import EncodableT, FieldT

from bot.adapters.console.cards import CARDS_MAXLEN, DEFAULT_TIMEOUT_S, map_console_errors
from bot.adapters.console.inbound import CONSOLE_WORKSPACE
from bot.keys import BotKeys
from bot.publishing.channel_posts import PostedRoot, bounded_key
from cards import Notice, render_console_notice

__all__ = ["NOTICE_OP", "ConsolePoster"]

NOTICE_OP = "notice"
"""The `op` of a notice's entry on the cards stream."""
ID_CHARS = 200
"""The console's thread and message ids are at most this long (`bot.adapters.console.inbound`)."""


class ConsolePoster:
    """Posts notices on the console's cards stream."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """Write notices through `redis` (not closed here) under `keys`' names."""
        self._redis = redis
        self._keys = keys or BotKeys()
        self._timeout_s = timeout_s

    async def post_root(self, channel: str, notice: Notice, *, key: str) -> PostedRoot:
        """Post `notice` as the first message of the thread `key` names.

        Raises:
            PlatformError: One of its subclasses, from `map_console_errors()`.
        """
        thread = bounded_key(key, ID_CHARS)
        await self._send(channel, thread, thread, notice)
        return PostedRoot(workspace=CONSOLE_WORKSPACE, thread=thread, link="")

    async def post_in_thread(self, channel: str, thread: str, notice: Notice, *, key: str) -> None:
        """Post `notice` in `thread`.

        Raises:
            PlatformError: One of its subclasses, from `map_console_errors()`.
        """
        await self._send(channel, thread, bounded_key(key, ID_CHARS), notice)

    async def _send(self, channel: str, thread: str, message_id: str, notice: Notice) -> None:
        entry: dict[FieldT, EncodableT] = {
            "op": NOTICE_OP,
            "channel": channel,
            "thread": thread,
            "message_id": message_id,
            "text": render_console_notice(notice),
        }
        with map_console_errors():
            async with asyncio.timeout(self._timeout_s):
                await self._redis.xadd(
                    self._keys.console_cards, entry, maxlen=CARDS_MAXLEN, approximate=True
                )
