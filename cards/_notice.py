"""A notice: a message the bot posts on its own (an alert's root, what follows in its thread).

Contract: `Notice` is what to say (a title, a severity, lines, key fields, links); the three
renderers turn it into each platform's message within that platform's limits, and every text in
it is treated as hostile, because it comes from outside (an alert's title, labels, annotations,
URLs): cleaned of control characters (`_lines.clean`), mentions and markup links defused
(`cards._mentions`), escaped for the platform's markup (Slack mrkdwn, Feishu markdown), and cut
with `truncate` where it would not fit. A link is kept only when `safe_url` accepts it: an
`http`/`https` URL with a host, no credentials, no whitespace, control or format characters
(bidi overrides), at most `URL_CHARS` long; characters that could end a link's markup (`<`, `>`,
`|`, `"`, a backslash, anything not ASCII) are percent-encoded. A URL is never cut: a cut URL
leads somewhere else, so one that does not fit is left out, and the notice says how many were.

- `render_slack_notice` → the fallback text and Block Kit blocks: a header (the title, plain
  text), a context (severity), a section (the lines), a section of fields (`*label*` over its
  value, at most ten, Slack's limit), a section of links (`<url|label>`); every text within
  `SlackLimits`, `verbatim: true`, no `link_names`.
- `render_feishu_notice` → `("interactive", content)`: a card JSON 2.0 whose header carries the
  title and a colour for the severity, a markdown element for the lines and one for the fields
  (`<`/`>` as character references), and a button per link (`open_url`, so the URL is a JSON
  value that no markdown parses). A card rather than a `post`: it shows links as buttons and the
  severity as the header's colour, and the project's Feishu markdown escaping applies as on the
  progress cards. Its JSON stays under `FeishuLimits.card_bytes` (Feishu refuses a card over 30
  KB with 230025), measured as it is sent (`ensure_ascii=False`).
- `render_console_notice` → plain text: no control characters, lines wrapped to the width
  (a URL is kept whole on its line, so it can still be opened).
"""

from __future__ import annotations

import json
import textwrap
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any
from urllib.parse import quote, urlsplit

from cards import _lines
from cards._feishu import escape_markdown, json_bytes
from cards._limits import FEISHU, SLACK, FeishuLimits, SlackLimits, truncate
from cards._mentions import defuse
from cards._slack import escape_mrkdwn

__all__ = [
    "LINE_CHARS",
    "MAX_FIELDS",
    "MAX_LINES",
    "MAX_LINKS",
    "URL_CHARS",
    "Notice",
    "render_console_notice",
    "render_feishu_notice",
    "render_slack_notice",
    "safe_url",
]

MAX_LINES = 20
"""Lines shown at most (the first ones); the rest are counted."""
LINE_CHARS = 500
"""Characters of one line at most."""
MAX_FIELDS = 10
"""Fields shown at most: a Slack section holds ten."""
LABEL_CHARS = 64
"""Characters of a field's or link's label."""
VALUE_CHARS = 300
"""Characters of a field's value."""
MAX_LINKS = 10
"""Links shown at most."""
URL_CHARS = 2000
"""Characters of a URL at most; a longer one is left out, never cut."""
SEVERITY_CHARS = 40
"""Characters of the severity."""
_UNTITLED = "Notice"
_URL_SAFE = "!#$%&'()*+,/:;=?@[]~"
"""Kept as they are in a URL (with letters, digits and `_.-~`); anything else is encoded."""
_SLACK_URL = str.maketrans({"&": "&amp;"})
"""Slack's escaping inside a link's URL (`<` and `>` are already percent-encoded)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Notice:
    """What a notice says. Every text may come from outside and is rendered as hostile."""

    title: str
    """One line: what happened (`Firing: CheckoutLatencyHigh`)."""
    severity: str = ""
    """The sender's word for it (`critical`, `warning`); empty: none shown."""
    lines: tuple[str, ...] = ()
    """Sentences under the title, one a line."""
    fields: tuple[tuple[str, str], ...] = ()
    """Key labels as (label, value) pairs."""
    links: tuple[tuple[str, str], ...] = ()
    """(label, URL) pairs; only `http`/`https` URLs are shown (`safe_url`)."""


def safe_url(url: str) -> str:
    """`url` fit to be a link target, or "" when it is not one to show.

    Accepted: `http`/`https` with a host, at most `URL_CHARS` characters, no credentials
    (`https://good@evil`), no whitespace, control, format (bidi) or surrogate characters, an
    ASCII host. Returned with every character outside the URL's own syntax percent-encoded, so
    `<`, `>`, `|`, `"` and backslashes cannot end a platform's link markup.
    """
    if not url or len(url) > URL_CHARS:
        return ""
    if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in url):
        return ""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed IPv6 bracket
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    if "@" in parts.netloc or not parts.netloc.isascii():
        return ""
    shown = quote(url, safe=_URL_SAFE)
    return shown if len(shown) <= URL_CHARS else ""


def _links(notice: Notice) -> tuple[list[tuple[str, str]], int]:
    """The links to show (label cleaned, URL made safe) and how many were left out."""
    kept = [
        (_lines.one_line(label) or "Link", shown)
        for label, url in notice.links
        if (shown := safe_url(url))
    ]
    return kept[:MAX_LINKS], len(notice.links) - len(kept[:MAX_LINKS])


def _title(notice: Notice, limit: int) -> str:
    return truncate(_lines.one_line(notice.title), limit, escape=defuse) or _UNTITLED


def _joined(
    pieces: Sequence[str], fits: Callable[[str], bool], noun: str, more: Callable[[str], str]
) -> str:
    """As many `pieces` as fit, one a line, then `more("and 3 more lines")` if any were left."""
    text = ""
    for n, piece in enumerate(pieces):
        longer = f"{text}\n{piece}" if text else piece
        if not fits(longer):
            left = more(f"and {_lines.plural(len(pieces) - n, 'more ' + noun)}")
            return f"{text}\n{left}" if text and fits(f"{text}\n{left}") else text
        text = longer
    return text


def _line_pieces(notice: Notice, escape: Callable[[str], str]) -> list[str]:
    lines = [_lines.piece(line, LINE_CHARS, escape) for line in notice.lines]
    shown = [line for line in lines if line]
    if len(shown) > MAX_LINES:
        return [*shown[:MAX_LINES], escape(f"and {len(shown) - MAX_LINES} more lines")]
    return shown


# --- Slack --------------------------------------------------------------------------------------


def render_slack_notice(
    notice: Notice, limits: SlackLimits = SLACK
) -> tuple[str, list[dict[str, Any]]]:
    """The notice as `chat.postMessage`'s `text` (notifications) and `blocks`."""
    title = _title(notice, limits.header_text)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": True}}
    ]
    severity = _lines.piece(notice.severity, SEVERITY_CHARS, escape_mrkdwn)
    if severity:
        blocks.append({"type": "context", "elements": [_mrkdwn(f"Severity: *{severity}*")]})
    section = limits.section_text
    lines = _joined(
        _line_pieces(notice, escape_mrkdwn), lambda t: len(t) <= section, "line", _italic
    )
    if lines:
        blocks.append({"type": "section", "text": _mrkdwn(lines)})
    fields = [
        _mrkdwn(f"*{_lines.piece(k, LABEL_CHARS, escape_mrkdwn)}*\n{_value(v, escape_mrkdwn)}")
        for k, v in notice.fields[:MAX_FIELDS]
    ]
    if fields:
        blocks.append({"type": "section", "fields": fields})
    links, left = _links(notice)
    shown = [
        f"<{url.translate(_SLACK_URL)}|{truncate(label, LABEL_CHARS, escape=escape_mrkdwn)}>"
        for label, url in links
    ]
    text = _slack_links(shown, left, section)
    if text:
        blocks.append({"type": "section", "text": _mrkdwn(text)})
    prefix = f"[{severity}] " if severity else ""
    fallback = truncate(f"{prefix}{_lines.piece(notice.title, 300, escape_mrkdwn)}", 3000)
    return fallback or _UNTITLED, blocks


def _slack_links(shown: list[str], left: int, limit: int) -> str:
    """The links joined by ` · ` within `limit` characters; a link is never cut."""
    text = ""
    for link in shown:
        longer = f"{text} · {link}" if text else link
        if len(longer) > limit:
            left += 1
            continue
        text = longer
    note = f"_({_lines.plural(left, 'link')} not shown)_" if left else ""
    if note and len(f"{text}\n{note}") <= limit:
        return f"{text}\n{note}" if text else note
    return text


def _italic(text: str) -> str:
    return f"_{text}_"


def _value(value: str, escape: Callable[[str], str]) -> str:
    return _lines.piece(value, VALUE_CHARS, escape) or "-"


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": text, "verbatim": True}


# --- Feishu -------------------------------------------------------------------------------------

NOTICE_TEXT_BYTES = 8_000
"""Bytes of the lines' markdown element."""
NOTICE_FIELD_BYTES = 6_000
"""Bytes of the fields' markdown element."""
_NOTE_ROOM = 200
"""Bytes kept for the "links not shown" note after the last button."""
SEVERITY_TEMPLATES: Mapping[str, str] = MappingProxyType(
    {
        "critical": "red",
        "page": "red",
        "fatal": "red",
        "emergency": "red",
        "error": "red",
        "high": "red",
        "p1": "red",
        "warning": "orange",
        "warn": "orange",
        "medium": "orange",
        "p2": "orange",
        "p3": "orange",
    }
)
"""The header colour of a severity (lower-cased); any other is blue."""


def render_feishu_notice(notice: Notice, limits: FeishuLimits = FEISHU) -> tuple[str, str]:
    """The notice as `im/v1/messages`' `msg_type` and `content` (an interactive card's JSON)."""
    chars = limits.markdown_chars
    severity = _lines.piece(notice.severity, SEVERITY_CHARS, escape_markdown)
    pieces = _line_pieces(notice, escape_markdown)
    if severity:
        pieces.insert(0, f"**Severity:** {severity}")
    elements: list[dict[str, Any]] = []
    lines = _joined(pieces, _within(chars, NOTICE_TEXT_BYTES), "line", lambda t: f"*{t}*")
    if lines:
        elements.append({"tag": "markdown", "content": lines})
    fields = [
        f"**{_lines.piece(k, LABEL_CHARS, escape_markdown)}:** {_value(v, escape_markdown)}"
        for k, v in notice.fields[:MAX_FIELDS]
    ]
    shown = _joined(fields, _within(chars, NOTICE_FIELD_BYTES), "field", lambda t: f"*{t}*")
    if shown:
        elements.append({"tag": "markdown", "content": shown})
    template = SEVERITY_TEMPLATES.get(notice.severity.strip().lower(), "blue")
    card: dict[str, Any] = {
        "schema": "2.0",
        "header": {
            "title": {"tag": "plain_text", "content": _title(notice, limits.title_chars)},
            "template": template,
        },
        "body": {"elements": elements},
    }
    links, left = _links(notice)
    for label, url in links:
        elements.append(_link_button(truncate(label, LABEL_CHARS, escape=defuse), url))
        if json_bytes(card) > limits.card_bytes - _NOTE_ROOM:
            elements.pop()
            left += 1
    if left:
        elements.append(
            {"tag": "markdown", "content": f"*{_lines.plural(left, 'link')} not shown*"}
        )
    return "interactive", json.dumps(card, ensure_ascii=False)


def _within(chars: int, budget: int) -> Callable[[str], bool]:
    return lambda text: len(text) <= chars and json_bytes(text) <= budget


def _link_button(label: str, url: str) -> dict[str, Any]:
    return {
        "tag": "button",
        "text": {"tag": "plain_text", "content": label},
        "type": "default",
        "behaviors": [{"type": "open_url", "default_url": url}],
    }


# --- console ------------------------------------------------------------------------------------


def render_console_notice(notice: Notice, width: int = 80) -> str:
    """The notice as plain text: a rule with the title, its lines, fields and links."""
    width = max(width, 30)
    title = truncate(_lines.one_line(notice.title), width - 4, escape=defuse) or _UNTITLED
    out = [f"== {title} ".ljust(width, "=")]
    if severity := _lines.piece(notice.severity, SEVERITY_CHARS, defuse):
        out.append(f"Severity: {severity}")
    for line in _line_pieces(notice, defuse):
        out.extend(textwrap.wrap(line, width) or [""])
    for label, value in notice.fields[:MAX_FIELDS]:
        shown = f"  {_lines.piece(label, LABEL_CHARS, defuse)}: {_value(value, defuse)}"
        out.extend(textwrap.wrap(shown, width, subsequent_indent="    "))
    links, left = _links(notice)
    for label, url in links:
        # A URL is never broken: a wrapped one could not be opened.
        shown = f"  {truncate(label, LABEL_CHARS, escape=defuse)}: {url}"
        out.extend(textwrap.wrap(shown, width, subsequent_indent="    ", break_long_words=False))
    if left:
        out.append(f"  ({_lines.plural(left, 'link')} not shown)")
    return "\n".join(out)
