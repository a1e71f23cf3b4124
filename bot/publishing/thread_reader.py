"""Reading a chat thread's earlier messages: the protocol the Slack and Feishu adapters implement.

Contract:
- `ThreadReader.read` returns the messages of the event's thread written before the event, root
  first, then replies in the order they were sent. It leaves out the bot's own posts (its cards
  and status lines), the event's own message and anything after it, and platform notices
  (joins, topic changes). Messages of other bots and apps (an alert, a CI report) are kept,
  marked `bot`.
- Each message's `text` is everything the platform shows of it (plain text, attachments, blocks,
  rich posts, cards), already cut to the adapter's per-message bound; `runbooks` are the http(s)
  URLs on its lines that name a runbook (Alertmanager's and Grafana's `runbook_url`).
- A reader reads a bounded number of pages; what it could not read is said in `Thread.not_read`.
- Every failure is a `bot.errors.PlatformError` (a timeout is the caller's to impose).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.events import ChatEvent

__all__ = ["Thread", "ThreadMessage", "ThreadReader"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ThreadMessage:
    """One earlier message of a thread, as text."""

    author: str
    """The author's display name, or the platform id when no name is known."""
    sent_at: float
    """When it was sent (epoch seconds; 0 when unknown)."""
    text: str
    """What the message shows, as plain lines, bounded per message."""
    bot: bool = False
    """Written by another bot or app (an alerting app, a CI bot), not a person."""
    root: bool = False
    """The thread's root message (the first one)."""
    runbooks: tuple[str, ...] = ()
    """The runbook URLs the message names."""


@dataclass(frozen=True, slots=True)
class Thread:
    """What a reader found in a thread before the event."""

    messages: tuple[ThreadMessage, ...] = ()
    """The root (if readable) first, then the replies in order."""
    not_read: str = ""
    """What the reader's page bound left unread, in words ("replies after the first 1,000");
    empty when it read everything."""


class ThreadReader(Protocol):
    """Reads the earlier messages of an event's thread on one platform."""

    async def read(self, event: ChatEvent) -> Thread:
        """The messages of `event`'s thread before it.

        Raises:
            PlatformError: The platform refused or could not be reached.
        """
        ...
