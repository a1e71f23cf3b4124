"""The `chatops` command group: every subcommand registered on one Typer app, and its entry point.

Contract: `app` is the whole command line (`bot.cli.main:app` for click's test runner, `main`
for the console script `chatops = "bot.cli:main"`). Commands are listed in `chatops --help` in
the order registered below. Each command module imports only `typer` at the top and the rest
inside its commands, so `chatops --help` and a process's start load nothing they do not use.
"""

from __future__ import annotations

import typer

from bot.cli import audit_trail, local, operator, processes

__all__ = ["app", "main"]

app = typer.Typer(
    name="chatops",
    help="Self-hostable AI SRE bot for Slack and Feishu incident channels.",
    no_args_is_help=True,
    add_completion=False,
)

for command in (
    operator.version,
    processes.serve,
    processes.worker,
    processes.scheduler,
    operator.killswitch,
    operator.status,
    local.console,
    local.demo,
    audit_trail.audit,
    audit_trail.replay,
):
    app.command()(command)


def main() -> None:
    """Entry point of the `chatops` console script."""
    app()
