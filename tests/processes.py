"""Start `chatops` subcommands as operators run them: console script, environment, signals.

Used by the process-level tests. Every process gets its own output file (read back when a test
fails or wants a log line), is waited for without blocking the test's event loop (the fake
servers some tests use run on that loop), and is always stopped at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import httpx

from tests.loopback import free_port

__all__ = ["Chatops"]

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class Chatops:
    """One running `chatops …` process."""

    def __init__(self, args: list[str], env: Mapping[str, str]) -> None:
        self.args = args
        self._log = tempfile.NamedTemporaryFile(prefix="chatops-", suffix=".log", delete=False)
        exe = Path(sys.executable).with_name("chatops")
        self.proc = subprocess.Popen(
            [str(exe), *args],
            env={**os.environ, **env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def log(self) -> str:
        """Everything the process printed so far."""
        return Path(self._log.name).read_text(errors="replace")

    async def wait_for_line(self, text: str) -> None:
        """Wait until the process printed `text` (it is up); fail if it died first."""
        async with asyncio.timeout(START_TIMEOUT_S):
            while text not in self.log:
                if self.proc.poll() is not None:
                    raise AssertionError(f"{self.args[0]} exited early:\n{self.log}")
                await asyncio.sleep(0.05)

    def signal(self, signum: int) -> None:
        """Send a signal (SIGKILL, SIGSTOP, SIGCONT, SIGTERM …)."""
        self.proc.send_signal(signum)

    async def stop(self) -> int:
        """SIGTERM, then wait; SIGKILL if it does not exit in time. Returns the exit status."""
        timeout = STOP_TIMEOUT_S
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        self._log.close()
        return self.proc.returncode

    @classmethod
    async def serve(cls, env: Mapping[str, str]) -> tuple[Chatops, str]:
        """`chatops serve` on a free port, ready (`/readyz` 200); returns it and its base URL."""
        port = free_port()
        proc = cls(["serve", "--host", "127.0.0.1", "--port", str(port)], env)
        base = f"http://127.0.0.1:{port}"
        async with asyncio.timeout(START_TIMEOUT_S), httpx.AsyncClient() as client:
            while True:
                if proc.proc.poll() is not None:
                    raise AssertionError(f"serve exited early:\n{proc.log}")
                try:
                    if (await client.get(f"{base}/readyz", timeout=1)).status_code == 200:
                        return proc, base
                except httpx.TransportError:
                    pass
                await asyncio.sleep(0.05)

    @classmethod
    async def worker(cls, env: Mapping[str, str], *args: str) -> Chatops:
        """`chatops worker [args]`, reading the stream."""
        proc = cls(["worker", *args], env)
        await proc.wait_for_line("reading turns")
        return proc

    @classmethod
    async def scheduler(cls, env: Mapping[str, str], interval_s: float) -> Chatops:
        """`chatops scheduler` with a reaper sweep every `interval_s`."""
        proc = cls(["scheduler", "--interval", str(interval_s)], env)
        await proc.wait_for_line("reaper every")
        return proc
