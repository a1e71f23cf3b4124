"""`chatops replay`: an analysis's audit as a timeline in the terminal.

Pure: audit events in, one rich `Table` out. Each row is one event: its time since the first
event, its lane (model, tools, people, system), what happened, and the balance (open tool
calls) after it. Cut probes are marked `✂` with the signal they took (`steer`, `stop`, …) or
`-` when they found none; a cut that took a signal is shown in bold red.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from rich.table import Table
from rich.text import Text

__all__ = ["LANES", "describe", "lane_of", "render_timeline"]

LANES: Mapping[str, tuple[str, ...]] = {
    "model": ("model_request", "model_response"),
    "tools": ("tool_call", "tool_result", "balance"),
    "people": ("steer", "stop", "approval", "killswitch"),
    "system": ("turn_start", "cut", "card", "settle"),
}
"""The kinds of each lane; an unknown kind is drawn in the system lane."""

_LANE_OF = {kind: lane for lane, kinds in LANES.items() for kind in kinds}
_STYLE = {"model": "cyan", "tools": "yellow", "people": "magenta", "system": "dim"}
SUMMARY_CHARS = 100
"""Characters of a text shown in one row (the audit holds up to 2,000)."""


class _Event(Protocol):
    @property
    def ts(self) -> float: ...
    @property
    def turn(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def who(self) -> str: ...
    @property
    def data(self) -> Mapping[str, Any]: ...


def lane_of(kind: str) -> str:
    """The lane an event of `kind` is drawn in."""
    return _LANE_OF.get(kind, "system")


def _short(text: object) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= SUMMARY_CHARS else line[: SUMMARY_CHARS - 1] + "…"


def _tokens(data: Mapping[str, Any]) -> str:
    estimated = ", estimated" if data.get("usage_estimated") is True else ""
    return f"[{data.get('prompt_tokens', 0)}+{data.get('completion_tokens', 0)} tok{estimated}]"


def _response(data: Mapping[str, Any]) -> str:
    calls = ", ".join(str(c.get("name")) for c in data.get("calls", []))
    said = _short(data.get("text", "")) or "(no text)"
    return f"response: {said}" + (f" → calls {calls}" if calls else "") + f" {_tokens(data)}"


def _result(data: Mapping[str, Any]) -> str:
    took = data.get("duration_s")
    timing = f" in {took}s" if took is not None else ""
    return f"{data.get('name')} {data.get('status')}{timing}: {_short(data.get('content', ''))}"


_Describe = Callable[[Mapping[str, Any]], str]
_DESCRIBE: Mapping[str, _Describe] = {
    "turn_start": lambda d: f"turn starts ({d.get('inputs', 0)} new message(s))",
    "model_request": lambda d: f"request #{d.get('n')} ({d.get('messages')} messages)",
    "model_response": _response,
    "tool_call": lambda d: f"{d.get('name')}({_short(d.get('arguments', ''))}) [{d.get('id')}]",
    "tool_result": _result,
    "balance": lambda d: f"balance {d.get('balance')}",
    "cut": lambda d: f"✂ cut at {d.get('site')}: {d.get('signal') or '-'}",
    "steer": lambda d: f"steer: {_short(d.get('text', ''))}",
    "stop": lambda d: "stop",
    "approval": lambda d: f"{d.get('verdict')} {d.get('tool')} [{d.get('call_id')}]",
    "killswitch": lambda d: f"kill switch {'on' if d.get('on') else 'off'}",
    "card": lambda d: f"card: {d.get('status')}",
    "settle": lambda d: f"settled {d.get('reason')} {_tokens(d)}",
}


def describe(kind: str, who: str, data: Mapping[str, Any]) -> str:
    """One line saying what an event was (and who did it, for people's actions)."""
    known = _DESCRIBE.get(kind)
    what = known(data) if known else f"{kind}: {_short(json.dumps(dict(data), default=str))}"
    return f"{what} (by {who})" if who else what


def render_timeline(events: Sequence[_Event], *, title: str = "") -> Table:
    """The timeline of `events` (in audit order) as a table."""
    table = Table(title=title or None, expand=False)
    for column, justify in (("+s", "right"), ("turn", "left"), ("lane", "left")):
        table.add_column(column, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    table.add_column("what", overflow="fold")
    table.add_column("balance", justify="right", no_wrap=True)
    start = events[0].ts if events else 0.0
    balance = 0
    for event in events:
        lane = lane_of(event.kind)
        if event.kind == "balance":
            balance = int(event.data.get("balance", balance))
        what = Text(describe(event.kind, event.who, event.data))
        if event.kind == "cut":
            what.stylize("bold red" if event.data.get("signal") else "red")
        table.add_row(
            f"{event.ts - start:.3f}",
            event.turn,
            Text(lane, style=_STYLE[lane]),
            what,
            str(balance),
        )
    return table
