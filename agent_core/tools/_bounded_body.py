"""Reading an HTTP response body at most so far: bytes counted on the wire and after decoding.

Contract: `read_body(response, limit)` reads a streamed `httpx.Response` with `aiter_raw()` (the
bytes as they arrive, before any content decoding) and decodes them here, because httpx's own
decoders (`aiter_bytes()`, `.text`) take no output limit: one 64 KiB chunk of a brotli bomb
decodes to gigabytes inside a single `decompress` call. Here every decoder is asked for at most
the room left (`zlib`'s `max_length`, brotli's `output_buffer_limit`, brotli ≥ 1.2), so memory is
bounded by `BodyLimit.max_bytes` plus the decoder's window (32 KiB for zlib, up to 16 MiB for
brotli), whatever the ratio. Reading stops, and the caller closes the response, as soon as
either `max_bytes` decoded bytes or `max_wire_bytes` bytes on the wire have been read; the
`Body` says it was truncated. `Content-Encoding` may be `identity`, `gzip`, `deflate` (zlib or
raw, as httpx accepts) or `br`; `ACCEPT_ENCODING` advertises exactly those, so anything else (a
stacked or unknown coding) is a server's error, reported as `BodyError`, as is a corrupt stream.
"""

from __future__ import annotations

import codecs
import zlib
from dataclasses import dataclass
from typing import Protocol

import brotli
import httpx

__all__ = [
    "ACCEPT_ENCODING",
    "DEFAULT_MAX_BYTES",
    "Body",
    "BodyError",
    "BodyLimit",
    "read_body",
]

DEFAULT_MAX_BYTES = 1_048_576
"""1 MiB: far more than any tool shows the model, far less than a worker can spare."""
ACCEPT_ENCODING = "gzip, deflate, br"
"""The codings `read_body` decodes with a bound; sent instead of httpx's default list."""


class BodyError(Exception):
    """The body could not be decoded (an unsupported coding, or a corrupt stream)."""


@dataclass(frozen=True, kw_only=True)
class BodyLimit:
    """How much of one response body may be read."""

    max_bytes: int = DEFAULT_MAX_BYTES
    """Decoded bytes kept at most (`CHATOPS_TOOL_MAX_BYTES`)."""
    max_wire_bytes: int | None = None
    """Bytes read off the wire at most (compressed, if the body is); None: `max_bytes`. It stops
    a compressed stream that decodes to little or nothing, and an endless one."""

    def __post_init__(self) -> None:
        if self.max_bytes < 1 or (self.max_wire_bytes is not None and self.max_wire_bytes < 1):
            raise ValueError("a body limit must be at least one byte")

    @property
    def wire_bytes(self) -> int:
        """The wire limit in effect."""
        return self.max_bytes if self.max_wire_bytes is None else self.max_wire_bytes


@dataclass(frozen=True)
class Body:
    """What was read of a body."""

    data: bytes
    """The decoded bytes, at most `BodyLimit.max_bytes`."""
    truncated: bool
    """The body went on past a limit and was not read to its end."""
    wire_bytes: int
    """Bytes read off the wire."""

    def text(self, charset: str | None) -> str:
        """The bytes as text in `charset` (UTF-8 if unknown), undecodable bytes replaced.

        The charset is the server's word: only a text encoding decoded in linear time is
        honoured. Python also names transforms (`rot13`, `base64`) and slow pure-Python codecs
        (`punycode` is quadratic: a 1 MiB body would hold the event loop for seconds) as codecs.
        """
        return self.data.decode(_text_codec(charset), errors="replace")

    def notice(self) -> str:
        """The truncation notice, or "" when the body was read whole."""
        if not self.truncated:
            return ""
        return f"[truncated: read the first {len(self.data)} bytes of a longer body]"


_SLOW_OR_SPECIAL_CODECS = frozenset(
    {"punycode", "idna", "undefined", "raw-unicode-escape", "unicode-escape"}
)
"""Text codecs never honoured from a server's charset: pure-Python, quadratic or not a charset."""


def _text_codec(charset: str | None) -> str:
    """`charset` when it names a linear text encoding, else UTF-8."""
    try:
        info = codecs.lookup(charset or "utf-8")
    except LookupError:
        return "utf-8"
    text = getattr(info, "_is_text_encoding", True)  # False for rot13, base64, zlib, hex
    return info.name if text and info.name not in _SLOW_OR_SPECIAL_CODECS else "utf-8"


class _Decoder(Protocol):
    def decode(self, data: bytes, room: int) -> bytes:
        """At most `room` (≥ 1) bytes of output; input not yet used is kept for the next call."""


class _Identity:
    def decode(self, data: bytes, room: int) -> bytes:
        return data[:room]


class _Zlib:
    """gzip or zlib-wrapped deflate; a deflate stream without the zlib header is read raw."""

    def __init__(self, wbits: int, *, raw_fallback: bool = False) -> None:
        self._inflate = zlib.decompressobj(wbits)
        self._tail = b""
        self._raw_fallback = raw_fallback

    def decode(self, data: bytes, room: int) -> bytes:
        pending = self._tail + data
        try:
            out = self._inflate.decompress(pending, room)
        except zlib.error:
            if not self._raw_fallback:
                raise
            self._raw_fallback = False  # servers send raw deflate for `deflate` (httpx too)
            self._inflate = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._inflate.decompress(pending, room)
        self._raw_fallback = False
        self._tail = self._inflate.unconsumed_tail
        return out


class _Brotli:
    def __init__(self) -> None:
        self._inflate = brotli.Decompressor()
        self._tail = b""

    def decode(self, data: bytes, room: int) -> bytes:
        self._tail += data
        if self._inflate.can_accept_more_data():
            data, self._tail = self._tail, b""
        else:  # still emitting what it already has: brotli asks for empty input meanwhile
            data = b""
        return bytes(self._inflate.process(data, output_buffer_limit=room))


def _decoder(headers: httpx.Headers) -> _Decoder:
    codings = [c.strip().lower() for c in headers.get_list("content-encoding", split_commas=True)]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return _Identity()
    if len(codings) > 1:
        raise BodyError(f"stacked content codings are not decoded: {', '.join(codings)}")
    match codings[0]:
        case "gzip" | "x-gzip":
            return _Zlib(zlib.MAX_WBITS | 16)
        case "deflate":
            return _Zlib(zlib.MAX_WBITS, raw_fallback=True)
        case "br":
            return _Brotli()
    raise BodyError(f"unsupported content coding {codings[0]!r}")


class _Reader:
    """Decoded chunks gathered until the limit; `full` once either limit is reached."""

    def __init__(self, decoder: _Decoder, limit: BodyLimit) -> None:
        self.decoder = decoder
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.wire = 0
        self.full = False

    def feed(self, raw: bytes) -> None:
        room_on_wire = self.limit.wire_bytes - self.wire
        if len(raw) > room_on_wire:
            raw, self.full = raw[:room_on_wire], True
        self.wire += len(raw)
        while not self._decoded_full():
            out = self.decoder.decode(raw, self.limit.max_bytes - self.size)
            raw = b""
            if not out:
                return
            self.chunks.append(out[: self.limit.max_bytes - self.size])
            self.size += len(self.chunks[-1])

    def _decoded_full(self) -> bool:
        if self.size >= self.limit.max_bytes:
            self.full = True  # whether more follows is not known, and not worth reading for
        return self.size >= self.limit.max_bytes


async def read_body(response: httpx.Response, limit: BodyLimit) -> Body:
    """Read at most `limit` of a streamed response's body; the caller closes the response.

    Raises:
        BodyError: The content coding is not supported, or the stream is corrupt.
        httpx.HTTPError: The transfer failed (a read timeout, a dropped connection).
    """
    if response.is_stream_consumed:  # an in-memory transport's response (`httpx.MockTransport`)
        reader = _Reader(_Identity(), limit)  # its `content` is decoded already, and in memory
        reader.feed(response.content)
        return Body(b"".join(reader.chunks), reader.full, reader.wire)
    reader = _Reader(_decoder(response.headers), limit)
    try:
        async for raw in response.aiter_raw():
            reader.feed(raw)
            if reader.full:
                break
    except (zlib.error, brotli.error) as exc:
        raise BodyError(f"corrupt {response.headers.get('content-encoding')} body: {exc}") from exc
    truncated = reader.full and not _fit_exactly(response, reader)
    return Body(b"".join(reader.chunks), truncated, reader.wire)


def _fit_exactly(response: httpx.Response, reader: _Reader) -> bool:
    """An uncompressed body of known length exactly `max_bytes` long was read whole."""
    length = response.headers.get("content-length", "")
    whole = length.isdigit() and int(length) == reader.size == reader.wire
    return whole and isinstance(reader.decoder, _Identity)
