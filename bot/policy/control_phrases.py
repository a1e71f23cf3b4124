"""Control commands: the whole-message phrases that brake or restart an analysis, or the bot.

Contract: `parse_control(text)` returns a `ControlCommand` only when the *whole* message, once
normalized, is made of known control phrases and politeness fillers ("please", "now", "请",
"马上", ...), with at least one control phrase and no contradiction between them. Everything
else is content and reaches the model as ordinary text (a steer, while a turn runs): a control
word with an object ("stop the nginx pod"), a question ("why did the job stop?", "暂停是什么
意思"), a negation ("don't stop", "别停"), a report ("停止了", "it stopped").

Why a phrase table and not a classifier: a command routed to the control plane cannot be taken
back, so it must never misfire on a colleague's sentence; the card's Stop button is always there
as the unambiguous brake, and a small table is something users can learn
(`docs/control-commands.md` lists it, and a test keeps that page and this table in step).

Kill switch commands (`killswitch on|off|status`, `开启急停`, ...) follow the same rules, but
never mix with another command, and act only when the bot is @mentioned (`bot.policy.steer`):
they concern every analysis of the deployment, not the thread's.

Normalization: NFKC (full-width letters and punctuation become ASCII), casefold, emoji shortcodes
(`:octagonal_sign:`) dropped, every character that is not a letter or a digit turned into a space,
spaces collapsed. ASCII words match whole; CJK runs, written without spaces, are segmented against
the table with the fewest phrases (so "先停一下" is "先" + "停一下", a pause, not "停", a stop).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

__all__ = [
    "KILL_SWITCH_INTENTS",
    "MAX_COMMAND_CHARS",
    "PHRASES",
    "ControlCommand",
    "ControlIntent",
    "normalize",
    "parse_control",
]


class ControlIntent(StrEnum):
    """What a control command asks of the session's analysis, or of the whole bot."""

    STOP = "stop"
    """End the live turn now and tombstone the queued ones ("stop", "cancel", "停止", "取消")."""
    PAUSE = "pause"
    """The same brake as `STOP`; only the acknowledgement differs: it offers "resume"."""
    RESUME = "resume"
    """Continue a stopped or paused analysis: starts a new turn when nothing is running."""
    KILL_SWITCH_ON = "killswitch_on"
    """An admin turns the kill switch on: every live analysis stops, none starts."""
    KILL_SWITCH_OFF = "killswitch_off"
    """An admin turns the kill switch off: queued analyses run again."""
    KILL_SWITCH_STATUS = "killswitch_status"
    """An admin asks whether the kill switch is on."""


@dataclass(frozen=True, slots=True)
class ControlCommand:
    """A message recognized as a control command."""

    intent: ControlIntent
    """What the message asks for."""
    text: str
    """The normalized message that matched, for logs and acknowledgements."""


_STOP: Final = ControlIntent.STOP
_PAUSE: Final = ControlIntent.PAUSE
_RESUME: Final = ControlIntent.RESUME
KILL_SWITCH_INTENTS: Final = frozenset(
    {ControlIntent.KILL_SWITCH_ON, ControlIntent.KILL_SWITCH_OFF, ControlIntent.KILL_SWITCH_STATUS}
)
"""The admin commands: they act on the whole deployment, so `bot.policy.steer` asks for more."""

PHRASES: Final[Mapping[str, ControlIntent | None]] = MappingProxyType(
    {
        # English: whole words. "kill", "hold", "wait", "enough" and "go ahead" are left out:
        # each is as likely to be about a system, or an approval, as about the bot.
        **dict.fromkeys(["stop", "halt", "abort", "cancel"], _STOP),
        "pause": _PAUSE,
        **dict.fromkeys(["resume", "continue", "go on", "carry on", "keep going"], _RESUME),
        # Chinese. "恢复" is not here: in an incident channel it usually reports that a service
        # recovered. "了" is not a filler ("停止了" reports that something stopped).
        **dict.fromkeys(
            ["停", "停止", "停下", "停下来", "停了", "停掉", "取消", "终止", "中止", "刹车"], _STOP
        ),
        **dict.fromkeys(["别跑了", "别再跑了", "不要跑了", "不要再跑了"], _STOP),
        **dict.fromkeys(["别查了", "别再查了", "不要查了", "不要再查了", "不用查了"], _STOP),
        **dict.fromkeys(["暂停", "停一下"], _PAUSE),
        **dict.fromkeys(["继续", "接着跑", "继续跑"], _RESUME),
        # The kill switch, by its name only: "stop everything" and "全部停止" stay this thread's
        # stop. "熔断" is not here: in an incident channel it names a service's circuit breaker.
        # "急停" (emergency stop, a machine's kill switch) always comes with on, off or status.
        **dict.fromkeys(["killswitch on", "kill switch on"], ControlIntent.KILL_SWITCH_ON),
        **dict.fromkeys(["killswitch off", "kill switch off"], ControlIntent.KILL_SWITCH_OFF),
        **dict.fromkeys(
            ["killswitch status", "kill switch status"], ControlIntent.KILL_SWITCH_STATUS
        ),
        **dict.fromkeys(["开启急停", "打开急停", "全局急停"], ControlIntent.KILL_SWITCH_ON),
        **dict.fromkeys(["关闭急停", "解除急停"], ControlIntent.KILL_SWITCH_OFF),
        "急停状态": ControlIntent.KILL_SWITCH_STATUS,
        # Fillers: politeness, urgency and the bot's own work as the object. They never make a
        # command on their own. Words that could name a system ("task", "job", "run", "任务")
        # are not fillers, so "stop the job" stays content.
        **dict.fromkeys(
            ["please", "pls", "plz", "now", "right now", "right away", "immediately", "asap"]
            + ["ok", "okay", "hey", "chatops", "bot", "can you", "could you", "for now"]
            + ["it", "this", "that", "all", "everything", "the", "current", "running"]
            + ["analysis", "investigation", "analyzing", "analysing", "investigating"],
            None,
        ),
        **dict.fromkeys(
            ["请", "立即", "立刻", "马上", "赶紧", "赶快", "快", "先", "吧", "哎", "唉", "好"]
            + ["好的", "算了", "一下", "你", "都", "所有", "全部", "分析", "排查"]
            + ["当前分析", "当前任务"],
            None,
        ),
    }
)
"""Every phrase the parser knows, as written in the docs: its intent, or `None` for a filler."""

MAX_COMMAND_CHARS: Final = 200
"""A normalized message longer than this is never a command (it is far longer than any)."""

# Linear time on any text (docs/reliability.md X1): an attempt starts only at `:`, and its
# possessive run cannot contain `:`, so no character is read by more than two attempts.
_SHORTCODE: Final = re.compile(r":[a-z0-9_+-]{2,}+:")


# ASCII letters and digits are kept; every other ASCII character becomes a space.
_ASCII_NON_ALNUM: Final = str.maketrans({chr(i): " " for i in range(128) if not chr(i).isalnum()})


def normalize(text: str) -> str:
    """Return `text` as the parser compares it (see the module docstring)."""
    if text.isascii():
        # The same result as the general path (NFKC is the identity on ASCII and casefold is
        # lower), without a per-character category lookup: this runs on every inbound message.
        folded = _SHORTCODE.sub(" ", text.lower())
        return " ".join(folded.translate(_ASCII_NON_ALNUM).split())
    return _normalize_unicode(text)


def _normalize_unicode(text: str) -> str:
    folded = _SHORTCODE.sub(" ", unicodedata.normalize("NFKC", text).casefold())
    kept = "".join(c if unicodedata.category(c)[0] in "LN" else " " for c in folded)
    return " ".join(kept.split())


def _units(normalized: str) -> tuple[str, ...]:
    """Split normalized text into match units: whole ASCII words, single CJK characters."""
    units: list[str] = []
    for word in normalized.split(" "):
        units.extend([word] if word.isascii() else list(word))
    return tuple(units)


_TABLE: Final[Mapping[tuple[str, ...], ControlIntent | None]] = MappingProxyType(
    {_units(normalize(phrase)): intent for phrase, intent in PHRASES.items()}
)
_LONGEST: Final = max(len(units) for units in _TABLE)
_FIRST_UNITS: Final = frozenset(units[0] for units in _TABLE)
"""A command's first unit starts some phrase: most messages are ruled out by this one lookup."""


def _segment(units: tuple[str, ...]) -> tuple[tuple[str, ...], ...] | None:
    """Cover `units` with the fewest table phrases, or return `None` when they cannot be."""
    best: list[tuple[tuple[str, ...], ...] | None] = [None] * (len(units) + 1)
    best[0] = ()
    for start in range(len(units)):
        done = best[start]
        if done is None:
            continue
        for end in range(start + 1, min(start + _LONGEST, len(units)) + 1):
            piece = units[start:end]
            known = best[end]
            if piece in _TABLE and (known is None or len(done) + 1 < len(known)):
                best[end] = (*done, piece)
    return best[-1]


def _combine(intents: set[ControlIntent]) -> ControlIntent | None:
    """One intent from a message's phrases; `None` when there is none or they contradict."""
    if intents & KILL_SWITCH_INTENTS:  # one admin command, alone: never "stop, killswitch on"
        return next(iter(intents)) if len(intents) == 1 else None
    if _RESUME in intents:
        return _RESUME if intents == {_RESUME} else None
    if _STOP in intents:
        return _STOP  # "pause, stop": both are brakes, and the stronger one wins
    return _PAUSE if intents else None


def parse_control(text: str) -> ControlCommand | None:
    """Return the control command `text` is, or `None` when it is content.

    Args:
        text: A message's text with the bot's mention already stripped (`ChatEvent.text`).
            Any other mention left in it ("@alice stop") makes it content: it is addressed
            to someone else.
    """
    normalized = normalize(text)
    if not normalized or len(normalized) > MAX_COMMAND_CHARS:
        return None
    units = _units(normalized)
    if units[0] not in _FIRST_UNITS:
        return None
    pieces = _segment(units)
    if pieces is None:
        return None
    intent = _combine({i for piece in pieces if (i := _TABLE[piece]) is not None})
    return None if intent is None else ControlCommand(intent=intent, text=normalized)
