"""Bounded body reads (X3): bombs and endless bodies from a real loopback server.

Why this way: a decompression bomb is only a bomb if it really is decoded, so each case runs
`http_get` (and the reader under it) against `tests.fakes.bomb_server`, which sends 1 GiB of
zeros gzip-, deflate- or brotli-compressed, or a body that never ends, over a real socket. The
bomb is made while it is sent, so nothing holds 1 GiB. What is asserted is counted, not timed:
bytes kept and bytes read off the wire against the limit, the truncation notice, and the peak of
Python allocations during the read (tracemalloc, which sees the decoders' buffers and every
bytes object), against a bound generous enough for any platform yet far below the bomb.
"""

from __future__ import annotations

import json
import resource
import tracemalloc
from collections.abc import AsyncIterator

import httpx
import pytest

from agent_core import HostAllowlist, ToolFailed, http_get_tool
from agent_core.tools._bounded_body import ACCEPT_ENCODING, Body, BodyLimit, read_body
from agent_core.tools._prometheus import prometheus_tool
from tests.fakes.bomb_server import BombServer
from tests.tool_context import Ctx

LIMIT = BodyLimit(max_bytes=1 << 20)
PEAK_BOUND = 48 << 20
"""Peak Python allocations allowed during one read: 48 MiB against a 1 GiB bomb."""


@pytest.fixture
async def bombs() -> AsyncIterator[BombServer]:
    async with BombServer() as server:
        yield server


def rss_mib() -> float:
    """This process's peak resident set so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("path", ["/gzip", "/deflate", "/br", "/endless"])
async def test_a_bomb_or_an_endless_body_is_read_only_to_the_limit(
    bombs: BombServer, path: str
) -> None:
    """X3: at most the limit is kept, counted after decoding; the wire read is bounded too."""
    async with httpx.AsyncClient() as client:
        tracemalloc.start()
        try:
            async with client.stream("GET", bombs.url(path)) as response:
                body = await read_body(response, LIMIT)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert body.truncated and len(body.data) == LIMIT.max_bytes
    assert body.wire_bytes <= LIMIT.wire_bytes
    assert peak < PEAK_BOUND, f"peak {peak / 2**20:.1f} MiB"
    assert bombs.body_bytes_sent < 64 << 20  # the server stopped when the client hung up


@pytest.mark.parametrize("path", ["/gzip", "/deflate", "/br", "/endless"])
async def test_http_get_says_it_truncated_and_shows_the_model_its_cut(
    bombs: BombServer, path: str
) -> None:
    """X3: through the tool: the result names the bytes read; the process does not balloon."""
    before = rss_mib()
    async with httpx.AsyncClient() as client:
        tool = http_get_tool(HostAllowlist.parse(f"127.0.0.1:{bombs.port}"), client, limit=LIMIT)
        tracemalloc.start()
        try:
            shown = await tool.handler({"url": bombs.url(path)}, Ctx())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert shown.startswith("HTTP 200 OK\n")
    assert shown.endswith(f"[truncated: read the first {LIMIT.max_bytes} bytes of a longer body]")
    assert "[truncated " in shown.splitlines()[-2]  # the character cut for the model, too
    assert peak < PEAK_BOUND, f"peak {peak / 2**20:.1f} MiB"
    assert rss_mib() - before < 256  # ru_maxrss only rises: a coarse, whole-process bound
    assert ACCEPT_ENCODING.encode() in bombs.heads[0]


async def test_a_compressed_stream_that_decodes_to_nothing_stops_at_the_wire_limit(
    bombs: BombServer,
) -> None:
    """X3: empty flushed gzip blocks without end: the wire count, not the decoded one, stops it."""
    limit = BodyLimit(max_bytes=1 << 20, max_wire_bytes=256 << 10)
    async with httpx.AsyncClient() as client:
        async with client.stream("GET", bombs.url("/silent-gzip")) as response:
            body = await read_body(response, limit)
    assert body.truncated and body.data == b""
    assert body.wire_bytes == limit.wire_bytes


@pytest.mark.parametrize(("size", "truncated"), [(1000, False), (1024, False), (1025, True)])
async def test_a_body_at_the_limit_is_whole_and_one_byte_more_is_truncated(
    bombs: BombServer, size: int, truncated: bool
) -> None:
    """X3: the limit is exact: a body of exactly the limit is not reported as truncated."""
    limit = BodyLimit(max_bytes=1024)
    async with httpx.AsyncClient() as client:
        async with client.stream("GET", bombs.url(f"/text?n={size}")) as response:
            body = await read_body(response, limit)
    assert (len(body.data), body.truncated) == (min(size, 1024), truncated)
    assert bool(body.notice()) is truncated


async def test_an_unsupported_coding_is_a_clear_tool_error(bombs: BombServer) -> None:
    """X3: a coding the reader cannot bound (zstd, not advertised) is refused, not passed raw."""
    async with httpx.AsyncClient() as client:
        tool = http_get_tool(HostAllowlist.parse(f"127.0.0.1:{bombs.port}"), client)
        with pytest.raises(ToolFailed, match="unsupported content coding 'zstd'"):
            await tool.handler({"url": bombs.url("/zstd")}, Ctx())


async def test_small_compressed_bodies_are_decoded_whole() -> None:
    """X3: what is under the limit reads as before, whichever coding it came in."""
    import zlib

    import brotli

    text = b"payments-db: connection refused\n" * 10
    encoded = {
        "gzip": zlib.compress(text, wbits=zlib.MAX_WBITS | 16),
        "deflate": zlib.compress(text),
        "br": brotli.compress(text),
    }
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    encoded["deflate-raw"] = raw_deflate.compress(text) + raw_deflate.flush()

    def answer(request: httpx.Request) -> httpx.Response:
        coding = request.url.path.strip("/")
        headers = {"Content-Encoding": coding.removesuffix("-raw")}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(encoded[coding]))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        for coding in encoded:
            async with client.stream("GET", f"http://svc/{coding}") as response:
                body = await read_body(response, LIMIT)
            assert (body.data, body.truncated) == (text, False), coding


async def test_prometheus_refuses_an_answer_past_the_limit(bombs: BombServer) -> None:
    """X3: a Prometheus answer that cannot be read whole is a tool error saying how to ask less."""

    def answer(request: httpx.Request) -> httpx.Response:
        series = [{"metric": {"pod": f"p{n}"}, "value": [1, "1"]} for n in range(50_000)]
        body = {"status": "success", "data": {"resultType": "vector", "result": series}}
        return httpx.Response(200, stream=httpx.ByteStream(json.dumps(body).encode()))

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        tool = prometheus_tool("http://prometheus:9090", client, limit=LIMIT)
        with pytest.raises(ToolFailed, match="more than the 1048576 bytes.*aggregate"):
            await tool.handler({"query": "up"}, Ctx())


async def test_prometheus_reads_a_gzip_bomb_only_to_the_limit(bombs: BombServer) -> None:
    """X3: the bound holds for Prometheus' server too (the answer is a bomb, not JSON)."""
    async with httpx.AsyncClient() as client:
        # the bomb server answers any method on its paths; the tool posts to `<root>/api/v1/query`
        tool = prometheus_tool(bombs.url(""), client, limit=LIMIT)
        tracemalloc.start()
        try:
            with pytest.raises(ToolFailed, match="more than the 1048576 bytes"):
                await tool.handler({"query": "up"}, Ctx())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < PEAK_BOUND


@pytest.mark.parametrize(
    ("charset", "shown"),
    [
        ("punycode", "-" + "a" * 4096),  # quadratic in pure Python: read as UTF-8 instead
        ("idna", "-" + "a" * 4096),
        ("rot13", "-" + "a" * 4096),  # a transform, not a charset
        ("base64", "-" + "a" * 4096),
        ("no-such-charset", "-" + "a" * 4096),
        ("latin-1", "-" + "a" * 4096),
    ],
)
def test_a_servers_charset_is_honoured_only_for_a_linear_text_encoding(
    charset: str, shown: str
) -> None:
    body = Body(data=b"-" + b"a" * 4096, truncated=False, wire_bytes=4097)
    assert body.text(charset) == shown
    assert (
        Body(data="café".encode("latin-1"), truncated=False, wire_bytes=4).text("ISO-8859-1")
        == "café"
    )
