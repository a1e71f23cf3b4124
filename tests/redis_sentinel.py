"""A real primary, its replica and a Sentinel for tests, on loopback ports.

The primary and the replica are the machine's `redis-server` (started as the other tests' Redis
is), the replica with `--replicaof`; the Sentinel is `redis-sentinel`, or, where Debian's
`redis-sentinel` package (a link to the same binary) is not installed, `redis-server
--sentinel`, which is the same program in the same mode. One Sentinel with a quorum of one
decides alone: enough to fail over in a test, not a production layout (README §Redis).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bot.demo.embedded_redis import free_port, spawn_redis, stop_process

__all__ = ["PRIMARY_NAME", "SentinelSet", "start_sentinel_set", "wait_synced"]

PRIMARY_NAME = "chatops-primary"
DOWN_AFTER_MS = 1000
READY_S = 30.0


@dataclass
class SentinelSet:
    """The running primary, replica and Sentinel."""

    primary_port: int
    replica_port: int
    sentinel_port: int
    procs: dict[str, subprocess.Popen[bytes]] = field(repr=False)

    def kill_primary(self) -> None:
        """SIGKILL the primary, as a crashed host would (no shutdown, no last save)."""
        proc = self.procs["primary"]
        proc.kill()
        proc.wait()

    def promoted(self) -> bool:
        """Whether the Sentinel names the replica as a primary that is up.

        The check redis-py's `Sentinel.discover_master` makes before it gives out an address.
        """
        client = redis.Redis(port=self.sentinel_port)
        try:
            masters: Any = client.sentinel_masters()
            state = masters.get(PRIMARY_NAME) or {}
        finally:
            client.close()
        return (
            int(state.get("port", 0)) == self.replica_port
            and bool(state.get("is_master"))
            and not state.get("is_sdown")
            and not state.get("is_odown")
        )

    def wait_for_failover(self) -> int:
        """Wait until the Sentinel names the replica, up, as the primary; returns its port."""
        deadline = time.monotonic() + READY_S
        while not self.promoted():
            if time.monotonic() > deadline:
                raise RuntimeError("the Sentinel did not promote the replica")
            time.sleep(0.05)
        return self.replica_port

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_process(proc)


def _sentinel_command(config: Path) -> list[str]:
    binary = shutil.which("redis-sentinel")
    if binary is not None:
        return [binary, str(config)]
    server = shutil.which("redis-server")
    if server is None:
        raise RuntimeError("redis-server is not installed")
    return [server, str(config), "--sentinel"]


def start_sentinel_set(workdir: Path) -> SentinelSet:
    """Start a primary, a replica of it, and a Sentinel that watches them.

    Raises:
        RuntimeError: a server would not start, or the replica never synchronised.
    """
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("primary", "replica", "sentinel"):
            (workdir / name).mkdir(parents=True, exist_ok=True)
        procs["primary"], primary = spawn_redis(workdir / "primary", "--appendonly", "yes")
        procs["replica"], replica = spawn_redis(
            workdir / "replica", "--appendonly", "yes", "--replicaof", "127.0.0.1", str(primary)
        )
        wait_synced(replica)
        port = free_port()
        config = workdir / "sentinel" / "sentinel.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {workdir / 'sentinel'}\n"
            f"sentinel monitor {PRIMARY_NAME} 127.0.0.1 {primary} 1\n"
            f"sentinel down-after-milliseconds {PRIMARY_NAME} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {PRIMARY_NAME} 10000\n"
        )
        procs["sentinel"] = subprocess.Popen(
            _sentinel_command(config), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        found = SentinelSet(primary, replica, port, procs)
        _wait_watching(found)
    except BaseException:
        for proc in procs.values():
            stop_process(proc)
        raise
    return found


def wait_synced(replica: int) -> None:
    """Wait until the replica's initial sync with its primary is done."""
    client = redis.Redis(port=replica)
    deadline = time.monotonic() + READY_S
    try:
        while client.info("replication").get("master_link_status") != "up":
            if time.monotonic() > deadline:
                raise RuntimeError("the replica never synchronised with the primary")
            time.sleep(0.05)
    finally:
        client.close()


def _wait_watching(found: SentinelSet) -> None:
    """Wait until the Sentinel answers and knows the replica (it can fail over to it)."""
    deadline = time.monotonic() + READY_S
    while True:
        client = redis.Redis(port=found.sentinel_port, socket_connect_timeout=0.2)
        try:
            replicas = client.sentinel_slaves(PRIMARY_NAME)
            if any(int(r["port"]) == found.replica_port for r in replicas):
                return
        except redis.RedisError:
            pass
        finally:
            client.close()
        if time.monotonic() > deadline:
            raise RuntimeError("the Sentinel never saw the replica")
        time.sleep(0.1)
