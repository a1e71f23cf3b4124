"""Hearing a session's rings (Pub/Sub messages) from a test, the way a worker's `BellHub` does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aioredis

_END = "test:end-of-rings"


class Rings:
    """The rings published on one channel since the test subscribed."""

    def __init__(self, redis: aioredis.Redis, pubsub: Any, channel: str) -> None:
        self._redis = redis
        self._pubsub = pubsub
        self._channel = channel
        self._heard: list[str] = []

    async def _next(self, timeout_s: float) -> str:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await self._pubsub.get_message(timeout=timeout_s)
                if message is not None and message["type"] == "message":
                    data = message["data"]
                    return data.decode() if isinstance(data, bytes) else str(data)

    async def wait_for(self, note: str, timeout_s: float = 10.0) -> None:
        """Return once `note` is heard (it may have been heard already)."""
        while note not in self._heard:
            self._heard.append(await self._next(timeout_s))

    async def so_far(self, timeout_s: float = 10.0) -> list[str]:
        """Every ring published before this call (Redis delivers them in order)."""
        await self._redis.publish(self._channel, _END)
        while True:
            note = await self._next(timeout_s)
            if note == _END:
                return list(self._heard)
            self._heard.append(note)


@asynccontextmanager
async def rings(redis: aioredis.Redis, channel: str) -> AsyncIterator[Rings]:
    """Subscribe to `channel` for the block (confirmed before the block starts)."""
    pubsub = redis.pubsub()
    await pubsub.subscribe(channel)
    while (await pubsub.get_message(timeout=5.0) or {}).get("type") != "subscribe":
        pass
    try:
        yield Rings(redis, pubsub, channel)
    finally:
        await pubsub.aclose()
