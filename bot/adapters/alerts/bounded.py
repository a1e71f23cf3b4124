"""The bounds every alert receiver keeps: counts of alerts and labels, lengths of texts."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MAX_ALERTS", "MAX_LABELS", "cut", "pairs"]

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
    """A mapping as sorted, bounded (key, value) pairs."""
    keys = sorted(mapping)[:MAX_LABELS]
    return tuple((cut(k, MAX_KEY), cut(str(mapping[k]))) for k in keys)
