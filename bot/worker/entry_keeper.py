"""Keeping a running entry's claim alive: its idle time reset, its session's lease renewed.

While a job runs, or waits for its session, its worker resets the entry's idle time every third
of the lease TTL (`TurnStream.keep`), so idle workers neither take a long job over nor count
their attempts towards the dead letters (docs/reliability.md Q8); once the session's lease is taken,
it is renewed on the same beat until the body ends, also after the actor's own heartbeat stopped:
a final card that takes long to deliver must not let the lease expire before the entry is
acknowledged (the acknowledgement is fenced by the lease).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from agent_core import StoreError
from bot.process.task_errors import cause_of
from bot.state.lease import Lease, LeaseLost, Leases
from bot.worker.turn_stream import TurnStream

__all__ = ["EntryKeeper", "Held"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Held:
    """What a running entry's keeper keeps alive besides the entry: its lease, once taken."""

    lease: Lease | None = None


class EntryKeeper:
    """Keeps one worker's running entries claimed."""

    def __init__(self, stream: TurnStream, leases: Leases, consumer: str) -> None:
        self._stream = stream
        self._leases = leases
        self._consumer = consumer

    @asynccontextmanager
    async def kept(self, entry_id: str) -> AsyncIterator[Held]:
        """Keep the entry claimed, and its lease once taken, alive until the body is done.

        The entry's idle time is reset (see `TurnStream.keep`) and the lease renewed every
        third of the TTL, also after the actor's heartbeat stopped: a final card that takes
        long to deliver must not let the lease expire before the entry is acknowledged.
        """
        held = Held()
        try:
            async with asyncio.TaskGroup() as group:
                keeper = group.create_task(self._keep(entry_id, held))
                try:
                    yield held
                finally:
                    keeper.cancel()
        except* Exception as failed:  # the body's own error, not "unhandled errors in a group"
            raise cause_of(failed)  # noqa: B904 (`from` would drop its cause)

    async def _keep(self, entry_id: str, held: Held) -> None:
        interval = self._leases.ttl_s / 3
        while True:
            await asyncio.sleep(interval)
            try:
                await self._stream.keep(self._consumer, entry_id)
                if held.lease is not None:
                    await self._leases.renew(held.lease)
            except LeaseLost as exc:  # taken over: the actor learns it from its own heartbeat
                if held.lease is not None:  # not released by the body while the renewal ran
                    log.warning("turn entry %s: %s", entry_id, exc)
                held.lease = None
            except StoreError as exc:  # a blip: the next beat tries again
                log.warning("turn entry %s not kept (%s)", entry_id, exc)
