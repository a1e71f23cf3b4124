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

`decide()` presses a waiting call's Approve or Deny, on whichever card of the channel shows it:
the action carries the value of the card's buttons (`<call id>|<digest>`, the digest of the
arguments the card showed), so the approval desk decides it as it decides a Slack or Feishu
press. Only cards drawn since `start_reading` are known here.

Notices the bot posts on its own (an alert's root message, what follows in its thread) come on
the same stream as `notice` entries (`bot.adapters.console.posts`): `next_entry` reads them as
a `NoticeView` and `Screen.notice` prints them as a message; `next_update` passes over them.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, TextIO

import httpx
import redis.asyncio as aioredis

from bot.control.approval_desk import parse_button_value
from bot.errors import ConsoleRefused
from bot.keys import BotKeys
from cards import CardApproval, CardStatus, ProgressCard

__all__ = ["CardView", "ConsoleChannel", "ConsoleRefused", "Decision", "NoticeView", "Screen"]

Decision = Literal["approve", "deny"]
"""A waiting call's two buttons."""

READ_BLOCK_MS = 1000
"""One blocking read of the cards stream; under redis-py's default 5 s socket timeout."""
ANSWER_BYTES = 64 * 1024
"""Bytes of the ingress's answer read at most (its answers are a few hundred)."""
SHOWN_CHARS = 80
"""Characters of a typed call id echoed back at most."""


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


@dataclass(frozen=True, slots=True)
class NoticeView:
    """A notice the bot posted in a thread (it never changes)."""

    message_id: str
    thread: str
    text: str
    """The notice rendered for a terminal by the poster (`cards._notice`)."""


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

    async def mark_wrong(self) -> str:
        """Press "Mark answer wrong" on the thread's newest answered card; what to tell the person.

        Nothing is sent when no card of the thread offers it (none answered, or it is marked).

        Raises:
            ConsoleRefused: The ingress refused the press (its status and message).
        """
        answered = [
            view
            for view in self.cards.values()
            if view.thread == self.thread and view.card.can_mark_wrong
        ]
        if not answered:
            return "no answer in this thread to mark wrong"
        answer = await self._post(
            {
                "type": "action",
                "channel": self.channel,
                "thread": self.thread,
                "user": self.user,
                "action": "wrong",
                "value": answered[-1].card.turn_id,
            }
        )
        return str(answer.get("message") or answer)

    def waiting_calls(self) -> list[tuple[CardView, CardApproval]]:
        """Every call waiting for approval on this channel's cards, by their newest state."""
        return [
            (view, approval)
            for view in self.cards.values()
            if view.card.status is CardStatus.AWAITING_APPROVAL
            for approval in view.card.approvals
        ]

    async def decide(self, action: Decision, call: str = "") -> str:
        """Press Approve or Deny of the waiting call `call` (its id); what to tell the person.

        `call` may be the call id the card shows or the buttons' whole value; empty names the
        one waiting call. Nothing is sent when no card shows such a call, or when `call` is
        empty and several wait: the answer says so.

        Raises:
            ConsoleRefused: The ingress refused the press (its status and message).
        """
        waiting = self.waiting_calls()
        chosen = [(v, a) for v, a in waiting if _names(a, call)] if call else waiting
        if not chosen:
            shown = f" {call[:SHOWN_CHARS]!r}" if call else ""
            return f"no card here shows a call{shown} waiting for approval"
        if len(chosen) > 1:
            ids = ", ".join(_call_id(a) for _, a in chosen)
            return f"{len(chosen)} calls wait for approval ({ids}): /{action} <call id> names one"
        view, approval = chosen[0]
        answer = await self._post(
            {
                "type": "action",
                "channel": self.channel,
                "thread": view.thread,
                "user": self.user,
                "action": action,
                "value": approval.value,
            }
        )
        return str(answer.get("message") or answer)

    async def next_update(self) -> CardView | None:
        """The next card state posted in this channel; None when none came within a second."""
        entry = await self.next_entry()
        return entry if isinstance(entry, CardView) else None

    async def next_entry(self) -> CardView | NoticeView | None:
        """The next card state or notice posted in this channel; None when none came in time."""
        reply: Any = await self._redis.xread(
            {self._keys.console_cards: self._cursor}, count=1, block=READ_BLOCK_MS
        )
        if not reply:
            return None
        entry_id, fields = reply[0][1][0]
        self._cursor = entry_id.decode()
        if fields.get(b"channel", b"").decode() != self.channel:
            return None
        if fields.get(b"op") == b"notice":
            return NoticeView(
                message_id=fields[b"message_id"].decode(),
                thread=fields[b"thread"].decode(),
                text=fields[b"text"].decode(),
            )
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

    async def _post(self, event: dict[str, Any]) -> dict[str, Any]:
        """POST one event; the ingress's JSON answer.

        Raises:
            ConsoleRefused: Any answer but 200, with its status and what its body says.
        """
        request = self._http.stream("POST", "/console/events", json=event, headers=self._auth)
        async with request as response:
            body = await _bounded(response)
        answer = _answer(body)
        if response.status_code != 200:
            said = answer.get("message") or answer.get("detail") or answer.get("error")
            shown = said or body[:SHOWN_CHARS].decode(errors="replace")
            raise ConsoleRefused(f"{response.status_code}: {shown}")
        return answer


async def _bounded(response: httpx.Response) -> bytes:
    """The answer's first `ANSWER_BYTES` bytes (the rest is not read)."""
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk[: ANSWER_BYTES - len(body)]
        if len(body) >= ANSWER_BYTES:
            break
    return bytes(body)


def _answer(body: bytes) -> dict[str, Any]:
    """The ingress's JSON object, or {} when the body is not one (or was cut at the bound)."""
    try:
        answer = json.loads(body)
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _call_id(approval: CardApproval) -> str:
    parsed = parse_button_value(approval.value)
    return parsed[0] if parsed else ""


def _names(approval: CardApproval, call: str) -> bool:
    """`call` names this waiting call: its id (as the card shows it) or its buttons' value."""
    call_id = _call_id(approval)
    return bool(call_id) and call in (call_id, " ".join(call_id.split()), approval.value)


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

    def notice(self, view: NoticeView) -> None:
        """Print a notice the bot posted, as a message of the conversation."""
        self.say(view.text.rstrip("\n"))

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
