"""The bounds every alert receiver keeps: counts of alerts and labels, lengths of texts.

Also how a payload's invalid fields are named in a 400's detail: their paths, bounded (a path
may hold a label's key, which the sender wrote), never their values.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from pydantic import ValidationError

__all__ = ["MAX_ALERTS", "MAX_LABELS", "cut", "invalid_fields", "pairs"]

MAX_ALERTS = 200
"""Alerts of one notification kept (the rest dropped, as Alertmanager's `max_alerts` would)."""
MAX_LABELS = 64
"""Labels (or annotations, values) of one alert kept, in key order."""
MAX_KEY = 256
MAX_VALUE = 4096


def cut(text: str, limit: int = MAX_VALUE) -> str:
    """`text` to at most `limit` characters (a str never splits a character)."""
    return text if len(text) <= limit else text[:limit]


def pairs(mapping: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A mapping as sorted, bounded (key, value) pairs: the first `MAX_LABELS` keys in order.

    `heapq.nsmallest` keeps the work linear in the number of keys (no sort of them all).
    """
    keys = heapq.nsmallest(MAX_LABELS, mapping)
    return tuple((cut(k, MAX_KEY), cut(str(mapping[k]))) for k in keys)


def invalid_fields(exc: ValidationError, *, limit: int = 5) -> str:
    """The paths of the first `limit` invalid fields, each bounded ("body" for the whole)."""
    paths = (".".join(str(part) for part in error["loc"]) for error in exc.errors()[:limit])
    return ", ".join(cut(path, 200) or "body" for path in paths)
