"""An operator's commands on a running deployment: `version`, `killswitch`, `status`.

Contract: each reads `REDIS_URL` and its topology (cluster, Sentinels) from `Settings` (exit
status 2 when the URL is unset or Redis cannot be read), opens one Redis client for the command
and closes it before printing. Unknown actions are refused with status 2 before Redis is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from rich.console import Console

    from bot.ops.status import SessionStatus
    from bot.redis_topology import RedisTopology

__all__ = ["RedisTarget", "killswitch", "redis_of", "status", "terminal", "version"]


def version() -> None:
    """Print the installed chatops version."""
    from importlib.metadata import version as installed

    typer.echo(installed("chatops"))


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """The Redis the settings name: `REDIS_URL`, and how it is reached (cluster, Sentinels)."""

    url: str
    topology: RedisTopology

    def client(self) -> aioredis.Redis:
        """A client of it (the caller closes it)."""
        from bot.process.redis_pool import pooled_redis

        return pooled_redis(self.url, topology=self.topology)


def redis_of(command: str) -> RedisTarget:
    """The Redis of the settings; exits with status 2, saying so, when `REDIS_URL` is not set."""
    from bot.settings import Settings

    settings = Settings()
    if not settings.redis_url:
        typer.echo(f"chatops {command}: REDIS_URL is not set", err=True)
        raise typer.Exit(2)
    return RedisTarget(settings.redis_url, settings.redis_topology)


def terminal() -> Console:
    """A console for tables and trees: whole lines when piped or redirected, for grep."""
    from rich.console import Console

    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = 10_000
    return out


def killswitch(
    action: str = typer.Argument(..., help="on, off or status."),
    by: str = typer.Option(
        "", "--by", help="Who pulls it (shown on the stopped cards); default: $USER."
    ),
) -> None:
    """Stop every live analysis at once and start nothing new, on every worker (or undo that).

    on: every live analysis stops as if its Stop button were pressed, its card saying "Stopped
    by the kill switch"; workers read no new turn until it is off (queued ones wait, none is
    lost). off: workers read again. status: whether it is on, since when, by whom. Needs
    REDIS_URL.
    """
    import asyncio

    if action not in ("on", "off", "status"):
        typer.echo(
            f"chatops killswitch: unknown action {action!r}: use on, off or status", err=True
        )
        raise typer.Exit(2)
    target = redis_of("killswitch")
    typer.echo(asyncio.run(_switch(target, action, by)))


async def _switch(target: RedisTarget, action: str, by: str) -> str:
    """Take `action` (on, off, status) on the kill switch; the line that says what happened."""
    import getpass
    from datetime import UTC, datetime

    from bot.control.killswitch import KillSwitch

    client = target.client()
    try:
        switch = KillSwitch(client)
        if action == "on":
            stopped = await switch.engage(by or getpass.getuser())
            return f"kill switch on; stopped {len(stopped)} live analyses"
        if action == "off":
            was_on = await switch.release()
            return "kill switch off" if was_on else "kill switch was already off"
        state = await switch.state()
        if not state.on:
            return "kill switch off"
        since = datetime.fromtimestamp(state.since, UTC).isoformat(timespec="seconds")
        return f"kill switch on since {since} by {state.by}"
    finally:
        await client.aclose()


def status(
    session: str = typer.Argument(
        ..., help="The analysis's session id, such as slack-3f9c0a1b2c3d4e5f6a7b."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (stable keys) instead."),
) -> None:
    """Show an analysis and its sub-agents as a tree, read from Redis.

    The session's card status and title, then one line per sub-agent (id, state, task, and the
    first line of its report or its pending question), each with its own sub-agents indented
    below it. The session id (slack-…, feishu-…, console-…) is in the `session` field of every
    entry of the settles book, in the card record's Redis key {chatops}:SESSION:card, and in
    the reaper's log lines. Needs REDIS_URL. Exit status 1 when Redis knows no such session.
    """
    import asyncio
    import json

    from agent_core import StoreError
    from bot.ops.status import render_tree, status_json

    target = redis_of("status")
    try:
        tree = asyncio.run(_read_status(target, session))
    except StoreError as exc:
        typer.echo(f"chatops status: {exc}", err=True)
        raise typer.Exit(2) from exc
    if tree is None:
        typer.echo(f"chatops status: no session {session!r} in Redis", err=True)
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps(status_json(tree), indent=2, ensure_ascii=False))
        return
    terminal().print(render_tree(tree))


async def _read_status(target: RedisTarget, session: str) -> SessionStatus | None:
    """The session's tree as Redis has it, or `None` when Redis knows no such session."""
    from bot.ops.status import read_status

    client = target.client()
    try:
        return await read_status(client, session)
    finally:
        await client.aclose()
