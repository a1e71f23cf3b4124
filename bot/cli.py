"""The `chatops` command line."""

from __future__ import annotations

import typer

__all__ = ["app", "main"]

app = typer.Typer(
    name="chatops",
    help="Self-hostable AI SRE bot for Slack and Feishu incident channels.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def version() -> None:
    """Print the installed chatops version."""
    from importlib.metadata import version as installed

    typer.echo(installed("chatops"))


@app.command()
def demo() -> None:
    """Play a scripted incident locally (not available yet in this build)."""
    typer.echo("chatops demo: not available yet; `make test` exercises the runtime end to end.")


def main() -> None:
    """Entry point of the `chatops` console script."""
    app()
