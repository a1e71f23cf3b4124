"""Loopback processes shared by the test fixtures and the benchmarks: a free port, redis-server.

Redis is never faked: tests and benches start a real `redis-server` bound to 127.0.0.1 on a
free port, in a directory of their own, without persistence unless a test asks for it. They
start it exactly as `chatops demo` starts its embedded Redis.
"""

from __future__ import annotations

from bot.demo.embedded_redis import free_port, spawn_redis, stop_process

__all__ = ["free_port", "spawn_redis", "stop_process"]
