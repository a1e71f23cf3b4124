"""The console channel, seen from the terminal: what a person types, and the cards they see.

It talks to the bot the way the chat platforms do. Messages and Stop presses go to the ingress
over HTTP (`POST /console/events`, with the bearer token of `CHATOPS_CONSOLE_TOKEN`), so the
same routing, queue, workers and card publisher handle them as a Slack or Feishu event; cards
come back the way the workers post them for the console (the cards stream, read with blocking
`XREAD`). `chatops console` (a person typing) and `chatops demo` (a scripted incident) both use
it.

One thread at a time: a line typed while no analysis runs in the thread mentions the bot (it
starts one); a line typed while one runs is a reply in its thread (the bot's policy decides:
a redirect, a stop phrase, or conversation); `stop()` presses the live card's Stop button.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, TextIO

import httpx
import redis.asyncio as aioredis

from bot.errors import ConsoleRefused
from bot.keys import BotKeys
from cards import ProgressCard

__all__ = ["CardView", "ConsoleChannel", "ConsoleRefused", "Screen"]

READ_BLOCK_MS = 1000
"""One blocking read of the cards stream; under redis-py's default 5 s socket timeout."""


@dataclass(frozen=True, slots=True)
class CardView:
    """One state of a card, as the console shows it."""

    message_id: str
    thread: str
    card: ProgressCard
    text: str
    """The card rendered for a terminal by the worker (`cards._console`)."""

    @property
    def final(self) -> bool:
        """The analysis ended: this state never changes again."""
        return self.card.is_final


class ConsoleChannel:
    """One person at a terminal, in one console channel."""

    def __init__(
        self,
        ingress_url: str,
        token: str,
        redis: aioredis.Redis,
        *,
        user: str = "you",
        channel: str = "console",
        keys: BotKeys | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(base_url=ingress_url, timeout=10.0)
        self._auth = {"Authorization": f"Bearer {token}"}
        self._redis = redis
        self._keys = keys or BotKeys()
        self.user, self.channel = user, channel
        self.thread = ""
        self.cards: dict[str, CardView] = {}
        """The latest state of every card of this channel, by message id."""
        self._cursor = "$"

    async def aclose(self) -> None:
        """Close the HTTP client (the Redis client is the caller's)."""
        await self._http.aclose()

    @property
    def live(self) -> CardView | None:
        """The current thread's live card, if an analysis runs in it."""
        return next(
            (v for v in self.cards.values() if v.thread == self.thread and not v.final), None
        )

    async def start_reading(self) -> None:
        """Read cards posted from now on (call before the first message)."""
        latest: Any = await self._redis.xrevrange(self._keys.console_cards, count=1)
        self._cursor = latest[0][0].decode() if latest else "0-0"

    async def say(self, text: str) -> None:
        """A line typed: a mention when nothing runs in the thread, else a reply in it."""
        if self.live is None:
            await self.mention(text)
        else:
            await self._message(text, mention=False)

    async def mention(self, text: str) -> None:
        """Mention the bot in a new thread (rooted at this message, as on the platforms)."""
        message_id = _message_id()
        self.thread = message_id
        await self._message(text, mention=True, message_id=message_id)

    async def stop(self) -> bool:
        """Press the live card's Stop button; False when nothing runs."""
        live = self.live
        if live is None:
            return False
        await self._post(
            {
                "type": "action",
                "channel": self.channel,
                "thread": self.thread,
                "user": self.user,
                "action": "stop",
                "value": live.card.turn_id,
            }
        )
        return True

    async def next_update(self) -> CardView | None:
        """The next card state posted in this channel; None when none came within a second."""
        reply: Any = await self._redis.xread(
            {self._keys.console_cards: self._cursor}, count=1, block=READ_BLOCK_MS
        )
        if not reply:
            return None
        entry_id, fields = reply[0][1][0]
        self._cursor = entry_id.decode()
        if fields.get(b"channel", b"").decode() != self.channel:
            return None
        view = CardView(
            message_id=fields[b"message_id"].decode(),
            thread=fields[b"thread"].decode(),
            card=ProgressCard.from_json(fields[b"card"].decode()),
            text=fields[b"text"].decode(),
        )
        self.cards[view.message_id] = view
        return view

    async def _message(self, text: str, *, mention: bool, message_id: str = "") -> None:
        await self._post(
            {
                "type": "message",
                "channel": self.channel,
                "thread": self.thread,
                "message_id": message_id or _message_id(),
                "user": self.user,
                "text": text,
                "mention": mention,
            }
        )

    async def _post(self, event: dict[str, Any]) -> None:
        response = await self._http.post("/console/events", json=event, headers=self._auth)
        if response.status_code != 200:
            raise ConsoleRefused(f"{response.status_code}: {response.text}")


def _message_id() -> str:
    return f"{time.time():.6f}-{uuid.uuid4().hex[:6]}"


class Screen:
    """The terminal: a card's new state replaces its last one when nothing came between."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._tty = out.isatty()
        self._shown: tuple[str, int] | None = None
        """The message id and line count of the card printed last, if it was the last."""

    def say(self, line: str) -> None:
        """Print a line of the conversation (what a person typed, a notice)."""
        self._out.write(f"\n{line}\n")
        self._out.flush()
        self._shown = None

    def card(self, view: CardView) -> None:
        """Draw a card's state: over its last one on a terminal, below it otherwise."""
        if self._tty and self._shown and self._shown[0] == view.message_id:
            self._out.write(f"\x1b[{self._shown[1]}F\x1b[J")  # up over the old state, clear
        elif not self._tty and self._shown and self._shown[0] == view.message_id:
            self._out.write("\n")
        text = view.text.rstrip("\n") + "\n"
        self._out.write(text)
        self._out.flush()
        self._shown = (view.message_id, text.count("\n"))
