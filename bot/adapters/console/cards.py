"""Progress cards on the console platform: `ChatPlatform` over a Redis stream.

Contract:

* Every card state is one entry of the stream `BotKeys.console_cards` (`chatops:console:cards`),
  trimmed with `MAXLEN ~ CARDS_MAXLEN`. Each entry's fields are strings:

  ```
  op          "post" (a new card in the thread) or "update" (a new state of a posted card)
  channel     the thread's channel, as the console sent it
  thread      the thread's root id, as the console sent it
  message_id  the card's id: the same for a post and all of its updates
  card        ProgressCard.to_json(): the full state (status, steps, turn_id for /stop, ...)
  text        render_console(card): the card as plain text, 80 characters wide
  ```

  A client shows the newest state per `message_id`; a final card (`card.status` one of
  answered, stopped, failed, interrupted, cancelled) never changes again.
* `post_card` uses the card's key as its message id and records it (`BotKeys.console_message`,
  kept as long as a card record), so `find_card` finds it by the key; `update_card` of an id
  that was never posted, or whose record expired, raises `CardGone`, as Slack's
  `message_not_found` does. The check and the write are one Lua
  script, so no update lands for a card that is gone.
* `set_status` does nothing: the console has no "is doing…" line apart from the card.
* Failures leave as `bot.publishing.platform` errors (`map_console_errors`): nothing else in
  `bot` sees a redis-py exception from here. Every call is bounded by `timeout_s`.
* The Redis client is the worker's (or scheduler's), injected, and closed by its owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_core import register_lua
from bot.events import Platform
from bot.keys import BotKeys
from bot.publishing.card_record import CARD_TTL_S
from bot.publishing.platform import (
    CardGone,
    CardRef,
    CardTarget,
    PlatformRejected,
    PlatformUnavailable,
)
from cards import ProgressCard, render_console

__all__ = ["CARDS_MAXLEN", "DEFAULT_TIMEOUT_S", "ConsoleCards", "map_console_errors"]

CARDS_MAXLEN = 10_000
"""Entries the cards stream keeps (approximately): a console reads the newest ones."""
DEFAULT_TIMEOUT_S = 10.0
"""Upper bound on one write, as for the other platforms' calls."""


class ConsoleCards:
    """Posts and updates progress cards on the console's cards stream."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """Write cards through `redis` (not closed here) under `keys`' names."""
        self._redis = redis
        self._keys = keys or BotKeys()
        self._timeout_s = timeout_s
        self._write = register_lua(redis, "bot.adapters.console", "cards_write")

    @property
    def platform(self) -> Platform:
        """Always `Platform.CONSOLE`."""
        return Platform.CONSOLE

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        """Add a `post` entry for a new card in the target thread, `key` its message id.

        Raises:
            PlatformError: One of its subclasses, from `map_console_errors()`.
        """
        await self._send("post", target.channel, target.thread, key, card)
        return CardRef(platform=Platform.CONSOLE, channel=target.channel, message_id=key)

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        """The card posted with `key`, while its record lasts.

        Raises:
            PlatformError: One of its subclasses, from `map_console_errors()`.
        """
        with map_console_errors():
            async with asyncio.timeout(self._timeout_s):
                posted = await self._redis.exists(self._keys.console_message(key))
        if not posted:
            return None
        return CardRef(platform=Platform.CONSOLE, channel=target.channel, message_id=key)

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        """Add an `update` entry with the card's new state.

        Raises:
            CardGone: No card with this message id was posted (or its record expired).
            PlatformError: Another subclass, from `map_console_errors()`.
        """
        if not await self._send("update", ref.channel, card.thread, ref.message_id, card):
            raise CardGone(f"console card {ref.message_id} does not exist")

    async def set_status(self, target: CardTarget, status: str) -> None:
        """Nothing to do: the console shows no status line apart from the card."""

    async def aclose(self) -> None:
        """Nothing to release: the Redis client belongs to the caller."""

    async def _send(
        self, op: str, channel: str, thread: str, message_id: str, card: ProgressCard
    ) -> bool:
        entry = {
            "op": op,
            "channel": channel,
            "thread": thread,
            "message_id": message_id,
            "card": card.to_json(),
            "text": await asyncio.to_thread(render_console, card),  # an answer can be 40 KB
        }
        fields = [item for pair in entry.items() for item in pair]
        with map_console_errors():
            async with asyncio.timeout(self._timeout_s):
                written = await self._write(
                    keys=[self._keys.console_message(message_id), self._keys.console_cards],
                    args=[op, CARD_TTL_S, CARDS_MAXLEN, *fields],
                )
        return bool(written)


@contextmanager
def map_console_errors() -> Iterator[None]:
    """Translate redis-py failures into `bot.publishing.platform` errors, `from` the original.

    Raises:
        PlatformUnavailable: Connection failures and timeouts (ours or redis-py's).
        PlatformRejected: Any other Redis error (a refused script, an out-of-memory Redis).
    """
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError) as exc:
        raise PlatformUnavailable(f"Redis unreachable: {type(exc).__name__}: {exc}") from exc
    except RedisError as exc:
        raise PlatformRejected(f"Redis refused the card: {type(exc).__name__}: {exc}") from exc
