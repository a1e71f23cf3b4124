"""A real Redis Cluster for tests: three masters on loopback ports, created by `redis-cli`.

Each node is the machine's `redis-server --cluster-enabled yes` (started as the other tests'
Redis is, `bot.demo.embedded_redis.spawn_redis`), and `redis-cli --cluster create` assigns the
16,384 slots among them, as an operator would. The cluster is ready once every node reports
`cluster_state:ok`. Nothing here is a fake: routing, MOVED and cross-slot refusals are the
server's own.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from bot.demo.embedded_redis import spawn_redis, stop_process

__all__ = ["RedisClusterNodes", "start_cluster"]

READY_S = 30.0
"""How long the nodes may take to agree on the slot map."""


@dataclass
class RedisClusterNodes:
    """The running nodes of a cluster: `url` names the first (any node will do for a client)."""

    ports: list[int]
    procs: list[subprocess.Popen[bytes]] = field(repr=False)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def owner_of(self, key: str) -> int:
        """The port of the master that serves `key`'s slot."""
        client = redis.Redis(port=self.ports[0])
        try:
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
            for start, end, (_, port, *_rest), *_replicas in client.execute_command(
                "CLUSTER", "SLOTS"
            ):
                if start <= slot <= end:
                    return int(port)
        finally:
            client.close()
        raise AssertionError(f"no node serves the slot of {key!r}")

    def flush(self) -> None:
        """Empty every node (a test starts from nothing)."""
        for port in self.ports:
            client = redis.Redis(port=port)
            try:
                client.flushall()
            finally:
                client.close()

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)


def start_cluster(workdir: Path, masters: int = 3) -> RedisClusterNodes:
    """Start `masters` cluster-enabled redis-servers and join them into one cluster.

    Raises:
        RuntimeError: redis-server or redis-cli is missing, or the cluster did not form.
    """
    cli = shutil.which("redis-cli")
    if cli is None:
        raise RuntimeError("redis-cli is not installed (Debian's redis-tools, with redis-server)")
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for index in range(masters):
            node_dir = workdir / f"node{index}"
            node_dir.mkdir(parents=True, exist_ok=True)
            proc, port = spawn_redis(
                node_dir,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                "5000",
                "--appendonly",
                "yes",
            )
            procs.append(proc)
            ports.append(port)
        created = subprocess.run(
            [
                cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{port}" for port in ports),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=READY_S,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout!r}")
        _wait_ok(ports)
    except BaseException:
        for proc in procs:
            stop_process(proc)
        raise
    return RedisClusterNodes(ports, procs)


def _wait_ok(ports: list[int]) -> None:
    deadline = time.monotonic() + READY_S
    for port in ports:
        client = redis.Redis(port=port)
        try:
            while b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cluster node {port} never reported cluster_state:ok")
                time.sleep(0.05)
        finally:
            client.close()
