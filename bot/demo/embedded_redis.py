"""The embedded Redis: a `redis-server` of the machine's, started on a free loopback port.

When `REDIS_URL` is unset, `chatops demo` and `chatops console` start one in a directory of
their own, without persistence, and stop it when they end. It is the system's binary (Debian's
`redis-server`, which `make demo` installs when missing) rather than a server bundled in a
Python package: the packages that bundle one are unmaintained or build from source at install
time, and the binary starts in a few tens of milliseconds (`chatops demo` prints how long it
took). The tests start their Redis the same way.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

__all__ = ["free_port", "spawn_redis", "stop_process"]


def free_port() -> int:
    """Return a TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn_redis(
    workdir: str | Path, *config: str, port: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """Start redis-server on a free loopback port and wait until it answers PING.

    `config` is appended to the command line (e.g. `--appendonly yes`: a later directive wins);
    `port` restarts a server on the port it had (over the same `workdir`, its data).

    Raises:
        RuntimeError: redis-server is not installed, or would not start.
    """
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server is not installed: `make demo` and `make test` install it "
            "(apt-get install redis-server), or set REDIS_URL to a Redis of your own"
        )
    wanted = port
    for _ in range(5):
        port = free_port() if wanted is None else wanted
        proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(workdir),
                "--loglevel",
                "warning",
                *config,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=port, socket_connect_timeout=0.2)
        try:
            for _ in range(250):
                try:
                    if client.ping():
                        return proc, port
                except redis.ConnectionError:
                    if proc.poll() is not None:
                        break  # the port was taken after all: try another one
                    time.sleep(0.02)
        finally:
            client.close()
        stop_process(proc, timeout=0)
    raise RuntimeError("could not start redis-server on a loopback port")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """Terminate a child process, killing it if it does not exit within `timeout`."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
