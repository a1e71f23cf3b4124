"""A progress card as a Feishu card JSON 2.0 object.

Contract: for any card the JSON stays within `FeishuLimits` (its bytes by the plan documented
there, a handful of the ~200 elements, every markdown element within its characters), a live
card has exactly one Stop button whose callback value is `{"action", "turn", "thread"}` (what the
ingress reads) and a final card none, and no user- or model-provided text can mention anyone
(docs/reliability.md A6).

Escaping: Feishu markdown mentions, links with hidden targets, colours and other rich markup are
all HTML-like tags (`<at id=all></at>`, `<at user_id="ou_x"></at>`, `<link>`, `<font>`), and a
bare "@all" in markdown is plain text (open.feishu.cn, card JSON 2.0 "Rich text (Markdown)").
So user text gets `<` and `>` as the character references `&#60;` and `&#62;`, which is how
Feishu's markdown docs say to show those characters literally. The header title is `plain_text`,
which Feishu never parses.

Elements, in order: markdown (status and elapsed time); markdown (what started it, if an alert
did: the alert and a link to its root message); markdown (the newest steps, numbered as
the answer cites them); markdown (interventions); hr, one markdown per part of the answer
(`Findings`, `Hypotheses`, `Next steps` under bold headings; citations `[3]` as bold references
`[3 · prometheus_query]`), its sources and maybe a note (the answer, `cards._answer`); while
calls wait for approval, per call a markdown line (the call, and why it waits when the intent
check held it) and its Approve and Deny buttons; markdown (who marked the answer wrong,
once someone did); button (Stop, only while live); button (Mark answer wrong, on an answered
card nobody marked yet: its value is `{"action": "wrong", "turn", "thread"}`); button (Replay,
when the card has a link).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from cards import _lines
from cards._answer import MAX_SECTIONS, Markup, show_answer
from cards._limits import FEISHU, FeishuLimits, LimitExceeded, truncate
from cards._mentions import defuse
from cards._model import ORIGIN_CHARS, CardApproval, CardStatus, ProgressCard

__all__ = [
    "HEADER_TEMPLATES",
    "STOP_ACTION",
    "WRONG_ACTION",
    "escape_markdown",
    "json_bytes",
    "render_feishu",
]

Element = dict[str, Any]

STOP_ACTION = "stop"
"""`value.action` of the Stop button's callback."""
WRONG_ACTION = "wrong"
"""`value.action` of the "Mark answer wrong" button (answered final cards); `value.turn` is the
turn id the analysis was booked under (`bot.state.memory`)."""
APPROVE_ACTION = "approve"
DENY_ACTION = "deny"
"""`value.action` of a waiting call's buttons; `value.call` is `CardApproval.value`."""
HEADER_TEMPLATES: Mapping[CardStatus, str] = MappingProxyType(
    {
        CardStatus.QUEUED: "grey",
        CardStatus.WORKING: "blue",
        CardStatus.STOPPING: "orange",
        CardStatus.AWAITING_APPROVAL: "purple",
        CardStatus.DISPATCHED: "indigo",
        CardStatus.ANSWERED: "green",
        CardStatus.STOPPED: "grey",
        CardStatus.FAILED: "red",
        CardStatus.INTERRUPTED: "yellow",
        CardStatus.CANCELLED: "grey",
    }
)
"""The header colour (Feishu's `template`) for each status."""
_UNTITLED = "Analysis"
_WHO_CHARS = 100
"""Characters of the name of who marked the answer wrong (its bytes come out of the frame)."""
_ESCAPES = str.maketrans({"<": "&#60;", ">": "&#62;"})


ORIGIN_BYTES = 800
"""Bytes of the line saying what started the analysis (its alert and root message's link): like
the note, it comes out of the room the byte plan (`cards._limits`) leaves beside its elements."""
NOTE_BYTES = 1_000
"""Bytes of the card's note: the byte plan (`cards._limits`) leaves about 2 KB beside its
elements, of which this is the note's."""


def escape_markdown(text: str) -> str:
    """Show `<` and `>` literally in Feishu markdown, so no tag (`<at id=all>`) can form.

    Mentions, broadcasts (`@_all`, `@所有人`) and markdown links (`[good](evil)`) are defused
    first (`cards._mentions`).
    """
    return defuse(text).translate(_ESCAPES)


def json_bytes(value: object) -> int:
    """Bytes of `value` as the card is measured: UTF-8 of `json.dumps(..., ensure_ascii=False)`."""
    return len(json.dumps(value, ensure_ascii=False).encode())


def render_feishu(card: ProgressCard, limits: FeishuLimits = FEISHU) -> dict[str, Any]:
    """The card as a JSON 2.0 object for `im/v1/messages` (create, reply or PATCH).

    Raises:
        LimitExceeded: The turn and thread ids are too long for the button's value (never cut).
    """
    within = _fits(limits.markdown_bytes)
    elements = [_markdown(truncate(_status(card), limits.markdown_chars, fits=within))]
    if origin := _origin(card, limits):
        elements.append(_markdown(origin, text_size="notation"))
    if note := _lines.note_line(card, escape_markdown):
        shown = truncate(note, limits.markdown_chars, fits=_fits(NOTE_BYTES))
        elements.append(_markdown(shown, text_size="notation"))
    steps = _lines.tail(
        _lines.numbered(card.steps),
        lambda item: _lines.step_line(item[1], escape_markdown, f"**{item[0]}.**"),
        max_lines=limits.step_lines,
        fits=lambda text: len(text) <= limits.markdown_chars and within(text),
        noun="step",
    )
    if steps:
        elements.append(_markdown(steps))
    people = _lines.tail(
        card.interventions,
        lambda intervention: _lines.intervention_line(intervention, escape_markdown),
        max_lines=limits.intervention_lines,
        fits=lambda text: len(text) <= limits.markdown_chars and within(text),
        noun="intervention",
    )
    if people:
        elements.append(_markdown(people))
    children = _lines.tail(
        card.children,
        lambda child: _lines.child_line(child, escape_markdown),
        max_lines=limits.step_lines,
        fits=lambda text: len(text) <= limits.markdown_chars and within(text),
        noun="sub-agent",
    )
    if children:
        elements.append(_markdown(children))
    if card.status is CardStatus.ANSWERED:
        elements.extend(_answer(card, limits))
    if card.status is CardStatus.AWAITING_APPROVAL:
        # While calls wait no answer is shown: their lines share the answer's bytes.
        fits = _fits(limits.answer_bytes // max(1, limits.approvals))
        for approval in card.approvals[: limits.approvals]:
            line = _lines.approval_line(approval, escape_markdown)
            elements.append(_markdown(truncate(line, limits.markdown_chars, fits=fits)))
            elements.append(_button(card, approval, APPROVE_ACTION, "Approve", "primary", limits))
            elements.append(_button(card, approval, DENY_ACTION, "Deny", "danger", limits))
    elements.extend(_controls(card, limits))
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "header": _header(card, limits),
        "body": {"elements": elements},
    }


def _controls(card: ProgressCard, limits: FeishuLimits) -> list[Element]:
    """Who marked the answer wrong; Stop (live); Mark answer wrong (answered); Replay (a link)."""
    elements: list[Element] = []
    if card.marked_wrong_by:
        who = _lines.piece(card.marked_wrong_by, _WHO_CHARS, escape_markdown)
        elements.append(_markdown(f"⚠️ Answer marked wrong by {who}", text_size="notation"))
    if not card.is_final:
        elements.append(_stop_button(card, limits))
    if card.can_mark_wrong:
        value = {"action": WRONG_ACTION, "turn": card.turn_id, "thread": card.thread}
        elements.append(_callback_button("Mark answer wrong", "default", value, limits))
    if link := card.shown_link:
        elements.append(_link_button("Replay", link))
    return elements


def _fits(budget: int) -> Callable[[str], bool]:
    """A test that a text, as a JSON string, takes at most `budget` bytes."""
    return lambda text: json_bytes(text) <= budget


def _origin(card: ProgressCard, limits: FeishuLimits) -> str:
    """`🔔 Started by alert … · [root message](link)`, or "" when a person started it.

    The link is an http(s) URL of RFC 3986 characters (`ProgressCard.shown_origin_link`); its
    parentheses are percent-encoded (the same URL) so none can end the markdown link early.
    """
    if not _lines.one_line(card.origin):
        return ""
    link = card.shown_origin_link.replace("(", "%28").replace(")", "%29")
    said = f" · [root message]({link})" if link else ""
    text = truncate(
        _lines.one_line(card.origin),
        ORIGIN_CHARS,
        escape=escape_markdown,
        fits=lambda shown: json_bytes(f"🔔 {shown}{said}") <= ORIGIN_BYTES,
    )
    return f"🔔 {text}{said}" if text else ""


def _status(card: ProgressCard) -> str:
    icon = _lines.STATUS_ICONS[card.status]
    said = _lines.status_text(card, escape_markdown)
    return f"{icon} **{said}**  ·  {_lines.elapsed(card.elapsed_s)}"


_MARKUP = Markup(escape=escape_markdown, strong=lambda text: f"**{text}**")
"""Citations as bold references (`**[3 · prometheus_query]**`), headings in bold."""
_HEADING_ROOM = 20
"""Characters and bytes a section keeps for its `**Next steps**` line."""
SOURCES_BYTES = 1_500
"""Bytes of the answer's Sources element (each cited step's number, tool and arguments)."""
_ELEMENT_BYTES = 64
"""Bytes of one markdown element's frame (`{"tag": "markdown", …}`, about 50 measured)."""


def _answer(card: ProgressCard, limits: FeishuLimits) -> list[Element]:
    """A rule, one markdown element per part of the answer, its sources, maybe a note.

    Everything here comes out of the answer's bytes (`FeishuLimits.answer_bytes`): the sources
    first, then each element's frame, and what is left is shared by the parts.
    """
    frames = _ELEMENT_BYTES * (MAX_SECTIONS + 2)  # the parts, the sources, the note
    budget = limits.answer_bytes - SOURCES_BYTES - frames
    shown = show_answer(
        card.answer,
        card.steps,
        _MARKUP,
        budget=budget,
        each=limits.markdown_chars,
        size=json_bytes,
        heading_room=_HEADING_ROOM,
    )
    if not shown.parts:
        return []
    elements: list[Element] = [{"tag": "hr"}]
    for heading, text in shown.parts:
        elements.append(_markdown(f"**{heading}**\n{text}" if heading else text))
    if shown.sources:
        elements.append(_markdown(_sources(shown.sources, limits), text_size="notation"))
    if shown.shortened:
        note = f"*Answer shortened to fit the card ({shown.chars:,} characters in all).*"
        elements.append(_markdown(note, text_size="notation"))
    return elements


def _sources(lines: tuple[str, ...], limits: FeishuLimits) -> str:
    """`**Sources**` and as many cited steps' lines as fit its bytes and characters."""
    text = "**Sources**"
    for line in lines:
        longer = f"{text}\n{line}"
        if len(longer) > limits.markdown_chars or json_bytes(longer) > SOURCES_BYTES:
            break
        text = longer
    return text


def _header(card: ProgressCard, limits: FeishuLimits) -> Element:
    title = truncate(_lines.one_line(card.title), limits.title_chars, escape=defuse) or _UNTITLED
    return {
        "title": {"tag": "plain_text", "content": title},
        "template": HEADER_TEMPLATES[card.status],
    }


def _markdown(content: str, *, text_size: str = "normal") -> Element:
    return {"tag": "markdown", "content": content, "text_size": text_size}


def _stop_button(card: ProgressCard, limits: FeishuLimits) -> Element:
    value = {"action": STOP_ACTION, "turn": card.turn_id, "thread": card.thread}
    return _callback_button("Stop", "danger", value, limits)


def _button(
    card: ProgressCard,
    approval: CardApproval,
    action: str,
    label: str,
    kind: str,
    limits: FeishuLimits,
) -> Element:
    """Approve or Deny for one waiting call: the callback value names the call."""
    value = {"action": action, "call": approval.value, "thread": card.thread}
    return _callback_button(label, kind, value, limits)


def _link_button(label: str, url: str) -> Element:
    """A button that opens `url` (card JSON 2.0 `open_url` behavior); it sends no callback."""
    behavior = {"type": "open_url", "default_url": url}
    return {
        "tag": "button",
        "text": {"tag": "plain_text", "content": label},
        "type": "default",
        "behaviors": [behavior],
    }


def _callback_button(label: str, kind: str, value: dict[str, str], limits: FeishuLimits) -> Element:
    """A button whose press comes back as a `card.action.trigger` callback with `value`."""
    size = json_bytes(value)
    if size > limits.button_value_bytes:
        raise LimitExceeded("button value", size=size, limit=limits.button_value_bytes)
    return {
        "tag": "button",
        "text": {"tag": "plain_text", "content": label},
        "type": kind,
        "behaviors": [{"type": "callback", "value": value}],
    }
