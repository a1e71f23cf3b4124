"""A progress card as Slack Block Kit blocks, and the message's notification text.

Contract: the blocks pass Slack's validation for any card (at most 18 of the 50 blocks, every
text within `SlackLimits`), a live card has exactly one Stop button and a final card none, and no
user- or model-provided text can mention anyone (docs/reliability.md A6). Mentions, channel pings
and links in mrkdwn all need `<` (`<!channel>`, `<@U123>`, `<https://x|y>`), and Slack's
documented escaping turns every `&`, `<`, `>` into `&amp;`, `&lt;`, `&gt;`; `verbatim: true`
also stops Slack's own parsing of a bare `@channel`
(docs.slack.dev/messaging/formatting-message-text#escaping). Header and button labels are
`plain_text`, which Slack never parses for mentions. On top of that, every such token is defused
with an invisible word joiner (`cards._mentions`), the header's too.

Blocks, in order: header (the task); section (status and elapsed time); context (what started
it, if an alert did: the alert and a link to its root message); context (the card's
note, if any: it started without the thread's messages); section (the newest
steps, numbered as the answer cites them); context (interventions); divider, one section per
part of the answer (`Findings`, `Hypotheses`, `Next steps`, each under its bold heading; its
citations `[3]` as bold references `[3 · prometheus_query]`), a context of its sources (each
cited step's number, tool and arguments) and maybe a context note (the answer, `cards._answer`);
context (who marked the answer wrong, once someone did); actions (Stop while live; Mark answer
wrong on an answered card nobody marked yet; Replay when the card has a link).
"""

from __future__ import annotations

from typing import Any

from cards import _lines
from cards._answer import Markup, show_answer
from cards._limits import SLACK, LimitExceeded, SlackLimits, truncate
from cards._mentions import defuse
from cards._model import ORIGIN_CHARS, CardApproval, CardStatus, ProgressCard

__all__ = ["STOP_ACTION_ID", "WRONG_ACTION_ID", "escape_mrkdwn", "render_slack", "slack_text"]

Block = dict[str, Any]

STOP_ACTION_ID = "stop"
"""The Stop button's `action_id`; its `value` is the turn id."""
APPROVE_ACTION_ID = "approve"
DENY_ACTION_ID = "deny"
"""The `action_id`s of a waiting call's buttons; their `value` is `CardApproval.value`."""
WRONG_ACTION_ID = "wrong"
"""The "Mark answer wrong" button's `action_id` (answered final cards); its `value` is the turn
id the analysis was booked under (`bot.state.memory`)."""
REPLAY_ACTION_ID = "replay"
"""The Replay link button's `action_id` (its `url` is `ProgressCard.link`)."""
_WHO_CHARS = 100
"""Characters of the name of who marked the answer wrong."""
_UNTITLED = "Analysis"
"""Shown when the task is empty: Slack refuses an empty header."""
_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def escape_mrkdwn(text: str) -> str:
    """Escape `&`, `<` and `>` as Slack requires for text that must show literally.

    Mentions, broadcasts and links are defused first (`cards._mentions`), so a bare `@here`
    cannot ping even where a client parses it.
    """
    return defuse(text).translate(_ESCAPES)


def render_slack(card: ProgressCard, limits: SlackLimits = SLACK) -> list[Block]:
    """The card as Block Kit blocks for `chat.postMessage` / `chat.update`.

    Raises:
        LimitExceeded: The turn id is longer than a button value may be (it is never cut).
    """
    blocks = [_header(card, limits), _section(_status(card), limits.section_text)]
    if origin := _origin(card):
        blocks.append(_context(origin, limits))
    if note := _lines.note_line(card, escape_mrkdwn):
        blocks.append(_context(note, limits))
    steps = _lines.tail(
        _lines.numbered(card.steps),
        lambda item: _lines.step_line(item[1], escape_mrkdwn, f"*{item[0]}.*"),
        max_lines=limits.step_lines,
        fits=lambda text: len(text) <= limits.section_text,
        noun="step",
    )
    if steps:
        blocks.append(_section(steps, limits.section_text))
    people = _lines.tail(
        card.interventions,
        lambda intervention: _lines.intervention_line(intervention, escape_mrkdwn),
        max_lines=limits.intervention_lines,
        fits=lambda text: len(text) <= limits.context_text,
        noun="intervention",
    )
    if people:
        blocks.append(_context(people, limits))
    children = _lines.tail(
        card.children,
        lambda child: _lines.child_line(child, escape_mrkdwn),
        max_lines=limits.step_lines,
        fits=lambda text: len(text) <= limits.section_text,
        noun="sub-agent",
    )
    if children:
        blocks.append(_section(children, limits.section_text))
    if card.status is CardStatus.ANSWERED:
        blocks.extend(_answer(card, limits))
    if card.status is CardStatus.AWAITING_APPROVAL:
        for approval in card.approvals[: limits.approvals]:
            line = _lines.approval_line(approval, escape_mrkdwn)
            blocks.append(_section(line, limits.section_text))
            blocks.append(_decision(approval, limits))
    if card.marked_wrong_by:
        who = _lines.piece(card.marked_wrong_by, _WHO_CHARS, escape_mrkdwn)
        blocks.append(_context(f"⚠️ Answer marked wrong by {who}", limits))
    if not card.is_final or card.shown_link or card.can_mark_wrong:
        blocks.append(_actions(card, limits))
    return blocks


def slack_text(card: ProgressCard, limits: SlackLimits = SLACK) -> str:
    """The message's top-level `text`: what notifications and screen readers show.

    It is mrkdwn too, so it is escaped like the blocks. Send it without `link_names`/`parse=full`,
    which would turn a bare `@channel` into a ping.
    """
    title = _lines.piece(card.title, limits.header_text, escape_mrkdwn) or _UNTITLED
    return truncate(f"{title} · {_lines.status_text(card, escape_mrkdwn)}", limits.fallback_text)


def _origin(card: ProgressCard) -> str:
    """`🔔 Started by alert … · <link|root message>`, or "" when a person started it.

    The link is an http(s) URL of RFC 3986 characters (`ProgressCard.shown_origin_link`), so it
    holds no `<`, `>` or `|`; its `&` is escaped, as Slack asks of any `&` in mrkdwn.
    """
    text = _lines.piece(card.origin, ORIGIN_CHARS, escape_mrkdwn)
    if not text:
        return ""
    link = card.shown_origin_link
    said = f" · <{link.replace('&', '&amp;')}|root message>" if link else ""
    return f"🔔 {text}{said}"


def _status(card: ProgressCard) -> str:
    icon = _lines.STATUS_ICONS[card.status]
    said = _lines.status_text(card, escape_mrkdwn)
    return f"{icon} *{said}*  ·  {_lines.elapsed(card.elapsed_s)}"


_MARKUP = Markup(escape=escape_mrkdwn, strong=lambda text: f"*{text}*")
"""Citations as bold references (`*[3 · prometheus_query]*`), headings in bold."""
_HEADING_CHARS = 16
"""Room a section keeps for its `*Next steps*` line."""


def _answer(card: ProgressCard, limits: SlackLimits) -> list[Block]:
    """Divider, one section per part of the answer (its heading in bold), its sources, a note.

    The parts share one section's characters (`SlackLimits.section_text`), as the answer did
    before it had parts; the note says when it had to be shortened.
    """
    each = limits.section_text
    shown = show_answer(
        card.answer, card.steps, _MARKUP, budget=each, each=each, heading_room=_HEADING_CHARS
    )
    if not shown.parts:
        return []
    blocks: list[Block] = [{"type": "divider"}]
    for heading, text in shown.parts:
        said = f"*{heading}*\n{text}" if heading else text
        blocks.append(_section(said, limits.section_text))
    if shown.sources:
        blocks.append(_context(_fitting("*Sources*", shown.sources, limits.context_text), limits))
    if shown.shortened:
        note = f"_Answer shortened to fit Slack ({shown.chars:,} characters in all)._"
        blocks.append(_context(note, limits))
    return blocks


def _fitting(head: str, lines: tuple[str, ...], limit: int) -> str:
    """`head` and as many of `lines` as fit in `limit` characters, one a line."""
    text = head
    for line in lines:
        if len(text) + 1 + len(line) > limit:
            break
        text += "\n" + line
    return text


def _header(card: ProgressCard, limits: SlackLimits) -> Block:
    title = truncate(_lines.one_line(card.title), limits.header_text, escape=defuse) or _UNTITLED
    return {"type": "header", "text": {"type": "plain_text", "text": title, "emoji": True}}


def _mrkdwn(text: str, limit: int) -> Block:
    # The cut is only a guard: every caller already fits its text. Cutting escaped text can leave
    # a stray `&am`, never a `<`, so it cannot create markup.
    return {"type": "mrkdwn", "text": truncate(text, limit), "verbatim": True}


def _section(text: str, limit: int) -> Block:
    return {"type": "section", "text": _mrkdwn(text, limit)}


def _context(text: str, limits: SlackLimits) -> Block:
    return {"type": "context", "elements": [_mrkdwn(text, limits.context_text)]}


def _actions(card: ProgressCard, limits: SlackLimits) -> Block:
    """Stop while live, Mark answer wrong once answered, Replay when the card has a link."""
    buttons: list[Block] = []
    if not card.is_final or card.can_mark_wrong:
        if len(card.turn_id) > limits.button_value:
            raise LimitExceeded("turn_id", size=len(card.turn_id), limit=limits.button_value)
    if not card.is_final:
        buttons.append(
            {
                "type": "button",
                "action_id": STOP_ACTION_ID,
                "value": card.turn_id,
                "style": "danger",
                "text": {"type": "plain_text", "text": truncate("Stop", limits.button_text)},
            }
        )
    if card.can_mark_wrong:
        label = truncate("Mark answer wrong", limits.button_text)
        buttons.append(
            {
                "type": "button",
                "action_id": WRONG_ACTION_ID,
                "value": card.turn_id,
                "text": {"type": "plain_text", "text": label},
            }
        )
    if link := card.shown_link:
        # A link button: Slack opens the URL and still sends a `block_actions` press, which
        # the steer policy ignores (no marker for this action id).
        buttons.append(
            {
                "type": "button",
                "action_id": REPLAY_ACTION_ID,
                "url": link,
                "text": {"type": "plain_text", "text": truncate("Replay", limits.button_text)},
            }
        )
    return {"type": "actions", "elements": buttons}


def _decision(approval: CardApproval, limits: SlackLimits) -> Block:
    """Approve and Deny for one waiting call; their value names the call and its arguments."""
    if len(approval.value) > limits.button_value:
        raise LimitExceeded("approval value", size=len(approval.value), limit=limits.button_value)

    def button(action_id: str, label: str, style: str) -> Block:
        return {
            "type": "button",
            "action_id": action_id,
            "value": approval.value,
            "style": style,
            "text": {"type": "plain_text", "text": truncate(label, limits.button_text)},
        }

    return {
        "type": "actions",
        "elements": [
            button(APPROVE_ACTION_ID, "Approve", "primary"),
            button(DENY_ACTION_ID, "Deny", "danger"),
        ],
    }
