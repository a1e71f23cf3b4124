"""The kill switch: stop every live analysis at once, and start nothing new, on every worker.

Turning it on records who did it (one Redis key), then stops the live turn of every session
that holds a lease, exactly as a Stop button does (a tombstone and a ring, `ControlPlane.stop`):
the running tools are interrupted, nothing new starts, and each card ends "Stopped by the kill
switch". While it is on, workers read no new turn and take none over; jobs stay queued, nothing
accepted is lost, and they run once it is turned off. A turn a worker had already taken when the
switch went on stops before it calls the model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from agent_core.interrupts import ControlPlane
from agent_core.store import map_redis_errors
from bot.keys import BotKeys

__all__ = ["KillSwitch", "SwitchState"]


@dataclass(frozen=True, slots=True)
class SwitchState:
    """Whether the kill switch is on, and who turned it on when."""

    on: bool
    by: str = ""
    since: float = 0.0
    """Unix time it was turned on."""

    @property
    def stopper(self) -> str:
        """How a stopped card names the stopper."""
        return f"the kill switch ({self.by})" if self.by else "the kill switch"


class KillSwitch:
    """Turns the kill switch on and off, and tells whether it is on."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys | None = None) -> None:
        self._redis = redis
        self._keys = keys or BotKeys()
        self._control = ControlPlane(redis, self._keys.session)

    async def state(self) -> SwitchState:
        """The switch's state (one GET)."""
        with map_redis_errors("read kill switch"):
            raw = await self._redis.get(self._keys.killswitch)
        if raw is None:
            return SwitchState(on=False)
        record = json.loads(raw)
        return SwitchState(on=True, by=str(record.get("by", "")), since=float(record["since"]))

    async def engage(self, by: str) -> list[str]:
        """Turn it on and stop every live turn; the turns stopped (`session/turn`)."""
        record = json.dumps({"by": by, "since": time.time()})
        with map_redis_errors("engage kill switch"):
            await self._redis.set(self._keys.killswitch, record)
        stopper = SwitchState(on=True, by=by).stopper
        stopped = []
        for session, turn in await self._live_turns():
            await self._control.stop(session, turn, by=stopper)
            stopped.append(f"{session}/{turn}")
        return stopped

    async def release(self) -> bool:
        """Turn it off; False when it was off."""
        with map_redis_errors("release kill switch"):
            return bool(await self._redis.delete(self._keys.killswitch))

    async def _live_turns(self) -> list[tuple[str, str]]:
        """Every (session, turn) whose lease is held: the lease names the live turn."""
        k = self._keys
        with map_redis_errors("read leases"):
            sessions: Any = await self._redis.zrange(k.leases, 0, -1)
            names = [s.decode() if isinstance(s, bytes) else str(s) for s in sessions]
            held: Any = await self._redis.mget([k.live_turn(s) for s in names]) if names else []
        live = []
        for session, value in zip(names, held, strict=True):
            if value is not None:  # token|worker|turn
                live.append((session, value.decode().split("|", 2)[2]))
        return live
