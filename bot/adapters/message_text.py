"""What a chat message shows, as bounded plain lines: the piece both thread readers share.

Contract: everything here is pure and bounded whatever the input. `Lines` keeps at most
`MESSAGE_CHARS` characters of a message and takes at most `MAX_PIECES` pieces: once either is
reached every further piece is dropped at once (a 5 MB attachment costs one slice, not a scan).
`walk` visits a JSON structure in document order with an explicit stack (no recursion), at most
`MAX_DEPTH` deep and at most `MAX_PIECES` values in all, so deep or wide blocks cost a bounded
number of steps. `runbook_urls` scans only the kept lines, with one linear pattern.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["MAX_DEPTH", "MAX_PIECES", "MESSAGE_CHARS", "Lines", "runbook_urls", "walk"]

MESSAGE_CHARS = 2000
"""Characters of one message kept (about 500 tokens): an alert's summary, not its whole dump."""
MAX_PIECES = 1000
"""Values looked at in one message (text pieces, block and card elements)."""
MAX_DEPTH = 12
"""How deep into nested blocks or card elements a walk goes."""
MAX_RUNBOOKS = 5
"""Runbook URLs taken from one message."""
URL_CHARS = 500
"""A longer URL is not taken (cut, it would lead nowhere)."""

_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+")
"""An http(s) URL of RFC 3986 characters only; it stops at Slack's `|` and `>` in `<url|label>`."""
_RUNBOOK = re.compile("runbook", re.IGNORECASE)


class Lines:
    """The lines of one message, bounded in characters and in pieces."""

    def __init__(self, limit: int = MESSAGE_CHARS, pieces: int = MAX_PIECES) -> None:
        self._lines: list[str] = []
        self._line: list[str] = []
        self._left = limit
        self._pieces = pieces
        self.cut = False
        """Something was dropped because a bound was reached."""
        self.taken = 0
        """Pieces kept so far."""

    @property
    def full(self) -> bool:
        """No further piece is taken."""
        return self._left <= 0 or self._pieces <= 0

    @property
    def room(self) -> int:
        """Pieces the lines can still take."""
        return max(0, self._pieces)

    def add(self, value: object, *, end: bool = True) -> None:
        """Append `value` (when it is a non-blank string) to the current line.

        Args:
            value: The piece; anything but a string is ignored.
            end: Close the line after it (False: the next piece continues the line).
        """
        self._pieces -= 1
        if isinstance(value, str) and value:
            self._take(value)
        if end:
            self.end()

    def _take(self, value: str) -> None:
        """Keep what fits of `value` (one slice, whatever its length)."""
        if self._left <= 0 or self._pieces < 0:
            self.cut = True
            return
        piece = value[: self._left]
        self.cut = self.cut or len(piece) < len(value)
        if piece.isspace():
            return
        self._left -= len(piece)
        self.taken += 1
        first, *rest = piece.split("\n")
        self._line.append(first)
        for line in rest:
            self.end()
            self._line.append(line)

    def end(self) -> None:
        """Close the current line (nothing when it is empty)."""
        line = " ".join(" ".join(self._line).split())
        self._line.clear()
        if line:
            self._lines.append(line)

    def text(self) -> str:
        """The lines joined, with `…` when something was cut."""
        self.end()
        text = "\n".join(self._lines)
        return f"{text} …" if self.cut and text else text


Visit = Callable[[str, Any], bool]
"""Called with each (key, value) a walk reaches; True: also walk into the value."""


def walk(node: Any, visit: Visit, *, budget: int = MAX_PIECES, depth: int = MAX_DEPTH) -> None:
    """Visit the values under `node` (dicts and lists) in document order, bounded.

    A list's items are visited under the list's own key. At most `budget` values are visited,
    and containers deeper than `depth` are not entered.
    """
    stack: list[Iterator[tuple[str, Any]]] = [_children("", node)]
    while stack and budget > 0:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        budget -= 1
        key, value = item
        if visit(key, value) and isinstance(value, dict | list) and len(stack) < depth:
            stack.append(_children(key, value))


def _children(key: str, node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        return ((str(k), v) for k, v in node.items())
    if isinstance(node, list):
        return ((key, v) for v in node)
    return iter(())


def runbook_urls(text: str) -> tuple[str, ...]:
    """The http(s) URLs on the lines of `text` that name a runbook, in order, without repeats."""
    found: dict[str, None] = {}
    for line in text.splitlines():
        if not _RUNBOOK.search(line):
            continue
        for match in _URL.finditer(line):
            url = match.group().rstrip(".,;:!?)")
            if len(url) <= URL_CHARS:
                found.setdefault(url)
            if len(found) >= MAX_RUNBOOKS:
                return tuple(found)
    return tuple(found)
