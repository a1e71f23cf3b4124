"""A loopback HTTP proxy in front of the real model server that records every exchange.

Why a proxy and not an httpx transport: the worker builds its own openai client from
`OPENAI_BASE_URL` (bot/worker/model.py), so the real tests change nothing in the bot's path;
they point that URL here. Each exchange keeps the request body and the response's raw bytes as
they came off the wire (the SSE stream, its `: ping` comments included), whether the client read
it to the end, and whether the client hung up first (a stop closes the stream mid-way).

`hold_after_first_chunk` pauses one response after its first chunk has been forwarded, until
`release()`: a stop can then be sent while that stream is provably open, without depending on
how fast the model is.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.fakes.loopback_server import LoopbackServer

__all__ = ["Exchange", "RecordingProxy"]

_HOP_HEADERS = frozenset(
    {b"host", b"content-length", b"accept-encoding", b"connection", b"transfer-encoding"}
)
_MAX_REQUEST_BYTES = 4 << 20


@dataclass
class Exchange:
    """One request and what the server streamed back."""

    method: str
    path: str
    request: bytes
    status: int = 0
    response: bytearray = field(default_factory=bytearray)
    complete: bool = False
    """The server's whole response was forwarded."""
    disconnected: bool = False
    """The client hung up before the response was complete."""

    def request_json(self) -> Any:
        """The request body, parsed."""
        return json.loads(self.request)


class RecordingProxy(LoopbackServer):
    """Forward everything to `upstream` (e.g. `http://127.0.0.1:8000`), recording each exchange."""

    _thread_name = "recording-proxy"

    def __init__(self, upstream: str) -> None:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await self._handle(scope, receive, send)  # a function: uvicorn then speaks ASGI 3

        super().__init__(app)
        self._upstream = upstream.rstrip("/")
        self._lock = threading.Lock()
        self._exchanges: list[Exchange] = []
        self.hold_after_first_chunk = False
        """Pause the next response after its first chunk, until `release()`."""
        self.first_chunk = threading.Event()
        """Set once a held response's first chunk was forwarded."""
        self._released = threading.Event()
        self.record_as: list[str] = []
        """The names the test's exchanges are recorded under (`save`), in order."""

    @property
    def base_url(self) -> str:
        """The OpenAI base URL to give the bot (`…/v1`)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def exchanges(self) -> list[Exchange]:
        """The exchanges so far, in the order their requests arrived."""
        with self._lock:
            return list(self._exchanges)

    def completions(self) -> list[Exchange]:
        """The chat-completions exchanges so far."""
        return [e for e in self.exchanges if e.path.endswith("/chat/completions")]

    def release(self) -> None:
        """Let a held response go on."""
        self._released.set()

    def _release_held(self) -> None:
        self.release()

    def save(self, folder: Path, names: list[str]) -> list[Path]:
        """Write the first chat-completions exchanges as `NAME.request.json` and `NAME.sse`.

        One name per exchange, in order; exchanges past the names (an SDK retry) are not kept.
        """
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, exchange in zip(names, self.completions(), strict=False):
            request = json.dumps(exchange.request_json(), indent=1, ensure_ascii=False)
            (folder / f"{name}.request.json").write_text(request + "\n", encoding="utf-8")
            (folder / f"{name}.sse").write_bytes(bytes(exchange.response))
            written += [folder / f"{name}.request.json", folder / f"{name}.sse"]
        return written

    async def _handle(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if len(body) > _MAX_REQUEST_BYTES:
                raise ValueError("request body over the proxy's limit")
            if not message.get("more_body"):
                break
        exchange = Exchange(scope["method"], scope["path"], bytes(body))
        with self._lock:
            self._exchanges.append(exchange)
        hung_up = asyncio.Event()

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            hung_up.set()

        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(watch())
            hangup = group.create_task(hung_up.wait())
            forward = group.create_task(self._forward(scope, exchange, send))
            await asyncio.wait([forward, hangup], return_when=asyncio.FIRST_COMPLETED)
            if not forward.done():
                exchange.disconnected = True
                forward.cancel()
            watcher.cancel()
            hangup.cancel()

    async def _forward(self, scope: Any, exchange: Exchange, send: Any) -> None:
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_HEADERS]
        url = f"{self._upstream}{exchange.path}"
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode()
        timeout = httpx.Timeout(600, connect=10)
        async with (
            httpx.AsyncClient(timeout=timeout) as client,
            client.stream(exchange.method, url, content=exchange.request, headers=headers) as up,
        ):
            exchange.status = up.status_code
            kept = [(b"content-type", up.headers.get("content-type", "").encode())]
            await send({"type": "http.response.start", "status": up.status_code, "headers": kept})
            first = True
            async for chunk in up.aiter_raw():
                exchange.response += chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
                if first and self.hold_after_first_chunk:
                    self.hold_after_first_chunk = False
                    self.first_chunk.set()
                    await asyncio.to_thread(self._released.wait)
                first = False
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            exchange.complete = True
