"""A chat-completions endpoint that answers with recorded bytes, for provider-shape tests.

`tests/fakes/openai_provider.py` speaks OpenAI's protocol as OpenAI does; real servers differ
(tests/data/streams/README.md). This one replays what they send, byte for byte, from a raw
ASGI app served by uvicorn on a loopback port, so the openai SDK parses the real bytes over real
HTTP. Each request takes the next scripted answer (FIFO) and is recorded with its JSON body:

* `Replay(data)`: 200, `text/event-stream`, `data` sent event by event.
* `Whole(body)`: 200 JSON (a non-streaming completion).
* `Status(status, body)`: an error answer, JSON; its length declared as FastAPI does.
* `Cut()`: 200 `text/event-stream` headers, then the connection is dropped with no data (the
  chunked body never ends), as llama-cpp-python does when its generator raises.
* `Empty()`: 200 `text/event-stream`, a body that ends cleanly with no event.
* `Hold()`: never answered; the request waits until the client disconnects, which is counted.

With the script empty the answer is a 500 with `x-should-retry: false`, so an unexpected request
fails the test at once.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from starlette.types import Receive, Scope, Send

from tests.fakes.loopback_server import LoopbackServer
from tests.paths import ROOT

if TYPE_CHECKING:
    import openai

__all__ = [
    "STREAMS",
    "Cut",
    "Empty",
    "Hold",
    "Replay",
    "ReplayServer",
    "Status",
    "Whole",
    "replay_server",
]

STREAMS = ROOT / "tests" / "data" / "streams"


@dataclass(frozen=True)
class Replay:
    data: bytes

    @classmethod
    def file(cls, name: str) -> Replay:
        return cls((STREAMS / name).read_bytes())


@dataclass(frozen=True)
class Whole:
    body: dict[str, Any]


@dataclass(frozen=True)
class Status:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Cut:
    pass


@dataclass(frozen=True)
class Empty:
    pass


@dataclass(frozen=True)
class Hold:
    pass


Answer = Replay | Whole | Status | Cut | Empty | Hold


def _events(data: bytes) -> Iterator[bytes]:
    """`data` cut after each event's blank line (LF or CRLF framing)."""
    start = 0
    while start < len(data):
        ends = [i for i in (data.find(b"\n\n", start), data.find(b"\r\n\r\n", start)) if i >= 0]
        if not ends:
            yield data[start:]
            return
        end = min(ends)
        end += 4 if data.startswith(b"\r\n\r\n", end) else 2
        yield data[start:end]
        start = end


class ReplayServer(LoopbackServer):
    """Scripted answers on `/v1/chat/completions`; safe to script from the test's thread."""

    _thread_name = "replay-openai"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: deque[Answer] = deque()
        self._bodies: list[dict[str, Any]] = []
        self._disconnects = 0
        self._disconnected = threading.Event()
        self._arrived = threading.Condition(self._lock)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            await self._serve_one(
                scope, receive, send
            )  # a function: uvicorn reads a method as ASGI2

        super().__init__(app)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *answers: Answer) -> None:
        with self._lock:
            self._script.extend(answers)

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self._bodies.clear()
            self._disconnects = 0
            self._disconnected.clear()

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON body of every request so far, in arrival order."""
        with self._lock:
            return list(self._bodies)

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> bool:
        """Block until `count` requests have arrived; False past the timeout."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self._bodies) >= count, timeout)

    def wait_for_disconnect(self, timeout: float = 5.0) -> int:
        """Block until a held request's client disconnected; the count so far."""
        self._disconnected.wait(timeout)
        with self._lock:
            return self._disconnects

    async def _serve_one(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        with self._lock:
            self._bodies.append(json.loads(raw or b"{}"))
            answer = self._script.popleft() if self._script else None
            self._arrived.notify_all()
        await self._answer(answer, receive, send)

    async def _answer(self, answer: Answer | None, receive: Receive, send: Send) -> None:
        match answer:
            case None:
                body = {"error": {"message": "replay script exhausted", "type": "test"}}
                await _json(send, 500, body, {"x-should-retry": "false"})
            case Status(status, body, headers):
                await _json(send, status, body, headers)
            case Whole(body):
                await _json(send, 200, body, {})
            case Replay(data):
                await _stream_start(send)
                for event in _events(data):
                    await send({"type": "http.response.body", "body": event, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            case Empty():
                await _stream_start(send)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            case Cut():
                await _stream_start(send)
                raise ConnectionAbortedError("the stream's generator raised")  # uvicorn drops it
            case Hold():
                while (await receive())["type"] != "http.disconnect":
                    pass
                with self._lock:
                    self._disconnects += 1
                self._disconnected.set()


async def _json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    payload = json.dumps(body).encode()
    fields = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    fields += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def _stream_start(send: Send) -> None:
    headers = [(b"content-type", b"text/event-stream; charset=utf-8")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


@pytest.fixture(scope="module", name="_replay_server_process")
def _replay_server_process() -> Iterator[ReplayServer]:
    server = ReplayServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture(name="replay_server")
def replay_server(_replay_server_process: ReplayServer) -> Iterator[ReplayServer]:
    """A started `ReplayServer` with an empty script and no records."""
    _replay_server_process.reset()
    yield _replay_server_process
    _replay_server_process.reset()


@pytest.fixture(name="replay_client")
async def replay_client(replay_server: ReplayServer) -> AsyncIterator[openai.AsyncOpenAI]:
    """The real openai SDK pointed at `replay_server`, with the worker's HTTP client."""
    import openai

    from agent_core import openai_http_client

    async with openai.AsyncOpenAI(
        base_url=replay_server.base_url,
        api_key="test",
        max_retries=2,
        http_client=openai_http_client(),
    ) as client:
        yield client
