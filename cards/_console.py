"""A progress card as plain text for a terminal (the console platform), wrapped to a width.

Contract: the text has no ANSI or other control sequences (every piece of user- or model-provided
text goes through `_lines.clean`, which drops ESC and the other C0/C1 controls except tab and
newline), no line is longer than `width` characters, a live card ends with exactly one
`STOP_HINT` line and a final card has none (an answered one nobody marked wrong ends with
`WRONG_HINT` instead). The words (status, steps, interventions) are the
shared ones of `cards._lines`, as on Slack and Feishu. Width is counted in characters; a wide
character (CJK, emoji) takes two terminal columns, so such a line may look longer.

Layout, in order: a `== title ===` rule; the status and elapsed time; what started it (an
alert, and its root message's link); the newest steps,
numbered as the answer cites them; the interventions; the answer between two rules (its parts
under their headings, citations `[3]` as references `[3 · prometheus_query]`, its sources);
each waiting call with its `[ /approve <call id> ]` and `[ /deny <call id> ]` lines (the
commands `chatops console` takes); the replay link (when set); who marked the answer wrong
(once someone did); the Stop hint (only while live); the `WRONG_HINT` (an answered card nobody
marked yet).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from typing import TypeVar

from cards import _lines
from cards._answer import Markup, show_answer
from cards._limits import truncate
from cards._mentions import defuse
from cards._model import ORIGIN_CHARS, CardApproval, CardStatus, ProgressCard

__all__ = ["ANSWER_CHARS", "MIN_WIDTH", "STOP_HINT", "WRONG_HINT", "render_console"]

WRONG_HINT = "[ /wrong ] Mark answer wrong"
"""The last line of an answered card nobody marked yet: the console's "Mark answer wrong"."""
STOP_HINT = "[ /stop ] Stop"
"""The last line of a live card: the console's Stop "button" (the client sends the stop action)."""
MIN_WIDTH = 30
"""Narrower widths are rendered at this width."""
ANSWER_CHARS = 20_000
"""Characters of the answer shown at most (our choice: a terminal scrolls, but not forever)."""
STEP_LINES = 20
"""Tool calls listed at most (the newest; as on Slack)."""
INTERVENTION_LINES = 10
"""Interventions listed at most (the newest)."""
_WHO_CHARS = 100
"""Characters of the name of who marked the answer wrong."""
_INDENT = "  "
_T = TypeVar("_T")
_UNTITLED = "Analysis"


def _plain(text: str) -> str:
    """Defuse mentions, as on the chat platforms; plain text has no markup to escape.

    Cleaning already removed every control character. Defusing matters should the text be
    pasted into a chat.
    """
    return defuse(text)


def render_console(card: ProgressCard, width: int = 80) -> str:
    """The card as plain text lines of at most `width` characters, joined by newlines."""
    width = max(width, MIN_WIDTH)
    lines = [_rule(card.title, width), *_wrap(_status(card), width)]
    if origin := _origin(card):
        lines.extend(_wrap(origin, width))
    if note := _lines.note_line(card, _plain):
        lines.extend(_wrap(note, width))
    steps = _listed(
        _lines.numbered(card.steps),
        lambda item: _lines.step_line(item[1], _plain, f"{item[0]}."),
        STEP_LINES,
        "step",
    )
    interventions = _listed(
        card.interventions,
        lambda intervention: _lines.intervention_line(intervention, _plain),
        INTERVENTION_LINES,
        "intervention",
    )
    children = _listed(
        card.children, lambda child: _lines.child_line(child, _plain), STEP_LINES, "sub-agent"
    )
    for block in (steps, interventions, children):
        if block:
            lines.append("")
            lines.extend(line for text in block.split("\n") for line in _wrap(text, width, 1))
    if card.status is CardStatus.ANSWERED:
        lines.extend(_answer(card, width))
    if card.status is CardStatus.AWAITING_APPROVAL:
        for approval in card.approvals:
            lines.append("")
            lines.extend(_wrap(_lines.approval_line(approval, _plain), width, 1))
            lines.extend(_decision(approval, width))
    if link := card.shown_link:
        lines.extend(["", *_wrap(f"Replay: {link}", width)])
    if card.marked_wrong_by:
        who = _lines.piece(card.marked_wrong_by, _WHO_CHARS, _plain)
        lines.extend(["", *_wrap(f"⚠️ Answer marked wrong by {who}", width)])
    if not card.is_final:
        lines.extend(["", STOP_HINT])
    if card.can_mark_wrong:
        lines.extend(["", WRONG_HINT])
    return "\n".join(lines)


def _call_id(approval: CardApproval) -> str:
    """The call a waiting call's buttons name: `CardApproval.value` is `<call id>|<digest>`."""
    return approval.value.partition("|")[0]


def _decision(approval: CardApproval, width: int) -> list[str]:
    """The console's Approve and Deny "buttons": the commands `chatops console` accepts.

    The console sends the card's value (`<call id>|<digest>`) for `/approve <call id>`, so the
    digest of the arguments shown here travels without being typed. A call id the console could
    not read back (controls, spaces) is shown cleaned; `/approve` alone names the one waiting call.
    """
    call = _lines.one_line(_call_id(approval))
    return [
        *_wrap(f"[ /approve {call} ] Approve", width, 1),
        *_wrap(f"[ /deny {call} ] Deny", width, 1),
    ]


def _rule(title: str, width: int) -> str:
    """`== Why is checkout slow? =====…` filling the width."""
    shown = truncate(_lines.one_line(title), width - 4, escape=defuse) or _UNTITLED
    return f"== {shown} ".ljust(width, "=")


def _origin(card: ProgressCard) -> str:
    """`🔔 Started by alert … · root message: <link>`, or "" when a person started it."""
    text = _lines.piece(card.origin, ORIGIN_CHARS, _plain)
    if not text:
        return ""
    link = card.shown_origin_link
    return f"🔔 {text} · root message: {link}" if link else f"🔔 {text}"


def _status(card: ProgressCard) -> str:
    icon = _lines.STATUS_ICONS[card.status]
    said = _lines.status_text(card, _plain)
    return f"{icon} {said} · {_lines.elapsed(card.elapsed_s)}"


def _listed(items: Sequence[_T], line: Callable[[_T], str], most: int, noun: str) -> str:
    """The newest `most` items' lines: a terminal has no size limit but the line count."""
    return _lines.tail(items, line, max_lines=most, fits=lambda _: True, noun=noun)


def _wrap(text: str, width: int, depth: int = 0) -> list[str]:
    """One logical line folded to `width`; continuation lines are indented one level deeper."""
    indent = _INDENT * depth
    return textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=indent + _INDENT,
        break_on_hyphens=False,
    ) or [indent]


_MARKUP = Markup(escape=_plain, strong=lambda text: text)
"""Citations as plain references (`[3 · prometheus_query]`); no markup in a terminal."""


def _answer(card: ProgressCard, width: int) -> list[str]:
    """The answer between two rules, each part under its heading, then its sources.

    Line breaks are kept, a blank line separates the parts, and a note says when the answer had
    to be shortened.
    """
    shown = show_answer(card.answer, card.steps, _MARKUP, budget=ANSWER_CHARS, each=ANSWER_CHARS)
    if not shown.parts:
        return []
    rule = "-" * width
    body: list[str] = []
    for heading, text in shown.parts:
        if body:
            body.append("")
        body += [heading] if heading else []
        body += _folded(text, width)
    if shown.sources:
        body += ["", "Sources"]
        body += [line for source in shown.sources for line in _wrap(source, width, 1)]
    note = [f"(Answer shortened: {shown.chars:,} characters in all.)"] if shown.shortened else []
    return ["", rule, *body, *note, rule]


def _folded(text: str, width: int) -> list[str]:
    """`text` folded to `width`, its line breaks and blank lines kept."""
    return [
        folded
        for line in text.splitlines()
        for folded in (textwrap.wrap(line, width, break_on_hyphens=False) if line.strip() else [""])
    ]
