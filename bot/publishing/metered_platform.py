"""A `ChatPlatform` that counts its calls: card posts, updates and status lines, 429s included.

Wrapping the platform, rather than counting in the publisher, counts every call a worker makes
for a card, whichever path made it (the flusher, a final's re-send, a leftover final), and
counts each attempt: a 429 retried three times is three calls, as the platform saw them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from bot.events import Platform
from bot.publishing.platform import (
    CardGone,
    CardRef,
    CardTarget,
    ChatPlatform,
    PlatformRateLimited,
    PlatformRejected,
    PlatformUnavailable,
)
from cards import ProgressCard

__all__ = ["MeteredPlatform", "outcome_of"]

T = TypeVar("T")

CardCall = Callable[[str, str, str], None]
"""Counts one call: (platform, call, outcome)."""


def outcome_of(exc: BaseException) -> str:
    """The outcome label of a failed platform call."""
    match exc:
        case PlatformRateLimited():
            return "rate_limited"
        case PlatformUnavailable():
            return "unavailable"
        case CardGone():
            return "gone"
        case PlatformRejected():
            return "rejected"
        case _:
            return "failed"


class MeteredPlatform:
    """Forwards every call to `inner` and counts it with `count`."""

    def __init__(self, inner: ChatPlatform, count: CardCall) -> None:
        self._inner = inner
        self._count = count

    @property
    def platform(self) -> Platform:
        """The wrapped client's platform."""
        return self._inner.platform

    async def _counted(self, call: str, work: Awaitable[T]) -> T:
        platform = self._inner.platform.value
        try:
            result = await work
        except Exception as exc:
            self._count(platform, call, outcome_of(exc))
            raise
        self._count(platform, call, "ok")
        return result

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        """Post a card (counted as `post`)."""
        return await self._counted("post", self._inner.post_card(target, card, key=key))

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        """Look for a card posted with `key` (counted as `find`)."""
        work = self._inner.find_card(target, key, posted_after=posted_after)
        return await self._counted("find", work)

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        """Update a card (counted as `update`)."""
        await self._counted("update", self._inner.update_card(ref, card))

    async def set_status(self, target: CardTarget, status: str) -> None:
        """Set or clear the status line (counted as `status`)."""
        await self._counted("status", self._inner.set_status(target, status))

    async def aclose(self) -> None:
        """Close the wrapped client."""
        await self._inner.aclose()
