"""`chatops demo` and `chatops console`, run as a new team runs them (issue: quick start).

Why this way: the demo's promise is "nothing but this install", so it runs as a process with an
environment that names no Redis and no model: it must start the embedded Redis, the demo service
and the rehearsal model itself, and its printed summary is what a person reads. The console is
driven through a pseudo-terminal, typing as a person does, and checked on what the screen shows.
Marked slow: they start the whole local stack.
"""

from __future__ import annotations

import asyncio
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHATOPS = str(Path(sys.executable).with_name("chatops"))
SCREEN_TIMEOUT_S = 90.0


def bare_environment() -> dict[str, str]:
    """This process's environment without any Redis, model or platform setting."""
    named = ("REDIS_URL", "OPENAI_", "CHATOPS_", "SLACK_", "FEISHU_")
    return {k: v for k, v in os.environ.items() if not k.startswith(named)}


async def test_the_demo_plays_a_redirected_and_a_stopped_analysis_and_exits_0() -> None:
    demo = await asyncio.create_subprocess_exec(
        CHATOPS,
        "demo",
        "--fast",
        env=bare_environment(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(demo.communicate(), 240)
    shown = output.decode()
    assert demo.returncode == 0, shown
    assert "redis: embedded redis-server" in shown
    assert "model: REHEARSAL" in shown
    # the redirect waits for the probes in flight: the card says so before the cut
    assert "Redirected — " in shown
    assert "summary: 2 analyses" in shown
    reasons = re.findall(r"turn \S+: (\w+),", shown)
    assert reasons.count("steered") == 1 and "completed" in reasons and "stopped" in reasons
    assert "failed" not in reasons
    assert "cards final: 2 of 2; failed turns: 0" in shown
    assert "histories the model refused (400): 0" in shown
    assert "demo: ok" in shown


class Terminal:
    """`chatops console` on a pseudo-terminal: type lines, read what the screen shows."""

    def __init__(self) -> None:
        self._main, child = pty.openpty()
        self.proc = subprocess.Popen(
            [CHATOPS, "console"],
            stdin=child,
            stdout=child,
            stderr=child,
            env=bare_environment(),
            close_fds=True,
        )
        os.close(child)
        self.screen = ""

    def type(self, line: str) -> None:
        os.write(self._main, line.encode() + b"\r")

    async def shows(self, pattern: str, *, after: int = 0) -> int:
        """Wait until the screen shows `pattern` (a regex) past offset `after`; its end."""
        async with asyncio.timeout(SCREEN_TIMEOUT_S):
            while (found := re.search(pattern, self.screen[after:])) is None:
                chunk = await asyncio.to_thread(os.read, self._main, 65536)
                self.screen += chunk.decode(errors="replace")
        return after + found.end()

    def close(self) -> int:
        """Type `/quit`, then read the screen until the console exits; kill it past the timeout.

        The screen is read meanwhile: a console whose redraws fill the terminal's buffer blocks
        on its write and would never read the `/quit`.
        """
        self.type("/quit")
        deadline = time.monotonic() + SCREEN_TIMEOUT_S
        try:
            while self.proc.poll() is None and time.monotonic() < deadline:
                if select.select([self._main], [], [], 0.2)[0]:
                    try:
                        self.screen += os.read(self._main, 65536).decode(errors="replace")
                    except OSError:  # EIO: the console closed its side of the terminal
                        break
            return self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            os.close(self._main)


async def test_the_console_mentions_redirects_and_stops_through_a_terminal() -> None:
    terminal = Terminal()
    try:
        seen = await terminal.shows(r"/stop presses Stop")
        terminal.type("checkout is returning 500s, what is wrong?")
        seen = await terminal.shows(r"Investigating", after=seen)
        seen = await terminal.shows(r"running", after=seen)  # the batch is in flight
        terminal.type("focus on the payments database first")
        seen = await terminal.shows(r"Answered", after=seen)
        # The answered card names the redirect: its lines follow the status line. (A window
        # before "Answered" held it only when the earlier redraws happened to be short.)
        seen = await terminal.shows(r"payments database", after=seen)
        terminal.type("is the search service healthy?")
        seen = await terminal.shows(r"running", after=seen)
        terminal.type("/stop")
        await terminal.shows(r"Stopped", after=seen)
    finally:
        status = terminal.close()
    assert status == 0, terminal.screen[-3000:]
