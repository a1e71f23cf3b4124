"""The long-running processes: `chatops serve`, `chatops worker`, `chatops scheduler`.

Contract: each command sets up logs (and traces, but for the scheduler) from `Settings` before
anything else runs, exits with status 2 on a `BotConfigError`, and leaves on SIGTERM or SIGINT
as its process must: the ingress through uvicorn's graceful shutdown, the worker by draining
(each live turn suspends at its next safe point and continues elsewhere), the scheduler at the
end of its sweep. Heavy imports happen inside the commands, so `chatops --help` stays quick.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from bot.settings import Settings

__all__ = ["scheduler", "serve", "worker"]

log = logging.getLogger("bot.cli.main")  # the logger name the processes' log lines always had


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


def worker(
    concurrency: int = typer.Option(
        8,
        min=1,
        max=1000,
        help="Analyses this worker runs at once (up to 1,000: their rings share one Redis "
        "connection, their tools' HTTP connections grow with it; README §Sizing).",
    ),
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

    from bot.errors import BotConfigError
    from bot.tracing import shutdown_tracing

    try:
        asyncio.run(_run_worker(concurrency, grace, metrics_host, metrics_port))
    except BotConfigError as exc:
        log.error("chatops worker: %s", exc)
        raise typer.Exit(2) from exc
    finally:
        shutdown_tracing()  # the last turns' spans: `os._exit` below runs no atexit hook
    _leave_drained()


async def _run_worker(
    concurrency: int, grace: float, metrics_host: str, metrics_port: int | None
) -> None:
    """Run the worker until it has drained, draining on SIGTERM or SIGINT."""
    import asyncio
    import signal

    from bot.worker.assembly import open_worker
    from bot.worker.process import WorkerOptions

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
                loop.call_later(grace, _give_up)
            running.stop()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, drain)
        log.info("chatops worker %s: reading turns", running.name)
        await running.run()
        # Drained: from here on a further SIGTERM or SIGINT stays pending, never delivered
        # (closing the loop would restore their default action, death by the signal).
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        log.info("chatops worker %s: drained", running.name)


def _give_up() -> None:
    """Past the grace period: leave like a crash.

    No half-written state: the stream entries stay pending and another worker takes them over
    once the leases expire.
    """
    import os

    log.warning("chatops worker: grace period over; leaving the rest to other workers")
    os._exit(3)


def _leave_drained() -> None:
    """Leave the drained worker's process at once, with its logs and output flushed.

    Every client is closed by now. Freeing the interpreter's modules one by one would take
    longer than the drain itself (lark-oapi's alone take about 0.7 s here; see bench/drain.py),
    so the process leaves now: an idle worker is gone within 100 ms.
    """
    import os
    import sys

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


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

    from bot.errors import BotConfigError

    try:
        asyncio.run(_run_scheduler(interval, metrics_host, metrics_port))
    except BotConfigError as exc:
        log.error("chatops scheduler: %s", exc)
        raise typer.Exit(2) from exc


async def _run_scheduler(interval: float, metrics_host: str, metrics_port: int | None) -> None:
    """Run the reaper and the scheduled jobs until SIGTERM or SIGINT."""
    import asyncio
    import signal

    from bot.ops.scheduler import open_scheduler

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
