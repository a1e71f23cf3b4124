"""`chatops worker --concurrency` takes up to 1,000 analyses, and says so in its help.

Why this way: the command line is the public interface, so it is run through typer's test
runner; a value past the bound must be refused with a usage error before anything connects.
"""

from __future__ import annotations

from typer.testing import CliRunner

from bot.cli.main import app
from bot.worker.tools import tool_connections


def test_concurrency_past_a_thousand_is_refused_before_anything_starts() -> None:
    result = CliRunner().invoke(app, ["worker", "--concurrency", "1001"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "'--concurrency': Input should be less than or equal to 1000" in result.output


def test_the_help_names_the_bound() -> None:
    result = CliRunner().invoke(app, ["worker", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "up to 1,000" in " ".join(result.output.split())


def test_the_tools_connections_grow_with_the_concurrency() -> None:
    assert tool_connections(8) == 100  # httpx's own default, for a small worker
    assert tool_connections(1000) == 2000
