"""The commands that run the bot on this machine: `chatops console` and `chatops demo`.

Contract: neither needs a deployment. Without `--ingress-url` the console starts the local stack
of `chatops demo` (embedded Redis, the demo service, the rehearsal model unless a real one is
configured); the demo plays its story on that stack. The exit status is the run's.
"""

from __future__ import annotations

import typer

__all__ = ["console", "demo"]


def console(
    ingress_url: str | None = typer.Option(
        None,
        "--ingress-url",
        help="Join a running `chatops serve` (with CHATOPS_CONSOLE_TOKEN and REDIS_URL set) "
        "instead of starting the local stack.",
    ),
) -> None:
    """Talk to the bot from this terminal: a local channel through the real ingress and workers.

    Type to mention the bot; type while it runs to redirect it; /stop presses Stop;
    /approve CALL_ID and /deny CALL_ID decide a call waiting for approval (as the card shows
    them; the id may be left out when one call waits); /new starts a new thread; /help lists
    these; /quit leaves. Without --ingress-url the local stack of `chatops demo` is started
    first (embedded Redis, the demo service, the rehearsal model unless a real one is
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
