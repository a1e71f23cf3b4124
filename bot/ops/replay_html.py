"""`chatops replay --html`: one analysis's audit as a self-contained page with a picture.

Contract: `render_html` is pure (events in, one HTML string out) and the page is whole by
itself: inline CSS and an inline SVG, no script, no network, no external file; a
Content-Security-Policy meta tag forbids scripts and loads outright. Every text taken from
an event (model output, tool arguments and results, what people wrote) is HTML-escaped, so
the page shows it and never runs it.

The picture, left to right in time since the first event:
- four lanes: model (each request as a span to its response), tools (each call as a span to
  its result, coloured by status), people (steers, stops, approvals, kill-switch actions
  where they arrived), system (turn starts, card changes, the settle);
- below them the balance (open tool calls) as a step line, `#balance-curve`;
- across both, a vertical `.cut-marker` at every cut, labelled with the signal that was
  taken there (`steer`, `stop`, `drain`, …) or the site when none was.

Stable hooks for tests and styling: `#timeline`, `.lane[data-lane]`, `.mark[data-kind]`,
`#balance-curve[data-samples]`, `.balance-point`, `.cut-marker[data-signal]`, `#events`.
Cut markers and the curve are drawn in the exact colours below (`crispEdges`, no blending),
so a screenshot shows them as pixels of those colours.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any, Protocol

from bot.ops import _replay_svg as svg

__all__ = ["AuditEventLike", "BALANCE_COLOUR", "CUT_COLOURS", "render_html"]

BALANCE_COLOUR = svg.BALANCE_COLOUR
CUT_COLOURS = svg.CUT_COLOURS

TEXT_CHARS = 2_000
"""Characters of one event's text shown in the event table (the audit keeps it all)."""


class AuditEventLike(Protocol):
    """The fields of `bot.state.audit.AuditEvent` the page reads."""

    @property
    def ts(self) -> float: ...  # noqa: D102
    @property
    def session(self) -> str: ...  # noqa: D102
    @property
    def turn(self) -> str: ...  # noqa: D102
    @property
    def kind(self) -> str: ...  # noqa: D102
    @property
    def who(self) -> str: ...  # noqa: D102
    @property
    def data(self) -> Mapping[str, Any]: ...  # noqa: D102


def render_html(events: Sequence[AuditEventLike], *, title: str = "") -> str:
    """The replay page of `events` (in audit order), as one HTML document."""
    ordered = sorted(events, key=lambda event: event.ts)  # stable: audit order on ties
    timeline = [
        svg.Mark(
            ts=event.ts,
            kind=event.kind,
            who=event.who,
            data=event.data,
            summary=summarize(event.kind, event.data, event.who),
        )
        for event in ordered
    ]
    heading = title or _heading(ordered)
    picture = svg.render_svg(timeline) if timeline else '<p id="empty">No audit events.</p>'
    return _PAGE.format(
        title=escape(heading),
        meta=_meta(ordered),
        picture=picture,
        rows="\n".join(_row(event, ordered[0].ts) for event in ordered),
        css=_CSS,
    )


def summarize(kind: str, data: Mapping[str, Any], who: str = "") -> str:
    """One event in a line of plain text (not escaped): the tooltip and the table's text."""
    said = _SUMMARIES.get(kind, _raw)(data)
    return f"{said} (by {who})" if who else said


def _heading(events: Sequence[AuditEventLike]) -> str:
    if not events:
        return "chatops replay"
    return f"chatops replay · turn {events[0].turn}"


def _meta(events: Sequence[AuditEventLike]) -> str:
    if not events:
        return ""
    start = datetime.fromtimestamp(events[0].ts, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    span = events[-1].ts - events[0].ts
    parts = (
        f"session {events[0].session}",
        f"turn {events[0].turn}",
        f"started {start}",
        f"{span:.1f} s",
        f"{len(events)} events",
    )
    return escape(" · ".join(parts))


def _row(event: AuditEventLike, t0: float) -> str:
    text = summarize(event.kind, event.data, event.who)
    if len(text) > TEXT_CHARS:
        text = f"{text[:TEXT_CHARS]}… ({len(text):,} characters in all)"
    return (
        f'<tr class="row" data-kind="{escape(event.kind)}">'
        f"<td>+{event.ts - t0:.2f}s</td><td>{escape(svg.lane_of(event.kind))}</td>"
        f"<td>{escape(event.kind)}</td><td>{escape(text)}</td></tr>"
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _raw(data: Mapping[str, Any]) -> str:
    return _text(dict(data))


def _count(value: object) -> str:
    """A count the audit may record as a number or as the items themselves."""
    if isinstance(value, list | tuple | dict):
        return str(len(value))
    return _text(value) if value is not None else "?"


def _response(data: Mapping[str, Any]) -> str:
    listed = data.get("calls")
    calls = [
        _text(call.get("name", "?")) if isinstance(call, dict) else _text(call)
        for call in (listed if isinstance(listed, list) else ())
    ]
    tokens = f"{data.get('prompt_tokens', 0)}+{data.get('completion_tokens', 0)} tokens"
    asked = f" → calls {', '.join(calls)}" if calls else ""
    return f"{_text(data.get('text', ''))}{asked} [{tokens}]"


def _tool_result(data: Mapping[str, Any]) -> str:
    took = svg.number(data.get("duration_s"))
    head = f"{_text(data.get('name', '?'))} {_text(data.get('status', ''))} in {took:.2f}s"
    return f"{head}: {_text(data.get('content', ''))}"


def _cut(data: Mapping[str, Any]) -> str:
    signal = _text(data.get("signal") or "none")
    return f"cut at {_text(data.get('site', '?'))}, signal {signal}, balance {data.get('balance')}"


_SUMMARIES: Mapping[str, Callable[[Mapping[str, Any]], str]] = {
    "turn_start": lambda d: f"turn starts: {_text(d.get('inputs', ''))}",
    "model_request": lambda d: (
        f"request {_text(d.get('n', '?'))}: {_count(d.get('messages'))} msgs"
    ),
    "model_response": _response,
    "tool_call": lambda d: f"{_text(d.get('name', '?'))}({_text(d.get('arguments', ''))})",
    "tool_result": _tool_result,
    "balance": lambda d: f"balance {d.get('balance')}",
    "cut": _cut,
    "steer": lambda d: f"steer: {_text(d.get('text', ''))}",
    "stop": lambda d: "stop",
    "approval": lambda d: f"{_text(d.get('verdict', '?'))} {_text(d.get('tool', '?'))}",
    "killswitch": lambda d: f"kill switch {'on' if d.get('on') else 'off'}",
    "card": lambda d: f"card {_text(d.get('status', '?'))}",
    "settle": lambda d: f"settled: {_text(d.get('reason', '?'))}",
}
"""One line per kind of the audit contract; an unknown kind shows its data as JSON."""

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; background: #fff; }
h1 { font-size: 18px; margin: 0 0 4px; }
.meta { color: #666; margin: 0 0 12px; }
#timeline { width: 100%; height: auto; display: block; }
#timeline text { font: 11px system-ui, sans-serif; fill: #333; }
#timeline .lane-name { font-weight: 600; }
#timeline .cut-label { font-weight: 700; }
table { border-collapse: collapse; margin-top: 16px; width: 100%; }
td { border-top: 1px solid #eee; padding: 2px 8px; vertical-align: top; }
td:last-child { white-space: pre-wrap; word-break: break-word; font-family: monospace; }
""".strip()

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<h1>{title}</h1>
<p class="meta">{meta}</p>
{picture}
<table id="events">
{rows}
</table>
</body>
</html>
"""
