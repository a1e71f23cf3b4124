"""A stdio MCP server's stderr, read through the logger with the server's name.

The `mcp` client hands `errlog` to the subprocess as its stderr (`stdio_client(params, errlog)`
passes it to `anyio.open_process(stderr=...)`, so it must be a real file with a descriptor); by
default that is the worker's own stderr, where a server's tracebacks would land raw among the
JSON log lines. `stderr_pipe(server)` opens a pipe instead: the child writes to its end, and a
reader task owned by the context manager turns what arrives into log records of
`agent_core.tools._mcp.stderr`, one per line, each `MCP server 'k8s' stderr: <line>`.

Bounded, because a server writes what it likes:

- a line is cut at `MAX_LINE_CHARS` (the rest of it up to its newline is skipped, in time linear
  in its length), decoded as UTF-8 with errors replaced;
- records are rate-limited by a token bucket (`BURST_LINES` at once, `LINES_PER_S` after):
  lines past it are read and dropped, never left in the pipe (a full pipe would block the
  server), and the next record that is written says how many were dropped; while the bucket is
  empty a chunk's whole lines are only counted (`bytes.count`), never split or decoded;
- the reader keeps at most one chunk and one line in memory.

The pipe is read until its end: when the child and every process it started have exited. On
leaving the context the worker's copy of the write end is closed and the reader waited for
(`DRAIN_TIMEOUT_S`), then cancelled: a grandchild holding the pipe open cannot hold the close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import BinaryIO, TextIO

__all__ = [
    "BURST_LINES",
    "DRAIN_TIMEOUT_S",
    "LINES_PER_S",
    "MAX_LINE_CHARS",
    "StderrLines",
    "stderr_pipe",
]

log = logging.getLogger(__name__)

MAX_LINE_CHARS = 1_000
"""Characters of one stderr line logged at most; the rest of the line is dropped."""
BURST_LINES = 100
"""Lines logged at once before the rate limit applies."""
LINES_PER_S = 10.0
"""Lines logged per second past the burst (so at most ~10 KB/s of a server's stderr)."""
DRAIN_TIMEOUT_S = 2.0
"""Longest wait, on close, for the rest of the pipe once the worker's end is closed."""
_CHUNK = 65_536


class StderrLines:
    """Splits a byte stream into bounded lines and logs them at a bounded rate.

    `feed` takes chunks as they come; `finish` logs an unterminated last line and any drop
    count. `clock` is injectable so the limit can be tested without waiting.
    """

    def __init__(self, server: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.server = server
        self._clock = clock
        self._line = bytearray()
        self._cut = False  # the current line passed the limit: skip to its newline
        self._tokens = float(BURST_LINES)
        self._stamp = clock()
        self._dropped = 0

    def feed(self, chunk: bytes) -> None:
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            if end < 0:
                self._take(chunk[start:])
                return
            self._take(chunk[start:end])
            self._emit()
            start = end + 1
            if start < len(chunk) and not self._refill():
                start = self._drop_whole_lines(chunk, start)

    def _drop_whole_lines(self, chunk: bytes, start: int) -> int:
        """The bucket is empty: count the chunk's whole lines left as dropped, unread.

        A chunk arrives at one instant, so no token comes back within it; counting its
        newlines in C costs nothing next to splitting, decoding and limiting each line (2 MB
        of `y` lines took 0.77 s of CPU that way). Returns where its unterminated tail begins.
        """
        last = chunk.rfind(b"\n", start)
        if last < 0:
            return start
        self._dropped += chunk.count(b"\n", start, last + 1)
        return last + 1

    def finish(self) -> None:
        if self._line or self._cut:
            self._emit()
        if self._dropped:
            self._log(f"[{self._dropped} more lines of stderr dropped by the rate limit]")
            self._dropped = 0

    def _take(self, piece: bytes) -> None:
        if self._cut:
            return
        room = MAX_LINE_CHARS * 4 - len(self._line)  # ≤ 4 bytes a character
        self._line += piece[:room]
        if len(piece) > room:
            self._cut = True

    def _emit(self) -> None:
        cut = self._cut
        self._cut = False
        if not self._admit():
            self._line.clear()
            self._dropped += 1
            return
        text = self._line.decode("utf-8", errors="replace").rstrip("\r")
        self._line.clear()
        cut = cut or len(text) > MAX_LINE_CHARS
        if self._dropped:
            text = f"[{self._dropped} lines dropped by the rate limit] {text}"
            self._dropped = 0
        self._log(text[:MAX_LINE_CHARS] + (" […]" if cut else ""))

    def _refill(self) -> bool:
        """Tokens back for the time passed; whether one is there."""
        now = self._clock()
        self._tokens = min(float(BURST_LINES), self._tokens + (now - self._stamp) * LINES_PER_S)
        self._stamp = now
        return self._tokens >= 1

    def _admit(self) -> bool:
        if not self._refill():
            return False
        self._tokens -= 1
        return True

    def _log(self, text: str) -> None:
        log.warning(
            "MCP server %r stderr: %s", self.server, text, extra={"mcp_server": self.server}
        )


async def _read(pipe: BinaryIO, lines: StderrLines) -> None:
    """Log what arrives on `pipe` until its end; `pipe` is closed in any case."""
    try:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_CHUNK, loop=loop)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), pipe
        )
        try:
            while chunk := await reader.read(_CHUNK):
                lines.feed(chunk)
        finally:
            transport.close()
            lines.finish()
    finally:
        pipe.close()


@contextlib.asynccontextmanager
async def stderr_pipe(server: str) -> AsyncIterator[TextIO]:
    """A file to pass as `errlog`: what the server writes to it is logged under its name.

    Leave the context only once the server process has been started and stopped (after the
    `mcp` client's context), or at once if it never started.
    """
    read_fd, write_fd = os.pipe()
    pipe = os.fdopen(read_fd, "rb", buffering=0)
    errlog = os.fdopen(write_fd, "w")
    reader = asyncio.create_task(_read(pipe, StderrLines(server)), name=f"mcp-stderr:{server}")
    try:
        yield errlog
    finally:
        errlog.close()  # only the child's copies keep the pipe open now
        try:
            await asyncio.wait({reader}, timeout=DRAIN_TIMEOUT_S)
        finally:  # also when this task is cancelled: the reader never outlives the context
            reader.cancel()
            await asyncio.wait({reader})
        if not reader.cancelled() and (failure := reader.exception()) is not None:
            log.warning("MCP server %r: reading its stderr failed: %s", server, failure)
