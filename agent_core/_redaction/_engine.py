r"""How one redaction rule is compiled and applied: RE2 patterns, a value group, placeholders.

Contract: `compile_pattern` compiles with Google's RE2 (`google-re2`, module `re2`), whose
matching time is linear in the input for every pattern it accepts; it refuses what it cannot
run that way (look-around, back-references, possessive quantifiers) with `re2.error`, at import.
A `Rule` replaces each match, or only its `value` group, with the marker; a value that is a
placeholder (a marker already, `<none>`, `${VAR}`, `true`, `****`, `sk-...`) or a byte count
(`kubectl describe secret`: `password:  12 bytes`) is kept, which makes `redact` idempotent.

API differences from `re` this module relies on (google-re2 `re2/__init__.py`, 1.1): flags are
written inline (`(?i)`, `(?m)`, `(?-i:…)`), `\Z` is spelt `\z`, `\b`, `\w`, `\d` and `\s` are
ASCII, and `Match.span`/`start` take group numbers only (names raise), so the value group's
number is looked up once here. `sub` with a function works as in `re`; each match builds its
spans in time proportional to the number of groups, so rules keep to one group.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

import re2  # type: ignore[import-untyped]

__all__ = [
    "MARKER",
    "Match",
    "Pattern",
    "Rule",
    "compile_any",
    "compile_pattern",
    "is_placeholder",
    "marker",
    "rule",
]

MARKER = "[REDACTED:{kind}]"
"""What replaces a secret; `kind` names the rule that found it."""

_MARKER_PREFIX = "[REDACTED:"
_PLACEHOLDER_WORDS = frozenset({"", "true", "false", "null", "none", "nil", "undefined"})
_PLACEHOLDER_STARTS = (_MARKER_PREFIX, "<", "${", "{{", "$(", "%(")


class Match(Protocol):
    """The part of `re2._Match` the rules use."""

    @property
    def string(self) -> str:
        """The text searched."""

    def span(self, group: int = 0) -> tuple[int, int]:
        """Start and end of a group, by number."""

    def group(self, group: int = 0) -> str:
        """The text of a group, by number."""


class Pattern(Protocol):
    """The part of `re2._Regexp` the rules use."""

    @property
    def pattern(self) -> str:
        """The source it was compiled from."""

    @property
    def groupindex(self) -> Mapping[str, int]:
        """Group numbers by name."""

    def sub(self, repl: Callable[[Match], str], text: str) -> str:
        """`text` with every match replaced by `repl(match)`."""

    def search(self, text: str) -> Match | None:
        """The first match in `text`, if any."""


def compile_pattern(pattern: str) -> Pattern:
    """Compile `pattern` with RE2 (raises `re2.error` for anything RE2 cannot run linearly)."""
    options = re2.Options()
    options.log_errors = False  # an invalid rule raises at import; RE2's own log adds nothing
    return cast(Pattern, re2.compile(pattern, options))


def compile_any(patterns: Iterable[str]) -> Pattern:
    """One RE2 pattern that is found in a text exactly when one of `patterns` is.

    The alternation of the patterns, each in a group of its own (so its inline flags stay in
    it), with named groups made plain (RE2 refuses a name used twice). RE2 never gives a wrong
    answer for lack of memory (it falls back from its DFA to an NFA), so the union is a safe
    test that no rule has anything to do; it gets more memory than one rule needs.
    """
    alternatives = [_NAMED_GROUP.sub("(?:", pattern) for pattern in patterns]
    options = re2.Options()
    options.log_errors = False
    options.max_mem = _ANY_MAX_MEM
    union = "|".join(f"(?:{alternative})" for alternative in alternatives)
    return cast(Pattern, re2.compile(union, options))


_NAMED_GROUP = re2.compile(r"\(\?P<[A-Za-z_][A-Za-z0-9_]*>")
_ANY_MAX_MEM = 64 << 20
"""RE2's memory budget for the union of every rule (its default, 8 MiB, suits one pattern)."""


def marker(kind: str) -> str:
    """The marker that replaces a secret found by the rule `kind`."""
    return MARKER.format(kind=kind)


def is_placeholder(value: str) -> bool:
    """True when `value` stands for a secret rather than being one (or is redacted already)."""
    bare = value.strip("\"'\\")
    if bare.lower() in _PLACEHOLDER_WORDS or bare.startswith(_PLACEHOLDER_STARTS):
        return True
    return set(bare) == {"*"} or bare.endswith(("...", "…"))  # `sk-...` in docs


Rewrite = Callable[[str, str], str]
"""`(value, marker) -> replacement` for rules that redact parts of a value (cookies, blocks)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A pattern whose matches (or their `value` group) become `[REDACTED:<kind>]`."""

    kind: str
    """The marker's kind."""
    pattern: Pattern
    """Matches a secret; when it has a `value` group, only that group is replaced."""
    rewrite: Rewrite | None = None
    """Replaces the value instead of the plain marker."""
    gate: Pattern | None = None
    """When set, the rule runs only on texts this pattern is found in."""
    value_group: int = 0
    """The number of the `value` group (0: the whole match); looked up once, as RE2's
    `groupindex` builds a new dict on every access."""

    def apply(self, text: str) -> str:
        """`text` with this rule's secrets redacted."""
        if self.gate is not None and self.gate.search(text) is None:
            return text
        return self.pattern.sub(self._replace, text)

    def _replace(self, match: Match) -> str:
        if self.value_group == 0:
            return marker(self.kind)
        start, end = match.span(self.value_group)
        whole_start, whole_end = match.span(0)
        text = match.string
        value = text[start:end]
        inside_marker = text.endswith(_MARKER_PREFIX, 0, start)  # `[REDACTED:` + `kind]@`
        if inside_marker or is_placeholder(value) or text.startswith(" bytes", end):
            return text[whole_start:whole_end]
        new = marker(self.kind) if self.rewrite is None else self.rewrite(value, marker(self.kind))
        return text[whole_start:start] + new + text[end:whole_end]


def rule(kind: str, pattern: str, *, rewrite: Rewrite | None = None, gate: str = "") -> Rule:
    """A `Rule` from pattern source (RE2 syntax)."""
    compiled = compile_pattern(pattern)
    gated = compile_pattern(gate) if gate else None
    return Rule(kind, compiled, rewrite, gated, compiled.groupindex.get("value", 0))
