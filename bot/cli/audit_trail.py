"""The commands that read a session's audit trail: `chatops audit` and `chatops replay`.

Contract: both take a session id or the turn id an analysis started with, read the trail from
`REDIS_URL`, and exit with status 2 when Redis is not set or cannot be read, 1 when nothing is
recorded. Neither writes to Redis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from bot.cli.operator import RedisTarget, redis_of, terminal

if TYPE_CHECKING:
    from bot.state.audit import AuditEvent

__all__ = ["audit", "replay"]

_SESSION_HELP = (
    "The session id, such as slack-3f9c0a1b2c3d4e5f6a7b (see `chatops status`), or the turn "
    "id an analysis started with (its card's Replay link ends with it)."
)
_TURN_HELP = "Only this analysis: the turn and its follow-ups (TURN.1, TURN.1.2, …)."


def audit(
    session: str = typer.Argument(..., help=_SESSION_HELP),
    turn: str | None = typer.Option(None, "--turn", help=_TURN_HELP),
    fmt: str = typer.Option("jsonl", "--format", help="jsonl (one event per line) or table."),
) -> None:
    """Export a session's audit trail, in order, read from Redis.

    Model requests and responses, tool calls and results (redacted, cut to 2,000 characters),
    balance changes, cut probes, steers, stops, approvals and kill-switch actions with who did
    them, card changes and settles. Kept CHATOPS_AUDIT_RETENTION_S after the session's last
    event. Needs REDIS_URL. Exit status 1 when nothing is recorded.
    """
    import json

    if fmt not in ("jsonl", "table"):
        typer.echo(f"chatops audit: unknown format {fmt!r}: use jsonl or table", err=True)
        raise typer.Exit(2)
    events = _audit_of("audit", session, turn)
    if fmt == "jsonl":
        for event in events:
            typer.echo(event.model_dump_json())
        return
    from rich.table import Table

    table = Table("ts", "turn", "kind", "who", "data")
    for event in events:
        data = json.dumps(event.data, ensure_ascii=False)
        table.add_row(f"{event.ts:.6f}", event.turn, event.kind, event.who, data)
    terminal().print(table)


def replay(
    session: str = typer.Argument(..., help=_SESSION_HELP),
    turn: str | None = typer.Option(None, "--turn", help=_TURN_HELP),
    html: str | None = typer.Option(
        None,
        "--html",
        metavar="FILE",
        help="Write a self-contained page with the picture (lanes, the balance curve, cut "
        "markers) to this file instead.",
    ),
) -> None:
    """Replay an analysis as a timeline: model, tools, people and system lanes, cuts marked.

    One row per audit event: seconds since the first, the lane, what happened, and the balance
    of open tool calls after it; each cut probe shows the signal it took. Needs REDIS_URL.
    With --html, the same as one HTML page that needs nothing else (no script, no network).
    """
    events = _audit_of("replay", session, turn)
    if html is not None:
        from pathlib import Path

        from bot.ops.replay_html import render_html

        Path(html).write_text(render_html(events), encoding="utf-8")
        typer.echo(f"chatops replay: wrote {html}", err=True)
        return
    from bot.ops.replay_text import render_timeline

    terminal().print(render_timeline(events, title=f"{session} {turn or ''}".strip()))


def _audit_of(command: str, session: str, turn: str | None) -> list[AuditEvent]:
    """The audit events of `session` (of one analysis with `turn`), read from REDIS_URL.

    Exits with status 2 when Redis is not set or cannot be read, 1 when nothing is recorded.
    """
    import asyncio

    from agent_core import StoreError

    target = redis_of(command)
    try:
        events = asyncio.run(_read_audit(target, session, turn))
    except StoreError as exc:
        typer.echo(f"chatops {command}: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not events:
        of = f" turn {turn!r} of" if turn else ""
        typer.echo(f"chatops {command}: nothing recorded for{of} session {session!r}", err=True)
        raise typer.Exit(1)
    return events


async def _read_audit(target: RedisTarget, session: str, turn: str | None) -> list[AuditEvent]:
    """Read the events, taking `session` for a turn id when no session has it."""
    from bot.state.audit import read_audit
    from bot.state.runs import RunIndex

    client = target.client()
    try:
        events = await read_audit(client, session, turn)
        if not events and turn is None:  # a turn id instead: the analysis it started
            found = await RunIndex(client).session_of(session)
            if found is not None:
                events = await read_audit(client, found, session)
        return events
    finally:
        await client.aclose()
