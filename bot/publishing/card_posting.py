"""Posting a session's card at most once, across a writer killed mid-post.

A worker killed after the platform took its `post_card` but before the card record named the
message would leave a card nobody updates (stuck on "investigating…") while its successor, or
the reaper, posted a second one. So a post is begun in the record first (`CardRecord.begin_post`:
a key and a time), made with that key, then recorded (`CardRecord.set_message`, which clears the
mark). Whoever finds the mark of an earlier writer looks for that writer's card
(`ChatPlatform.find_card`: Slack by the key in the message's metadata) or posts again with the
same key (Feishu answers a repeated `uuid` with the first message; the console names the
message by it), and shows the current state on what it finds, so the thread keeps one card.

The window this leaves: a Slack post whose message the lookup cannot see (a thread past the
lookup's page bound, or a lookup refused for good: a token without `channels:history`) is
posted again; a second card is better than none.
"""

from __future__ import annotations

import logging

from bot.publishing.card_record import CardRecord, Posting
from bot.publishing.platform import (
    CardRef,
    CardTarget,
    ChatPlatform,
    PlatformError,
    PlatformRateLimited,
    PlatformUnavailable,
)
from cards import ProgressCard

__all__ = ["post_card_once"]

log = logging.getLogger(__name__)

FIND_SLACK_S = 60.0
"""How far before the recorded start of a post its message is looked for (clock skew)."""


async def post_card_once(
    platform: ChatPlatform, record: CardRecord, target: CardTarget, card: ProgressCard
) -> CardRef:
    """Post `card` in the target thread, or show it on the card an earlier writer posted.

    Raises:
        PlatformError: The platform refused the post, or could not be reached (the mark stays,
            so the next attempt looks again).
        StoreError: Redis failed.
    """
    posting = await record.begin_post()
    ref = None
    if posting.earlier:
        ref = await _find(platform, target, posting)
    if ref is None:
        ref = await platform.post_card(target, card, key=posting.key)
    if posting.earlier:  # what was found, or a repeated post's answer, may show an older state
        log.info("card of %s found after an interrupted post: %s", card.turn_id, ref.message_id)
        await platform.update_card(ref, card)
    await record.set_message(ref.message_id)
    return ref


async def _find(platform: ChatPlatform, target: CardTarget, posting: Posting) -> CardRef | None:
    """The earlier writer's card; None when there is none, or the platform refuses to look."""
    try:
        return await platform.find_card(
            target, posting.key, posted_after=max(0.0, posting.since - FIND_SLACK_S)
        )
    except (PlatformRateLimited, PlatformUnavailable):
        raise  # the publisher waits and tries again, looking again
    except PlatformError as exc:
        log.warning("could not look for the card of an interrupted post (%s): posting it", exc)
        return None
