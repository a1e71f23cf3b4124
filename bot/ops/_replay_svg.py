"""The replay picture as inline SVG: lanes over time, the balance step line, the cut markers.

Pure geometry and markup for `bot.ops.replay_html` (which documents the page's contract). Every
text that reaches the markup goes through `html.escape`, attribute values included.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from types import MappingProxyType
from typing import Any

BALANCE_COLOUR = "#00a000"
"""The balance curve's stroke: pure enough to count in a screenshot, used by nothing else."""
CUT_COLOURS: Mapping[str, str] = MappingProxyType({"stop": "#ff0000", "steer": "#0000ff"})
"""Cut markers by the signal taken there; other signals (`drain`, …) and none get `CUT_OTHER`."""
CUT_OTHER = "#ff8c00"
LANES = ("model", "tools", "people", "system")
_LANE_OF = MappingProxyType(
    {
        "model_request": "model",
        "model_response": "model",
        "tool_call": "tools",
        "tool_result": "tools",
        "steer": "people",
        "stop": "people",
        "approval": "people",
        "killswitch": "people",
    }
)
# People's marks are darker than the cut markers of the same signal, so a screenshot's pure
# red and blue pixels are the markers' alone.
_PEOPLE = MappingProxyType(
    {"steer": "#3050c0", "stop": "#b03030", "approval": "#8a5cc0", "killswitch": "#444444"}
)
_TOOL_STATUS = MappingProxyType({"ok": "#3a8f5a", "interrupted": "#9a9a9a"})
_TOOL_OTHER = "#e0a030"
"""A tool result of any other status (error, denied, timeout, …)."""

WIDTH, LEFT, RIGHT, TOP = 1160, 80, 30, 34
LANE_H, TOOL_ROWS = 52, 4
BALANCE_H, GAP, AXIS_H = 140, 18, 28
BALANCE_TOP = TOP + LANE_H * len(LANES) + GAP
HEIGHT = BALANCE_TOP + BALANCE_H + AXIS_H


@dataclass(frozen=True, slots=True, kw_only=True)
class Mark:
    """One audit event as the picture needs it."""

    ts: float
    kind: str
    who: str
    data: Mapping[str, Any]
    summary: str
    """Plain text for the tooltip (escaped here)."""


def lane_of(kind: str) -> str:
    """The lane an event kind is drawn in; anything not model, tools or people is system."""
    return _LANE_OF.get(kind, "system")


def number(value: object) -> float:
    """A number from an event field, 0.0 when the field is missing or not a number."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0.0


@dataclass(frozen=True, slots=True)
class _Scale:
    t0: float
    span: float

    def x(self, ts: float) -> float:
        return round(LEFT + (ts - self.t0) / self.span * (WIDTH - LEFT - RIGHT), 1)


def render_svg(marks: Sequence[Mark]) -> str:
    """The picture of `marks` (sorted by time, at least one) as an `<svg id="timeline">`."""
    scale = _Scale(marks[0].ts, max(marks[-1].ts - marks[0].ts, 1.0))
    parts = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img">',
        *_lanes(marks, scale),
        *_balance(marks, scale),
        *_axis(scale),
        *_cuts(marks, scale),
        "</svg>",
    ]
    return "\n".join(parts)


def _title(mark: Mark) -> str:
    return f"<title>{escape(mark.summary)}</title>"


def _attrs(mark: Mark, extra: str = "") -> str:
    classes = f"mark {extra}".strip()
    return f'class="{classes}" data-kind="{escape(mark.kind)}"'


def _lanes(marks: Sequence[Mark], scale: _Scale) -> Iterator[str]:
    drawers = {"model": _model, "tools": _tools, "people": _people, "system": _system}
    for index, lane in enumerate(LANES):
        top = TOP + index * LANE_H
        shade = "#f6f7f9" if index % 2 == 0 else "#eceef2"
        yield f'<g class="lane" data-lane="{lane}">'
        yield f'<rect x="0" y="{top}" width="{WIDTH}" height="{LANE_H}" fill="{shade}"/>'
        yield f'<text class="lane-name" x="8" y="{top + LANE_H // 2 + 4}">{lane}</text>'
        yield from drawers[lane]([m for m in marks if lane_of(m.kind) == lane], scale, top)
        yield "</g>"


def _model(marks: Sequence[Mark], scale: _Scale, top: int) -> Iterator[str]:
    """A request is a bar up to the next response; a response a dot."""
    end = scale.t0 + scale.span
    for i, mark in enumerate(marks):
        x = scale.x(mark.ts)
        if mark.kind == "model_request":
            answer = next((m for m in marks[i + 1 :] if m.kind == "model_response"), None)
            x2 = scale.x(answer.ts if answer else end)
            open_ = "" if answer else " open"
            yield (
                f'<rect {_attrs(mark, "span" + open_)} x="{x}" y="{top + 16}" '
                f'width="{max(x2 - x, 2)}" height="20" fill="#c9d6ea">{_title(mark)}</rect>'
            )
        else:
            yield f'<circle {_attrs(mark)} cx="{x}" cy="{top + 26}" r="5" fill="#2f4b7c">'
            yield f"{_title(mark)}</circle>"


def _tools(marks: Sequence[Mark], scale: _Scale, top: int) -> Iterator[str]:
    """Each call a bar from the call to its result (by call id), in the first free row."""
    results = {str(m.data.get("id")): m for m in marks if m.kind == "tool_result"}
    row_ends = [float("-inf")] * TOOL_ROWS
    row_h = (LANE_H - 8) // TOOL_ROWS
    for mark in (m for m in marks if m.kind == "tool_call"):
        result = results.get(str(mark.data.get("id")))
        finish = result.ts if result else scale.t0 + scale.span
        row = next((r for r, e in enumerate(row_ends) if e <= mark.ts), TOOL_ROWS - 1)
        row_ends[row] = finish
        status = str(result.data.get("status", "")) if result else ""
        fill = _TOOL_STATUS.get(status, _TOOL_OTHER) if result else "#cccccc"
        x, x2 = scale.x(mark.ts), scale.x(finish)
        shown = result or mark
        yield (
            f"<rect {_attrs(mark, 'span' if result else 'span open')} "
            f'data-status="{escape(status)}" x="{x}" y="{top + 4 + row * row_h}" '
            f'width="{max(x2 - x, 3)}" height="{row_h - 2}" fill="{fill}">{_title(shown)}</rect>'
        )


def _people(marks: Sequence[Mark], scale: _Scale, top: int) -> Iterator[str]:
    """Each intervention where it arrived, with who made it."""
    for mark in marks:
        x, y = scale.x(mark.ts), top + 20
        fill = _PEOPLE.get(mark.kind, "#444444")
        points = f"{x - 7},{y + 7} {x + 7},{y + 7} {x},{y - 7}"  # steer: a triangle
        if mark.kind != "steer":
            points = f"{x - 6},{y - 6} {x + 6},{y - 6} {x + 6},{y + 6} {x - 6},{y + 6}"
        yield f'<polygon {_attrs(mark)} points="{points}" fill="{fill}">{_title(mark)}</polygon>'
        label = mark.kind if not mark.who else f"{mark.kind} · {mark.who}"
        yield f'<text x="{x + 9}" y="{y + 22}">{escape(label[:40])}</text>'


def _system(marks: Sequence[Mark], scale: _Scale, top: int) -> Iterator[str]:
    """Turn starts, card changes, the settle; balance and cuts have their own drawing."""
    for mark in marks:
        if mark.kind in ("balance", "cut"):
            continue
        x, y = scale.x(mark.ts), top + 22
        size = 6 if mark.kind in ("turn_start", "settle") else 4
        points = f"{x},{y - size} {x + size},{y} {x},{y + size} {x - size},{y}"
        yield f'<polygon {_attrs(mark)} points="{points}" fill="#555555">{_title(mark)}</polygon>'
        if mark.kind == "settle":
            reason = str(mark.data.get("reason", ""))
            yield f'<text x="{x - 4}" y="{y + 20}" text-anchor="end">{escape(reason[:40])}</text>'


def _balance(marks: Sequence[Mark], scale: _Scale) -> Iterator[str]:
    """Open tool calls over time: a step line, one point per `balance` event."""
    samples = [(m.ts, number(m.data.get("balance"))) for m in marks if m.kind == "balance"]
    peak = max([1.0, *(value for _, value in samples)])
    bottom = BALANCE_TOP + BALANCE_H - 10

    def y(value: float) -> float:
        return round(bottom - value / peak * (BALANCE_H - 30), 1)

    yield f'<g id="balance" data-peak="{peak:g}">'
    yield (
        f'<rect x="{LEFT}" y="{BALANCE_TOP}" width="{WIDTH - LEFT - RIGHT}" '
        f'height="{BALANCE_H}" fill="#fbfbfb" stroke="#dddddd"/>'
    )
    yield f'<text class="lane-name" x="8" y="{BALANCE_TOP + 16}">balance</text>'
    for value in {0.0, peak}:
        yield f'<text x="{LEFT - 6}" y="{y(value) + 4}" text-anchor="end">{value:g}</text>'
    points: list[tuple[float, float]] = []
    for i, (ts, value) in enumerate(samples):
        if i:
            points.append((scale.x(ts), y(samples[i - 1][1])))
        points.append((scale.x(ts), y(value)))
    if samples:
        points.append((scale.x(scale.t0 + scale.span), y(samples[-1][1])))
    joined = " ".join(f"{px},{py}" for px, py in points)
    yield (
        f'<polyline id="balance-curve" data-samples="{len(samples)}" points="{joined}" '
        f'fill="none" stroke="{BALANCE_COLOUR}" stroke-width="3" shape-rendering="crispEdges"/>'
    )
    for ts, value in samples:
        yield (
            f'<circle class="balance-point" cx="{scale.x(ts)}" cy="{y(value)}" r="3" '
            f'fill="{BALANCE_COLOUR}"><title>balance {value:g}</title></circle>'
        )
    yield "</g>"


def _axis(scale: _Scale) -> Iterator[str]:
    """Seconds since the first event, at a 1-2-5 step giving about ten ticks."""
    step = next(s for s in _steps() if scale.span / s <= 10)
    base = BALANCE_TOP + BALANCE_H
    yield '<g id="axis">'
    tick = 0.0
    while tick <= scale.span + 1e-9:
        x = scale.x(scale.t0 + tick)
        yield f'<line x1="{x}" y1="{base}" x2="{x}" y2="{base + 5}" stroke="#888888"/>'
        yield f'<text x="{x}" y="{base + 18}" text-anchor="middle">{tick:g}s</text>'
        tick += step
    yield "</g>"


def _steps() -> Iterator[float]:
    magnitude = 0.1
    while True:
        for factor in (1, 2, 5):
            yield factor * magnitude
        magnitude *= 10


def _cuts(marks: Sequence[Mark], scale: _Scale) -> Iterator[str]:
    """A vertical line through lanes and curve at every cut, labelled with its signal."""
    bottom = BALANCE_TOP + BALANCE_H
    for index, mark in enumerate(m for m in marks if m.kind == "cut"):
        signal = str(mark.data.get("signal") or "")
        colour = CUT_COLOURS.get(signal, CUT_OTHER)
        label = signal or str(mark.data.get("site") or "cut")
        x = scale.x(mark.ts)
        label_y = 12 + (index % 2) * 12  # alternate rows, so close cuts keep readable labels
        yield (
            f'<g class="cut-marker" data-signal="{escape(signal)}" '
            f'data-site="{escape(str(mark.data.get("site", "")))}">{_title(mark)}'
        )
        yield (
            f'<line x1="{x}" y1="{TOP - 4}" x2="{x}" y2="{bottom}" stroke="{colour}" '
            f'stroke-width="3" shape-rendering="crispEdges"/>'
        )
        yield (
            f'<text class="cut-label" x="{x + 4}" y="{label_y}" style="fill:{colour}">'
            f"{escape(label[:30])}</text>"
        )
        yield "</g>"
