"""What a card says, for every platform: the status, step and intervention lines, elapsed time.

Contract: every piece of user- or model-provided text (names, tool arguments, steer text, errors)
is cleaned, cut to its own cap and passed through the caller's `escape` before it joins a line,
so one long value cannot crowd out the rest and no platform markup can come from it. Formatting
that differs per platform (bold, italics) stays in the renderers; inline code in backticks reads
the same in Slack mrkdwn and Feishu markdown.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import TypeVar, assert_never

from cards._limits import truncate
from cards._model import (
    CardApproval,
    CardChild,
    CardStatus,
    CardStep,
    Intervention,
    InterventionKind,
    ProgressCard,
    StepState,
)

Escape = Callable[[str], str]
_T = TypeVar("_T")

NAME_CHARS = 80
"""A person's name, escaped."""
TOOL_CHARS = 64
"""A tool's name, escaped."""
ARGS_CHARS = 200
"""A step's argument summary, escaped: a line stays readable and ~20 lines fit any block."""
STEER_CHARS = 300
"""What a person said when steering, escaped."""
ERROR_CHARS = 500
"""A failed turn's reason, escaped."""
WHY_CHARS = 200
"""Why a call waits for approval (the intent check's reason), escaped."""
NAMES_SHOWN = 3
"""Steerers named in "Answered (redirected by …)"; more become "and N more"."""

INTERRUPTED_TEXT = (
    "Interrupted: the worker running this analysis stopped; mention me to start again"
)

STATUS_ICONS: Mapping[CardStatus, str] = MappingProxyType(
    {
        CardStatus.QUEUED: "🕒",
        CardStatus.WORKING: "🔎",
        CardStatus.STOPPING: "⏳",
        CardStatus.AWAITING_APPROVAL: "✋",
        CardStatus.DISPATCHED: "🧩",
        CardStatus.ANSWERED: "✅",
        CardStatus.STOPPED: "⏹️",
        CardStatus.FAILED: "❌",
        CardStatus.INTERRUPTED: "⚠️",
        CardStatus.CANCELLED: "🚫",
    }
)
STEP_ICONS: Mapping[StepState, str] = MappingProxyType(
    {
        StepState.RUNNING: "⏳",
        StepState.DONE: "✅",
        StepState.FAILED: "❌",
        StepState.INTERRUPTED: "⏹️",
    }
)
_STEP_WORDS: Mapping[StepState, str] = MappingProxyType(
    {
        StepState.RUNNING: "running",
        StepState.DONE: "",
        StepState.FAILED: "failed",
        StepState.INTERRUPTED: "interrupted",
    }
)

# C0/C1 controls except tab and newline, and lone surrogates: they render as nothing or garbage,
# cost up to 6 bytes each in JSON, and a lone surrogate cannot even be encoded as UTF-8.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_MAX_SECONDS = 10**9
"""Elapsed times are shown capped (a corrupt value must not make a line of any length)."""


def clean(text: str) -> str:
    """Drop characters no card can show (controls other than tab/newline, lone surrogates)."""
    return _UNPRINTABLE.sub("", text)


def one_line(text: str) -> str:
    """Clean `text` and fold every run of whitespace (newlines too) into one space."""
    return " ".join(clean(text).split())


def piece(text: str, cap: int, escape: Escape) -> str:
    """One user-provided value on one line: cleaned, escaped, at most `cap` characters."""
    return truncate(one_line(text), cap, escape=escape)


def plural(count: int, noun: str) -> str:
    """`1 step`, `2 steps`."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def elapsed(seconds: float) -> str:
    """`42s`, `3m 05s`, `1h 02m 05s`; anything not a finite positive number shows as `0s`."""
    total = int(min(seconds, _MAX_SECONDS)) if math.isfinite(seconds) and seconds > 0 else 0
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def duration(seconds: float) -> str:
    """A tool call's duration: `0.4s` under ten seconds, else as `elapsed`."""
    if math.isfinite(seconds) and 0 <= seconds < 10:
        return f"{seconds:.1f}s"
    return elapsed(seconds)


def _who(by: str, escape: Escape) -> str:
    return piece(by, NAME_CHARS, escape) or "someone"


def _last_stopper(card: ProgressCard, escape: Escape) -> str:
    """Who pressed Stop last, escaped; empty when nobody did."""
    stops = [i for i in card.interventions if i.kind is InterventionKind.STOP]
    return _who(stops[-1].by, escape) if stops else ""


def _stopping(card: ProgressCard, escape: Escape) -> str:
    parts = []
    if by := _last_stopper(card, escape):
        parts.append(f"by {by}")
    if card.pending_calls > 0:
        parts.append(f"waiting for {plural(card.pending_calls, 'in-flight call')}")
    return f"Stopping — {', '.join(parts)}…" if parts else "Stopping…"


def _answered(card: ProgressCard, escape: Escape) -> str:
    said = "Answered"
    if card.redirected:
        steers = (i for i in card.interventions if i.kind is InterventionKind.STEER)
        names = list(dict.fromkeys(_who(i.by, escape) for i in steers))
        shown = ", ".join(names[:NAMES_SHOWN])
        more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
        said = f"Answered (redirected by {shown}{more})"
    if card.cutoff:
        said += f" — wrapped up early: {piece(card.cutoff, ERROR_CHARS, escape)}"
    return said


def _redirected(card: ProgressCard) -> str:
    running = sum(step.state is StepState.RUNNING for step in card.steps)
    if running:
        return f"Redirected — finishing {plural(running, 'in-flight call')} first…"
    return "Redirected — taking it at the next step…"


def _waiting(card: ProgressCard) -> str:
    if card.status is CardStatus.AWAITING_APPROVAL:
        calls = plural(len(card.approvals), "call")
        if any(approval.why for approval in card.approvals):
            verb = "needs" if len(card.approvals) == 1 else "need"
            return f"Waiting for approval — {calls} {verb} a person's decision"
        return f"Waiting for approval — {calls} would change something"
    done = sum(c.state in ("done", "failed", "cancelled") for c in card.children)
    return f"Waiting for sub-agents — {done} of {len(card.children)} reported"


def status_text(card: ProgressCard, escape: Escape) -> str:
    """How things stand, in words (`Stopping — by alice, waiting for 2 in-flight calls…`)."""
    match card.status:
        case CardStatus.QUEUED:
            return "Queued — waiting for a worker…"
        case CardStatus.WORKING if card.handed_over:
            return "Continuing on another worker…"
        case CardStatus.WORKING if card.redirect_pending:
            return _redirected(card)
        case CardStatus.WORKING:
            return "Investigating…"
        case CardStatus.STOPPING:
            return _stopping(card, escape)
        case CardStatus.AWAITING_APPROVAL | CardStatus.DISPATCHED:
            return _waiting(card)
        case CardStatus.ANSWERED:
            return _answered(card, escape)
        case CardStatus.STOPPED:
            by = _last_stopper(card, escape)
            return f"Stopped by {by}" if by else "Stopped"
        case CardStatus.FAILED:
            error = piece(card.error, ERROR_CHARS, escape)
            return f"Failed: {error}" if error else "Failed"
        case CardStatus.INTERRUPTED:
            return INTERRUPTED_TEXT
        case CardStatus.CANCELLED:
            return "Cancelled before it started"
        case _:
            assert_never(card.status)


def note_line(card: ProgressCard, escape: Escape) -> str:
    """`ℹ️ Started without the thread's earlier messages: …`, or "" when the card has no note."""
    note = piece(card.note, ERROR_CHARS, escape)
    return f"ℹ️ {note}" if note else ""


def approval_line(approval: CardApproval, escape: Escape) -> str:
    """`✋ Needs approval (changes something): `restart_pod` {"pod": "checkout-1"}`.

    A call held by the intent check says why on a line of its own: `Why: checks the database
    although the redirect said to leave it alone`.
    """
    if approval.risk == "destructive":
        kind = "destructive: a second person must approve"
    elif approval.risk == "read_only":
        kind = "reads only, but goes against a correction"
    else:
        kind = "changes something"
    tool = piece(approval.tool.replace("`", "'"), TOOL_CHARS, escape)
    args = piece(one_line(approval.args), ARGS_CHARS, escape)
    line = f"✋ Needs approval ({kind}): `{tool}` {args}"
    if approval.why:
        line += f"\nWhy: {piece(approval.why, WHY_CHARS, escape)}"
    return line


CHILD_ICONS: Mapping[str, str] = MappingProxyType(
    {
        "pending": "🕒",
        "running": "🔎",
        "awaiting": "❓",
        "done": "✅",
        "failed": "❌",
        "cancelled": "⏹️",
    }
)


def child_line(child: CardChild, escape: Escape) -> str:
    """`🔎 sub-1a2b3c4d5e · check the gateway · running`."""
    icon = CHILD_ICONS.get(child.state, "•")
    task = piece(one_line(child.task), ARGS_CHARS, escape)
    return f"{icon} `{piece(child.child_id, TOOL_CHARS, escape)}` {task} · {child.state}"


def step_line(step: CardStep, escape: Escape, number: str = "") -> str:
    """`3. ✅ `http_get` url=https://status.example.com · 1.2s`.

    `number` is the step's number as the platform marks it up (`*3.*`), the one the answer
    cites (`[3]`): its position among the card's steps, from 1 (`numbered`).
    """
    tool = piece(step.tool.replace("`", "'"), TOOL_CHARS, escape)
    parts = [
        number,
        STEP_ICONS[step.state],
        f"`{tool}`" if tool else "",
        piece(step.args, ARGS_CHARS, escape),
    ]
    outcome = [_STEP_WORDS[step.state]]
    if step.duration_s is not None:
        outcome.append(duration(step.duration_s))
    said = ", ".join(word for word in outcome if word)
    return " ".join(part for part in parts if part) + (f" · {said}" if said else "")


def numbered(steps: Sequence[CardStep]) -> list[tuple[int, CardStep]]:
    """Each step with its number: its position on the card, from 1.

    The model reads the same number on the step's result (`agent_core._step_labels`: the
    analysis's tool calls in history order, which is the order the card adds its steps in).
    """
    return list(enumerate(steps, start=1))


def intervention_line(intervention: Intervention, escape: Escape) -> str:
    """`↪ alice: it's the gateway, not the db` or `■ stopped by bob`."""
    who = _who(intervention.by, escape)
    match intervention.kind:
        case InterventionKind.STEER:
            said = piece(intervention.text, STEER_CHARS, escape)
            return f"↪ {who}: {said}" if said else f"↪ {who} redirected the analysis"
        case InterventionKind.STOP:
            return f"■ stopped by {who}"
        case _:
            assert_never(intervention.kind)


def tail(
    items: Sequence[_T],
    line: Callable[[_T], str],
    *,
    max_lines: int,
    fits: Callable[[str], bool],
    noun: str,
) -> str:
    """The lines of the last items that fit, under a `… 12 earlier steps` line if some are left out.

    Only the items that can be shown are rendered. Returns an empty string when there are no
    items (or, only with absurd limits, when not even the "earlier" line fits).
    """
    lines = [line(item) for item in items[max(0, len(items) - max_lines) :]]
    for shown in range(len(lines), -1, -1):
        hidden = len(items) - shown
        head = [f"… {plural(hidden, 'earlier ' + noun)}"] if hidden else []
        text = "\n".join([*head, *lines[len(lines) - shown :]])
        if fits(text):
            return text
    return ""
