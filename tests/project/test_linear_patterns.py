"""The patterns `bot` and `cards` apply to untrusted text cannot backtrack (docs/reliability.md X1).

Why this way: no test may assert on wall-clock time, so linearity is checked on the patterns'
structure, with `re`'s own parser: a pattern with only bounded repetition does constant work
per start position, and a possessive repetition of one character class gives nothing back.
The functions are then run on 100k-character hostile inputs and their results checked, so a
regression that slipped past the structure check would hang this test (the suite's per-test
timeout) rather than pass. Redaction is linear by engine (RE2) and measured by `bench/hygiene.py`.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from bot.policy import control_phrases as control_commands
from cards import _mentions

sre_parse: Any = re._parser  # type: ignore[attr-defined]
sre_constants: Any = re._constants  # type: ignore[attr-defined]
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT}


def _ops(parsed: Any) -> list[tuple[Any, Any]]:
    found: list[tuple[Any, Any]] = []
    for op, arg in parsed.data:
        found.append((op, arg))
        for child in arg if isinstance(arg, (list, tuple)) else (arg,):
            if isinstance(child, sre_parse.SubPattern):
                found.extend(_ops(child))
            elif isinstance(child, (list, tuple)):
                found.extend(
                    op_arg
                    for item in child
                    if isinstance(item, sre_parse.SubPattern)
                    for op_arg in _ops(item)
                )
    return found


def _parse(pattern: re.Pattern[str]) -> list[tuple[Any, Any]]:
    return _ops(sre_parse.parse(pattern.pattern, pattern.flags))


def test_mention_defusing_has_only_bounded_repetition() -> None:
    """X1: `cards._mentions` matches short tokens only (`s?` at most): O(1) work per position."""
    ops = _parse(_mentions._TOKENS)
    unbounded = [arg for op, arg in ops if op in _REPEATS and arg[1] == sre_constants.MAXREPEAT]
    assert not unbounded
    assert not [op for op, _ in ops if op == sre_constants.POSSESSIVE_REPEAT]


def test_shortcode_stripping_repeats_only_possessively() -> None:
    """X1: the control parser's one repetition is possessive, so it never gives back."""
    ops = _parse(control_commands._SHORTCODE)
    assert not [op for op, _ in ops if op in _REPEATS]
    assert [op for op, _ in ops if op == sre_constants.POSSESSIVE_REPEAT]


@pytest.mark.parametrize(
    "hostile",
    ["@" * 100_000, "<" * 100_000, "](" * 50_000, "<" + " " * 100_000, "@\n" * 50_000],
)
def test_defusing_100k_hostile_characters_finishes_and_only_adds_joiners(hostile: str) -> None:
    """X1: hostile runs are defused, nothing but word joiners is added."""
    out = _mentions.defuse(hostile)
    assert out.replace(_mentions.JOINER, "") == hostile


@pytest.mark.parametrize(
    "hostile", [":" * 100_000, ":" + "a" * 100_000, ":aa" * 33_000, " " * 100_000]
)
def test_normalizing_100k_hostile_characters_finishes(hostile: str) -> None:
    """X1: normalizing a long hostile message ends, and it is never a command."""
    assert control_commands.parse_control(hostile) is None
    assert len(control_commands.normalize(hostile)) <= len(hostile)
