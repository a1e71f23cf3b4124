"""The `chatops` command line."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from bot.settings import Settings
    from bot.state.audit import AuditEvent

__all__ = ["app", "main"]

log = logging.getLogger("bot.cli.main")

app = typer.Typer(
    name="chatops",
    help="Self-hostable AI SRE bot for Slack and Feishu incident channels.",
    no_args_is_help=True,
    add_completion=False,
)


def _observed(process: str, *, traced: bool = True) -> Settings:
    """The settings, with this process's logs (and traces, if configured) set up from them.

    The scheduler is not `traced`: the spans are the ingress's events and the workers' turns.

    Raises:
        BotConfigError: Tracing is configured but cannot work.
    """
    from bot.logs import configure_logging
    from bot.settings import Settings
    from bot.tracing import configure_tracing

    settings = Settings()
    configure_logging(settings.log_format, settings.log_level)
    if traced:
        configure_tracing(settings.otel_endpoint, process=process)
    return settings


@app.command()
def version() -> None:
    """Print the installed chatops version."""
    from importlib.metadata import version as installed

    typer.echo(installed("chatops"))


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8080, help="Port to listen on."),
    feishu_long_connection: bool = typer.Option(
        False, help="Also receive Feishu events over lark's long connection (no public URL)."
    ),
) -> None:
    """Run the HTTP ingress (Slack and Feishu webhooks, health, metrics)."""
    import uvicorn

    from bot.errors import BotConfigError
    from bot.ingress.app import create_app
    from bot.tracing import shutdown_tracing

    try:
        settings = _observed("serve")
        application = create_app(settings, feishu_long_connection=feishu_long_connection)
        # log_config=None: uvicorn's loggers write through the handler `_observed` installed.
        uvicorn.run(
            application,
            host=host,
            port=port,
            log_config=None,
            log_level=settings.log_level.lower(),
            timeout_graceful_shutdown=10,
        )
    except BotConfigError as exc:
        log.error("chatops serve: %s", exc)
        raise typer.Exit(2) from exc
    finally:
        shutdown_tracing()


@app.command()
def worker(
    concurrency: int = typer.Option(8, min=1, help="Analyses this worker runs at once."),
    grace: float = typer.Option(
        25.0,
        min=0.0,
        help="On SIGTERM, seconds to wait for live turns to reach a safe point and be handed "
        "over; whatever is still running then is left to another worker to take over.",
    ),
    metrics_port: int | None = typer.Option(
        None,
        min=0,
        max=65535,
        help="Serve Prometheus metrics at GET /metrics on this port (0: off); default "
        "CHATOPS_WORKER_METRICS_PORT.",
    ),
    metrics_host: str = typer.Option(
        "0.0.0.0",
        help="Address of the metrics endpoint (all interfaces: a pod is scraped from outside).",
    ),
) -> None:
    """Run one worker: take turns from the queue, run them, keep their cards true.

    SIGTERM (or Ctrl-C) drains: no new turns are read, and each live turn suspends at its next
    safe point and continues on another worker.
    """
    import asyncio
    import os
    import signal
    import sys

    from bot.errors import BotConfigError
    from bot.tracing import shutdown_tracing
    from bot.worker.assembly import open_worker
    from bot.worker.process import WorkerOptions

    def give_up() -> None:
        # Past the grace period: leave like a crash (no half-written state: the stream entries
        # stay pending and another worker takes them over once the leases expire).
        log.warning("chatops worker: grace period over; leaving the rest to other workers")
        os._exit(3)

    async def main() -> None:
        options = WorkerOptions(concurrency=concurrency)
        async with open_worker(
            _observed("worker"),
            options=options,
            metrics_host=metrics_host,
            metrics_port=metrics_port,
        ) as running:
            loop = asyncio.get_running_loop()

            def drain() -> None:
                if not running.stopping:
                    loop.call_later(grace, give_up)
                running.stop()

            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, drain)
            log.info("chatops worker %s: reading turns", running.name)
            await running.run()
            # Drained: from here on a further SIGTERM or SIGINT stays pending, never delivered
            # (closing the loop would restore their default action, death by the signal).
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
            log.info("chatops worker %s: drained", running.name)

    try:
        asyncio.run(main())
    except BotConfigError as exc:
        log.error("chatops worker: %s", exc)
        raise typer.Exit(2) from exc
    finally:
        shutdown_tracing()  # the last turns' spans: `os._exit` below runs no atexit hook
    # Drained, and every client is closed. Freeing the interpreter's modules one by one would
    # take longer than the drain itself (lark-oapi's alone take about 0.7 s here; see
    # bench/drain.py), so the process leaves now: an idle worker is gone within 100 ms.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@app.command()
def scheduler(
    interval: float = typer.Option(10.0, min=0.1, help="Seconds between two reaper sweeps."),
    metrics_port: int | None = typer.Option(
        None,
        min=0,
        max=65535,
        help="Serve Prometheus metrics (reaper sweeps, leadership) at GET /metrics on this "
        "port (0: off); default CHATOPS_SCHEDULER_METRICS_PORT.",
    ),
    metrics_host: str = typer.Option(
        "0.0.0.0",
        help="Address of the metrics endpoint (all interfaces: a pod is scraped from outside).",
    ),
) -> None:
    """Run the periodic jobs: the card reaper (one replica leads) and scheduled jobs.

    Scheduled jobs come from CHATOPS_SCHEDULED_JOBS, a JSON list such as
    [{"id": "daily-briefing", "cron": "30 9 * * mon-fri",
    "timezone": "Europe/Berlin", "platform": "slack", "channel": "C0123",
    "prompt": "Summarize the overnight alerts"}]

    Each run posts a short message in the channel and runs as an ordinary
    analysis in its thread: a live card with a Stop button, booked like any
    other. Every replica fires every job, and each run is claimed once (by
    job and fire time), so it starts exactly once.
    """
    import asyncio
    import signal

    from bot.errors import BotConfigError
    from bot.ops.scheduler import open_scheduler

    async def main() -> None:
        async with open_scheduler(
            _observed("scheduler", traced=False),
            interval_s=interval,
            metrics_host=metrics_host,
            metrics_port=metrics_port,
        ) as running:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(signum, stop.set)
            log.info("chatops scheduler: reaper every %g s", interval)
            for job in running.scheduled.jobs if running.scheduled else ():
                log.info("chatops scheduler: job %s: %s (%s)", job.id, job.cron, job.timezone)
            await running.run(stop)

    try:
        asyncio.run(main())
    except BotConfigError as exc:
        log.error("chatops scheduler: %s", exc)
        raise typer.Exit(2) from exc


@app.command()
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
    import getpass
    from datetime import UTC, datetime

    from bot.control.killswitch import KillSwitch
    from bot.settings import Settings

    if action not in ("on", "off", "status"):
        typer.echo(
            f"chatops killswitch: unknown action {action!r}: use on, off or status", err=True
        )
        raise typer.Exit(2)
    redis_url = Settings().redis_url
    if not redis_url:
        typer.echo("chatops killswitch: REDIS_URL is not set", err=True)
        raise typer.Exit(2)

    async def main() -> str:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(redis_url)
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

    typer.echo(asyncio.run(main()))


@app.command()
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
    entry of the settles book, in the card record's Redis key chatops:{SESSION}:card, and in
    the reaper's log lines. Needs REDIS_URL. Exit status 1 when Redis knows no such session.
    """
    import asyncio
    import json

    from rich.console import Console

    from agent_core import StoreError
    from bot.ops.status import SessionStatus, read_status, render_tree, status_json
    from bot.settings import Settings

    redis_url = Settings().redis_url
    if not redis_url:
        typer.echo("chatops status: REDIS_URL is not set", err=True)
        raise typer.Exit(2)

    async def main() -> SessionStatus | None:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(redis_url)
        try:
            return await read_status(client, session)
        finally:
            await client.aclose()

    try:
        tree = asyncio.run(main())
    except StoreError as exc:
        typer.echo(f"chatops status: {exc}", err=True)
        raise typer.Exit(2) from exc
    if tree is None:
        typer.echo(f"chatops status: no session {session!r} in Redis", err=True)
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps(status_json(tree), indent=2, ensure_ascii=False))
        return
    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = 10_000  # piped or redirected: whole lines, for grep
    out.print(render_tree(tree))


@app.command()
def console(
    ingress_url: str | None = typer.Option(
        None,
        "--ingress-url",
        help="Join a running `chatops serve` (with CHATOPS_CONSOLE_TOKEN and REDIS_URL set) "
        "instead of starting the local stack.",
    ),
) -> None:
    """Talk to the bot from this terminal: a local channel through the real ingress and workers.

    Type to mention the bot; type while it runs to redirect it; /stop presses Stop; /new starts
    a new thread; /quit leaves. Without --ingress-url the local stack of `chatops demo` is
    started first (embedded Redis, the demo service, the rehearsal model unless a real one is
    configured).
    """
    import asyncio
    import os

    from bot.cli.console import run_console

    raise typer.Exit(
        asyncio.run(
            run_console(
                ingress_url=ingress_url,
                token=os.environ.get("CHATOPS_CONSOLE_TOKEN"),
                redis_url=os.environ.get("REDIS_URL"),
            )
        )
    )


@app.command()
def demo(
    fast: bool = typer.Option(False, help="Quicker probes (the demo service answers sooner)."),
) -> None:
    """Play an incident locally: a mention, a redirect mid-analysis, an answer, a Stop.

    Needs nothing but this install: Redis is embedded when REDIS_URL is unset, and the model
    is a labelled rehearsal unless OPENAI_API_KEY or OPENAI_BASE_URL is set. Exit status 0
    when the story happened as told.
    """
    import asyncio

    from bot.demo.run import run_demo

    raise typer.Exit(asyncio.run(run_demo(fast=fast)))


def _audit_of(command: str, session: str, turn: str | None) -> list[AuditEvent]:
    """The audit events of `session` (of one analysis with `turn`), read from REDIS_URL.

    Exits with status 2 when Redis is not set or cannot be read, 1 when nothing is recorded.
    """
    import asyncio

    from agent_core import StoreError
    from bot.settings import Settings
    from bot.state.audit import read_audit

    redis_url = Settings().redis_url
    if not redis_url:
        typer.echo(f"chatops {command}: REDIS_URL is not set", err=True)
        raise typer.Exit(2)

    async def main() -> list[AuditEvent]:
        import redis.asyncio as aioredis

        from bot.state.runs import RunIndex

        client = aioredis.Redis.from_url(redis_url)
        try:
            events = await read_audit(client, session, turn)
            if not events and turn is None:  # a turn id instead: the analysis it started
                found = await RunIndex(client).session_of(session)
                if found is not None:
                    events = await read_audit(client, found, session)
            return events
        finally:
            await client.aclose()

    try:
        events = asyncio.run(main())
    except StoreError as exc:
        typer.echo(f"chatops {command}: {exc}", err=True)
        raise typer.Exit(2) from exc
    if not events:
        of = f" turn {turn!r} of" if turn else ""
        typer.echo(f"chatops {command}: nothing recorded for{of} session {session!r}", err=True)
        raise typer.Exit(1)
    return events


_SESSION_HELP = (
    "The session id, such as slack-3f9c0a1b2c3d4e5f6a7b (see `chatops status`), or the turn "
    "id an analysis started with (its card's Replay link ends with it)."
)
_TURN_HELP = "Only this analysis: the turn and its follow-ups (TURN.1, TURN.1.2, …)."


@app.command()
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
    _console().print(table)


@app.command()
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

    _console().print(render_timeline(events, title=f"{session} {turn or ''}".strip()))


def _console() -> Console:
    from rich.console import Console

    out = Console(highlight=False)
    if not out.is_terminal:
        out.width = 10_000  # piped or redirected: whole lines, for grep
    return out


def main() -> None:
    """Entry point of the `chatops` console script."""
    app()
