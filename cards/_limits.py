"""Each platform's limits as named constants, and the one truncation rule every renderer uses.

Contract: a renderer never emits a text longer than the limit named here. Where it has to cut, it
cuts with `truncate`, so "…" marks every place where text is missing. Values that cannot be cut
(the ids a Stop button carries back) raise `LimitExceeded` instead: a Stop button carrying the
wrong turn would be worse than no card.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "ELLIPSIS",
    "FEISHU",
    "SLACK",
    "FeishuLimits",
    "LimitExceeded",
    "SlackLimits",
    "truncate",
]

ELLIPSIS = "…"
"""Ends every text that was cut (one character)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlackLimits:
    """Slack Block Kit limits (docs.slack.dev/reference/block-kit), and the lengths we keep.

    Slack refuses the whole `chat.postMessage`/`chat.update` with `invalid_blocks` when one field
    is over, so every field below is enforced, not just advised.
    """

    max_blocks: int = 50
    """Blocks per message."""
    section_text: int = 3000
    """Characters in a section block's `text`."""
    header_text: int = 150
    """Characters in a header block's `plain_text`."""
    context_text: int = 2000
    """Characters in one context element's text: Slack allows 3000; context is small print."""
    context_elements: int = 10
    """Elements in one context block."""
    button_text: int = 75
    """Characters in a button's label."""
    action_id: int = 255
    """Characters in a button's `action_id`."""
    button_value: int = 2000
    """Characters in a button's `value` (it carries the turn id, which is never cut)."""
    fallback_text: int = 3000
    """Characters in the message's top-level `text` (notifications; Slack cuts at 40,000)."""
    step_lines: int = 20
    """Tool calls listed at most (our choice: a card is a summary, the newest calls matter)."""
    intervention_lines: int = 10
    """Interventions listed at most (our choice)."""
    approvals: int = 5
    """Waiting calls shown with their buttons (one batch rarely holds more; the rest wait
    until these are decided, or expire)."""


_FEISHU_FRAME_BYTES = 2_000
"""Bytes for all but the texts and ids: keys, tags, header, button, note (about 500 measured)."""
_FEISHU_OTHER_MARKDOWN = 3
"""Markdown elements besides the answer that get `markdown_bytes` each: status, steps, people."""
_MAX_BYTES_PER_CHAR = 4
"""UTF-8 of one code point after control characters are dropped (JSON's `\\"` is only 2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FeishuLimits:
    """Feishu card JSON 2.0 limits, and the byte plan that keeps a whole card under them.

    Feishu refuses a card message over 30 KB (error 230025) and documents no per-element limit we
    could rely on, so the card's bytes are planned: the answer gets `answer_bytes`, each other
    markdown element `markdown_bytes`, the title `title_chars` characters, the button's value
    `button_value_bytes`; the sum plus a fixed frame must stay under `card_bytes` (checked here).
    Sizes are of `json.dumps(card, ensure_ascii=False).encode()`: the sender must serialize the
    same way (with `ensure_ascii=True` a CJK character costs 6 bytes instead of 3).
    """

    card_bytes: int = 28_000
    """Bytes of the whole card JSON: Feishu's 30 KB (30,720) less room for the sender's framing."""
    max_elements: int = 200
    """Elements in `body.elements` (Feishu allows about 200 components per card)."""
    markdown_chars: int = 4000
    """Characters in one markdown element's `content` (a conservative limit of ours)."""
    answer_bytes: int = 12_000
    """Bytes of the answer element: 4,000 CJK characters fit (3 bytes each)."""
    markdown_bytes: int = 3_500
    """Bytes of each other markdown element (status, steps, interventions)."""
    title_chars: int = 100
    """Characters in the header title (our choice; longer titles wrap badly on mobile)."""
    button_value_bytes: int = 1_000
    """Bytes of the Stop button's callback value (turn and thread ids, never cut)."""
    step_lines: int = 20
    """Tool calls listed at most (our choice: a card is a summary, the newest calls matter)."""
    intervention_lines: int = 10
    """Interventions listed at most (our choice)."""
    approvals: int = 5
    """Waiting calls shown with their buttons (one batch rarely holds more; the rest wait
    until these are decided, or expire)."""

    def __post_init__(self) -> None:
        planned = (
            self.answer_bytes
            + _FEISHU_OTHER_MARKDOWN * self.markdown_bytes
            + _MAX_BYTES_PER_CHAR * self.title_chars
            + self.button_value_bytes
            + _FEISHU_FRAME_BYTES
        )
        if planned > self.card_bytes:
            raise ValueError(
                f"FeishuLimits plan {planned} bytes, over card_bytes={self.card_bytes}"
            )


SLACK = SlackLimits()
"""Slack's limits as documented."""
FEISHU = FeishuLimits()
"""Feishu's limits, with our byte plan."""


class LimitExceeded(ValueError):
    """A value the card must carry whole (an id) is longer than its platform allows."""

    def __init__(self, what: str, *, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} long, over the limit of {limit}")
        self.what = what
        """Which value (`turn_id`, `button value`)."""
        self.size = size
        self.limit = limit


def _same(text: str) -> str:
    return text


def truncate(
    text: str,
    limit: int,
    *,
    escape: Callable[[str], str] = _same,
    fits: Callable[[str], bool] | None = None,
) -> str:
    """Return `escape(text)` if it fits in `limit` characters, else an escaped prefix plus "…".

    The cut falls on a character boundary of the *unescaped* text, so no escape sequence
    (`&amp;`) is ever split, and it steps back rather than split an emoji or accented letter
    from a joiner, variation selector or combining mark that belongs to it.

    Args:
        text: The text to fit.
        limit: Most characters the result may have, escapes and "…" included.
        escape: Applied to the kept text; it must never shorten a text (Slack's `&` → `&amp;`).
        fits: An extra test of the result (Feishu's bytes). It must be monotone: once it holds
            for a text, it holds for every shorter prefix of it.

    Returns:
        At most `limit` characters. A cut text ends with "…"; when not even "…" fits, "".
    """

    def ok(candidate: str) -> bool:
        return len(candidate) <= limit and (fits is None or fits(candidate))

    if len(text) <= limit:
        whole = escape(text)
        if ok(whole):
            return whole
    if not ok(ELLIPSIS):
        return ""
    lo, hi = 0, min(len(text), limit)  # escape never shortens: no longer prefix can fit
    while lo < hi:  # the longest prefix that fits with the marker
        mid = (lo + hi + 1) // 2
        if ok(escape(text[:mid]) + ELLIPSIS):
            lo = mid
        else:
            hi = mid - 1
    return escape(text[: _boundary(text, lo)]) + ELLIPSIS


_ZWJ = "\u200d"
_BACKOFF = 8
"""Characters a cut may step back; longer clusters (rare) are cut where the limit falls."""


def _joins_previous(char: str) -> bool:
    """True for a code point that modifies the one before it (it must not start a cut-off)."""
    return (
        unicodedata.combining(char) != 0
        or char in (_ZWJ, "\ufe0e", "\ufe0f")  # text/emoji variation selectors
        or "\U0001f3fb" <= char <= "\U0001f3ff"  # skin tones
        or "\U000e0020" <= char <= "\U000e007f"  # emoji tag sequences (subdivision flags)
    )


def _splits(text: str, at: int) -> bool:
    """True when cutting before `text[at]` would separate it from the character it modifies."""
    return 0 < at < len(text) and (_joins_previous(text[at]) or text[at - 1] == _ZWJ)


def _boundary(text: str, cut: int) -> int:
    """Move a cut at `cut` back so the kept text does not end inside a grapheme (best effort)."""
    floor = max(0, cut - _BACKOFF)
    at = cut
    while at > floor and _splits(text, at):
        at -= 1
    return cut if _splits(text, at) else at
