"""A loopback HTTP/1.1 server whose bodies never end or decode to far more than they weigh.

Why a plain asyncio server: the hostile bodies are made while they are sent, chunk by chunk
(`Transfer-Encoding: chunked`), so a 1 GiB gzip bomb never sits in memory on either side, and
the server stops making it when the client hangs up. It runs on the test's own event loop.

Paths (each served with the `Content-Encoding` it names):

- `/gzip`, `/deflate`, `/br`: `BOMB_BYTES` zeros compressed (about 1 MB, 1 MB and 1 KB on the wire).
- `/endless`: plain bytes without end.
- `/silent-gzip`: a gzip stream of empty flushed blocks without end: it decodes to nothing.
- `/zstd`: a coding the tools do not decode.
- `/api/v1/query`: the gzip bomb again, where `prometheus_query` posts.
- `/text?n=N`: exactly N bytes of `a`, with a Content-Length.

It counts the connections it accepted, the bytes of body it wrote, and keeps each request head.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator

import brotli

__all__ = ["BOMB_BYTES", "BombServer"]

BOMB_BYTES = 1 << 30
"""What a bomb decodes to: 1 GiB."""
_ZEROS = bytes(1 << 20)


def _zlib_bomb(wbits: int) -> Iterator[bytes]:
    deflate = zlib.compressobj(9, zlib.DEFLATED, wbits)
    for _ in range(BOMB_BYTES // len(_ZEROS)):
        yield deflate.compress(_ZEROS)  # often empty: zlib holds output back
    yield deflate.flush()


def _brotli_bomb() -> Iterator[bytes]:
    compressor = brotli.Compressor(quality=5)
    for _ in range(BOMB_BYTES // len(_ZEROS)):
        yield compressor.process(_ZEROS)
    yield compressor.finish()


def _endless() -> Iterator[bytes]:
    chunk = b"x" * 65_536
    while True:
        yield chunk


def _silent_gzip() -> Iterator[bytes]:
    deflate = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    yield deflate.compress(b"") + deflate.flush(zlib.Z_SYNC_FLUSH)  # the header, an empty block
    while True:
        yield b"\x00\x00\x00\xff\xff" * 1_000  # empty stored blocks: they decode to nothing


_BODIES = {
    "/gzip": ("gzip", lambda: _zlib_bomb(zlib.MAX_WBITS | 16)),
    "/deflate": ("deflate", lambda: _zlib_bomb(zlib.MAX_WBITS)),
    "/br": ("br", _brotli_bomb),
    "/endless": (None, _endless),
    "/silent-gzip": ("gzip", _silent_gzip),
    "/zstd": ("zstd", lambda: iter([b"\x28\xb5\x2f\xfd" + bytes(16)])),
    "/api/v1/query": ("gzip", lambda: _zlib_bomb(zlib.MAX_WBITS | 16)),  # a Prometheus' answer
}


class BombServer:
    """The server; `async with` starts and stops it."""

    def __init__(self) -> None:
        self.connections = 0
        self.body_bytes_sent = 0
        self.heads: list[bytes] = []
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._stopping = False
        self.port = 0

    async def __aenter__(self) -> BombServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self._stopping = True  # the server owns its handlers: they end, and it waits for them
        await asyncio.gather(*self._handlers)
        await self._server.wait_closed()

    def url(self, path: str) -> str:
        """`http://127.0.0.1:<port><path>`."""
        return f"http://127.0.0.1:{self.port}{path}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            self.heads.append(head)
            for line in head.lower().split(b"\r\n"):
                if line.startswith(b"content-length:"):  # a POST's form: read, so EOF shows
                    await reader.readexactly(int(line.partition(b":")[2]))
            target = head.split(b" ")[1].decode()
            path, _, query = target.partition("?")
            if path == "/text":
                size = int(query.removeprefix("n="))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                writer.write(b"a" * size)
                self.body_bytes_sent += size
            else:
                await self._chunked(reader, writer, path)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client read what it wanted and hung up: that is the point
        finally:
            writer.close()
            self._handlers.discard(handler)

    async def _chunked(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
    ) -> None:
        """Send the body chunk by chunk, yielding to the loop after each piece is made.

        The client shares this event loop: compressing 1 GiB without a yield would starve it.
        The client's hang-up (end of its stream) stops the making.
        """
        coding, body = _BODIES[path]
        lines = [b"HTTP/1.1 200 OK", b"Transfer-Encoding: chunked", b"Content-Type: text/plain"]
        if coding:
            lines.append(b"Content-Encoding: " + coding.encode())
        writer.write(b"\r\n".join(lines) + b"\r\n\r\n")
        for chunk in body():
            await asyncio.sleep(0)
            if reader.at_eof() or writer.is_closing() or self._stopping:
                return
            if chunk:  # an empty chunk would end the body
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.body_bytes_sent += len(chunk)
                await writer.drain()
        writer.write(b"0\r\n\r\n")
