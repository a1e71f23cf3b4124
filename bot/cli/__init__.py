"""The `chatops` command line."""

from bot.cli.main import main

__all__ = ["main"]
