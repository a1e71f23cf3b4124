"""The outbound side of a chat platform: post and update progress cards, show a status line.

Everything the worker says in a thread goes through one `ChatPlatform`; the Slack and Feishu
implementations live in `bot/adapters/` (the only modules that import a platform SDK) and
translate the SDKs' failures into the platform errors of `bot.errors` (re-exported here), so
the publisher can decide what to retry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from bot.errors import (
    CardGone,
    PlatformError,
    PlatformRateLimited,
    PlatformRejected,
    PlatformUnavailable,
)
from bot.events import Platform
from cards import ProgressCard

__all__ = [
    "CardGone",
    "CardRef",
    "CardTarget",
    "ChatPlatform",
    "PlatformError",
    "PlatformRateLimited",
    "PlatformRejected",
    "PlatformUnavailable",
]


@dataclass(frozen=True, slots=True)
class CardTarget:
    """Where a new card goes: the thread of the mention."""

    platform: Platform
    channel: str
    """Slack channel id; Feishu chat id."""
    thread: str
    """Slack `thread_ts`; Feishu message id of the thread's root (cards are replies to it)."""


@dataclass(frozen=True, slots=True)
class CardRef:
    """A posted card: what an update needs."""

    platform: Platform
    channel: str
    message_id: str
    """Slack `ts` of the card message; Feishu `message_id`."""


class ChatPlatform(Protocol):
    """Posts and updates progress cards on one platform."""

    @property
    def platform(self) -> Platform:
        """The platform this client talks to."""
        ...

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        """Post `card` as a new message in the target thread and return where it went.

        `key` names the card (at most 50 characters): a post repeated with the same key, by a
        worker that took over from one killed before it could record the first post's answer,
        may answer with the card first posted (Feishu dedupes on it), whose content can then
        be older than `card`.
        """
        ...

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        """The card posted in the target thread with `key` after `posted_after` (epoch seconds).

        None when there is none, or when the platform finds it by posting again with the same
        key instead (`post_card`).
        """
        ...

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        """Replace the posted card's content with `card`."""
        ...

    async def set_status(self, target: CardTarget, status: str) -> None:
        """Show (or with "" clear) a short "what the bot is doing" line in the thread.

        Slack's `assistant.threads.setStatus` (it clears itself after 2 minutes); a no-op on
        platforms without such a line.
        """
        ...

    async def aclose(self) -> None:
        """Release the client's connections."""
        ...
