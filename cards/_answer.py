"""The answer on a card: its sections, and its citations rendered as references to steps.

The model is asked to end with `Findings`, `Hypotheses` and `Next steps`, each heading alone on
its line, and to cite the step a fact rests on as `[3]` (several: `[3, 5]` or `[3][5]`); each
tool result it reads ends with that number (`agent_core._step_labels`), which is the step's
position on the card, counted from 1. Every platform renders the answer the same way here and
differs only in markup (`Markup`).

Contract:
- **Sections.** A line that is one of the headings (any case, optionally as a Markdown heading
  or in bold, optionally ending in `:`; text after the colon starts the section) starts a
  section; text before the first heading is a section without one. An answer without headings
  is one section without a heading: it renders as before.
- **Citations.** `[n]` or `[n, m, …]` (at most `MAX_CITED` numbers of at most 4 digits), not
  glued to a word before it (`pods[3]` is code), whose every number names a step of the card
  is rendered as a reference to those steps; adjacent ones (`[3][5]`) become one reference. A
  citation naming a step the card does not have is left as the text it was: never a reference
  to nothing.
- **Linear.** The scan finds each `[` followed by a digit or a space (one fixed two-character
  pattern, nothing to backtrack) and looks at most `_CITATION_CHARS` characters past it, and
  each line of at most `_HEADING_LINE_CHARS` is looked at once for a heading, so a 40 KB
  hostile answer costs what its length costs (measured: tens of milliseconds per platform).
- **Escaping.** Citations are found in the escaped text (the escapes of every platform leave
  digits, brackets, commas and spaces alone), so the references are the only markup added,
  and what they add (a step's tool name) is escaped by the caller's `escape` too. A rendering
  never shortens its text, so `cards._limits.truncate` can cut a rendered answer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from cards._limits import truncate
from cards._lines import TOOL_CHARS, Escape, clean, piece
from cards._model import CardStep

__all__ = [
    "HEADINGS",
    "MAX_CITED",
    "MAX_SECTIONS",
    "SOURCES_SHOWN",
    "Markup",
    "Section",
    "Shown",
    "cite",
    "cited_steps",
    "sections",
    "share",
    "show_answer",
    "source_line",
]

HEADINGS = ("Findings", "Hypotheses", "Next steps")
"""The headings the answer's sections are recognised by (the system prompt asks for these)."""
MAX_CITED = 8
"""Numbers in one citation at most (`[1, 2, 3]`); a longer bracket is left as text."""
_CITATION_CHARS = 48
"""Characters looked at after a `[` for its citation, at most."""
_MAX_DIGITS = 4
_START = re.compile(r"\[[ 0-9]")
"""Where a citation may start. Two fixed characters (no quantifier, so nothing to backtrack):
the engine skips, in C, the `[` that cannot start one (40,000 of them: 0.25 s in a Python loop)."""
SOURCES_SHOWN = 10
"""Cited steps listed under the answer at most (in the order first cited)."""
SOURCE_ARGS_CHARS = 100
"""A cited step's argument summary in its Sources line, escaped."""
_HEADING_LINE_CHARS = 80
"""Longer lines are never headings (and are not looked at for one)."""
MAX_SECTIONS = 6
"""Sections at most (a heading, its text before, each heading again); later headings stay text."""
_BY_KEY = {heading.casefold(): heading for heading in HEADINGS}
_DECORATION = "#*_ \t"
"""What may surround a heading: Markdown heading marks, bold or italics, spaces."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Markup:
    """How one platform shows a reference and a heading."""

    escape: Escape
    """The platform's escaping of user- and model-provided text."""
    strong: Callable[[str], str]
    """Bold (Slack `*x*`, Feishu `**x**`); identity where there is no markup."""


@dataclass(frozen=True, slots=True)
class Section:
    """One part of the answer."""

    heading: str
    """One of `HEADINGS`, or "" for text before the first heading (or no headings at all)."""
    body: str


def _heading(line: str) -> tuple[str, str] | None:
    """`(heading, text after its colon)` when `line` starts a section, else None."""
    lead = line[: len(line) - len(line.lstrip(_DECORATION))]
    word, _, rest = line[len(lead) :].partition(":")
    heading = _BY_KEY.get(word.strip(_DECORATION).casefold())
    if heading is None:
        return None
    rest = rest.strip()
    closing = lead.strip(" \t#")  # `**Findings:** text`: the bold closes after the colon
    if closing and rest.startswith(closing):
        rest = rest[len(closing) :].lstrip()
    return heading, rest


def sections(text: str) -> list[Section]:
    """The answer's sections, in order; one section without a heading when it has none."""
    found: list[Section] = []
    heading, body = "", []
    for line in text.split("\n"):
        short = len(line) <= _HEADING_LINE_CHARS and len(found) < MAX_SECTIONS - 1
        match = _heading(line) if short else None
        if match is None:
            body.append(line)
            continue
        if heading or "\n".join(body).strip():
            found.append(Section(heading, "\n".join(body).strip()))
        heading, body = match[0], [match[1]] if match[1] else []
    found.append(Section(heading, "\n".join(body).strip()))
    return found


def _numbers_at(text: str, start: int, steps: int) -> tuple[list[int], int] | None:
    """The step numbers of the citation whose `[` is at `start`, and the index after its `]`.

    None when the bracket is not a citation, or names a step the card does not have.
    """
    numbers: list[int] = []
    digits, spaced = "", False
    for at in range(start + 1, min(len(text), start + 1 + _CITATION_CHARS)):
        char = text[at]
        if "0" <= char <= "9":
            if spaced or len(digits) == _MAX_DIGITS:
                return None
            digits += char
        elif char == " ":
            spaced = bool(digits)
        elif char in ",]" and digits:
            numbers.append(int(digits))
            digits, spaced = "", False
            if char == "]":
                known = len(numbers) <= MAX_CITED and all(1 <= n <= steps for n in numbers)
                return (numbers, at + 1) if known else None
        else:
            return None
    return None


def _citation(text: str, start: int, steps: int) -> tuple[list[int], int] | None:
    """The citation at `start` (a `[`) merged with the ones right after it, or None."""
    before = text[start - 1] if start else " "
    if before.isalnum() or before == "_":
        return None
    found = _numbers_at(text, start, steps)
    if found is None:
        return None
    numbers, end = found
    while end < len(text) and text[end] == "[" and (more := _numbers_at(text, end, steps)):
        numbers += [n for n in more[0] if n not in numbers]
        end = more[1]
    return numbers, end


def _citations(text: str, steps: int) -> Iterator[tuple[int, list[int], int]]:
    """Each citation of `text`: where it starts, the steps it names, where it ends."""
    start = _START.search(text)
    while start is not None:
        found = _citation(text, start.start(), steps)
        if found is None:
            start = _START.search(text, start.start() + 1)
            continue
        yield start.start(), found[0], found[1]
        start = _START.search(text, found[1])


def _tool(step: CardStep, escape: Escape) -> str:
    return piece(step.tool.replace("`", "'"), TOOL_CHARS, escape) or "step"


def cite(text: str, steps: Sequence[CardStep], markup: Markup) -> str:
    """`text` (already escaped) with each citation of steps replaced by a reference to them.

    `[3, 5]` becomes `[3 · prometheus_query, 5 · http_get]` in the platform's bold.
    """
    out: list[str] = []
    done = 0
    for start, numbers, end in _citations(text, len(steps)):
        names = ", ".join(f"{n} · {_tool(steps[n - 1], markup.escape)}" for n in numbers)
        out += [text[done:start], markup.strong(f"[{names}]")]
        done = end
    out.append(text[done:])
    return "".join(out)


def cited_steps(text: str, steps: int) -> list[int]:
    """The step numbers `text` cites, each once, in the order first cited."""
    cited: dict[int, None] = {}
    for _, numbers, _ in _citations(text, steps):
        cited.update(dict.fromkeys(numbers))
    return list(cited)


def source_line(number: int, step: CardStep, markup: Markup) -> str:
    """`[3] `prometheus_query` query=rate(…)`: a cited step, for the answer's Sources."""
    args = piece(step.args, SOURCE_ARGS_CHARS, markup.escape)
    line = f"{markup.strong(f'[{number}]')} `{_tool(step, markup.escape)}`"
    return f"{line} {args}" if args else line


def share(sizes: Sequence[int], budget: int) -> list[int]:
    """Split `budget` over parts of `sizes`: small parts whole, the rest an equal share each.

    Water-filling: the smallest part gets what it needs up to an equal share of what is left,
    and what it leaves goes to the larger ones, so a long Findings cannot crowd out Next steps.
    """
    given = [0] * len(sizes)
    left = budget
    order = sorted(range(len(sizes)), key=lambda index: sizes[index])
    for rank, index in enumerate(order):
        given[index] = min(sizes[index], max(0, left) // (len(sizes) - rank))
        left -= given[index]
    return given


def _within(size: Callable[[str], int], room: int) -> Callable[[str], bool]:
    return lambda text: size(text) <= room


@dataclass(frozen=True, slots=True)
class Shown:
    """An answer as a card shows it: its sections rendered, its sources, whether it was cut."""

    parts: tuple[tuple[str, str], ...]
    """`(heading, rendered text)` of each section, in order ("" heading: none)."""
    sources: tuple[str, ...]
    """One line per step cited where the parts could be shown (`source_line`), at most
    `SOURCES_SHOWN`."""
    shortened: bool
    """Some section was cut to fit."""
    chars: int
    """Characters of the whole answer, for the note saying it was shortened."""


def show_answer(
    answer: str,
    steps: Sequence[CardStep],
    markup: Markup,
    *,
    budget: int,
    each: int,
    size: Callable[[str], int] = len,
    heading_room: int = 0,
) -> Shown:
    """The answer rendered for one platform, within its limits.

    Args:
        answer: The model's answer (raw).
        steps: The card's steps, which citations refer to.
        markup: The platform's escaping and bold.
        budget: The `size` all sections may take together.
        each: Characters one section's text may have.
        size: How the platform measures text (characters, or JSON bytes for Feishu).
        heading_room: What a section's heading line takes, in characters and in `size`:
            a section with a heading gets that much less (one without keeps all of it).
    """
    text = clean(answer).strip()
    parts = sections(text) if text else []

    def render(raw: str) -> str:
        return cite(markup.escape(raw), steps, markup)

    # Escaping never shortens, so no more than `each` characters of a part can be shown.
    whole = [render(part.body[: each + 1]) for part in parts]
    headed = any(part.heading for part in parts)
    rooms = share([size(full) for full in whole], budget - heading_room * headed)
    shown: list[tuple[str, str]] = []
    shortened = False
    for part, full, room in zip(parts, whole, rooms, strict=True):
        body, chars = full, each - heading_room * bool(part.heading)
        if len(part.body) > each or size(full) > room or len(full) > chars:
            body = truncate(part.body, chars, escape=render, fits=_within(size, room))
            shortened = True
        if body or part.heading:
            shown.append((part.heading, body))
    shown_text = "\n".join(part.body[: each + 1] for part in parts)
    cited = cited_steps(shown_text, len(steps))[:SOURCES_SHOWN]
    sources = tuple(source_line(n, steps[n - 1], markup) for n in cited)
    return Shown(tuple(shown), sources, shortened, len(text))
