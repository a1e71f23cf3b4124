"""The base of the HTTP fakes: uvicorn serving one ASGI app on a loopback port from a thread.

The OpenAI, Slack and Feishu fakes serve real HTTP so that the SDKs under test run their own
request and response code. Served from a daemon thread with its own event loop, a fake does not
depend on any test's loop, so a plain session fixture can start one server for the whole
session. The listening socket is bound before the thread starts, so the port is known at once,
and :meth:`LoopbackServer.start` returns only once uvicorn accepts connections.
"""

from __future__ import annotations

import socket
import threading

import uvicorn
from starlette.types import ASGIApp

__all__ = ["LoopbackServer"]


class _Server(uvicorn.Server):
    """uvicorn server that reports when it is accepting connections."""

    def __init__(self, config: uvicorn.Config, ready: threading.Event) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self._ready.set()


class LoopbackServer:
    """An ASGI app served by uvicorn on 127.0.0.1 from a daemon thread.

    Subclasses pass their app and override :meth:`_release_held` if they hold answers back.
    Errors name the subclass (``FakeProvider is not started``).
    """

    _thread_name = "fake-server"
    """Name of the serving thread."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The loopback port being served.

        Raises:
            RuntimeError: The server was never started.
        """
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._port

    def start(self, timeout: float = 10.0) -> None:
        """Bind an ephemeral loopback port and serve on a daemon thread until accepting.

        Args:
            timeout: Seconds to wait for the server to accept connections.

        Raises:
            RuntimeError: The server did not start in time.
        """
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._port = int(self._socket.getsockname()[1])
        config = uvicorn.Config(
            self._app,
            http="h11",
            ws="none",
            lifespan="off",
            loop="asyncio",
            log_config=None,
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
        )
        ready = threading.Event()
        self._server = _Server(config, ready)
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name=self._thread_name, daemon=True
        )
        self._thread.start()
        if not ready.wait(timeout) or not self._server.started:
            self.stop()
            raise RuntimeError(f"{type(self).__name__} did not start")

    def _serve(self, ready: threading.Event) -> None:
        assert self._server is not None and self._socket is not None
        try:
            self._server.run(sockets=[self._socket])
        finally:
            ready.set()  # Unblock start() if the server died before accepting.

    def stop(self, timeout: float = 10.0) -> None:
        """Release held answers, shut the server down and close the listening socket.

        Args:
            timeout: Seconds to wait for the server thread to finish.
        """
        self._release_held()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        if self._socket is not None:
            self._socket.close()

    def _release_held(self) -> None:
        """Release every held answer at once; :meth:`stop` calls this first. Nothing here."""
