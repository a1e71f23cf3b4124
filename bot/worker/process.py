"""The worker: reads turn jobs from the turns stream and runs each under its session's lease.

Several workers may run at once (one consumer group, one consumer name each). A job is taken
with `XREADGROUP`, its session's lease is acquired (a second job of a busy session waits for
the release), the actor runs the analysis, and the entry is acknowledged (fenced by the lease,
see `bot.worker.turn_stream`) before the lease is released. Every task is owned by the worker's task
group. `stop()` drains: live turns are handed over at their next cut. A worker with a free slot
takes over entries left pending by a dead one once their lease has expired (looking once per
lease TTL, busy or idle), and sets aside (dead-letters) an entry that keeps killing its workers.
While it runs, it watches its event loop's lag (`bot.process.loop_lag`, exported in its metrics),
and, when alerts are routed, takes alert notifications in (`bot.worker.alert_dispatch`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass

import redis.asyncio as aioredis
from pydantic import ValidationError

from agent_core import StoreError, checkpoint, until_set
from bot.analysis.actor import Actor
from bot.control.killswitch import KillSwitch
from bot.keys import BotKeys
from bot.logs import bind
from bot.process.failpoints import Failpoints
from bot.process.loop_lag import monitor_loop_lag
from bot.state.lease import Lease, Leases
from bot.state.turn_jobs import TurnJob, ensure_group
from bot.worker.alert_dispatch import AlertDispatcher
from bot.worker.entry_keeper import EntryKeeper
from bot.worker.metrics import WorkerMetrics
from bot.worker.turn_stream import Entry, TurnStream

__all__ = ["MAX_DELIVERIES", "Worker", "WorkerOptions"]

log = logging.getLogger(__name__)

RELEASE_TIMEOUT_S = 5.0
MAX_DELIVERIES = 5
"""A job delivered more often than this (each time its worker died) goes to the dead letters."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """How much one worker takes on."""

    concurrency: int = 8
    """Analyses run at once."""
    block_s: float = 2.0
    """One blocking stream read; under redis-py's default 5 s socket timeout, for a client that
    keeps one (the worker's own client has none, see `bot.worker.clients.worker_redis`)."""


class Worker:
    """Consumes the turns stream."""

    def __init__(
        self,
        *,
        redis: aioredis.Redis,
        actor: Actor,
        leases: Leases,
        keys: BotKeys | None = None,
        name: str | None = None,
        options: WorkerOptions | None = None,
        failpoints: Failpoints | None = None,
        metrics: WorkerMetrics | None = None,
        alerts: AlertDispatcher | None = None,
    ) -> None:
        self._redis = redis
        self._alerts = alerts
        self.metrics = metrics or WorkerMetrics()
        """This worker's metrics (`open_worker` shares them with its settle writer and cards)."""
        self._failpoints = failpoints or Failpoints()
        self._actor = actor
        self._leases = leases
        self._keys = keys or BotKeys()
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._options = options or WorkerOptions()
        self._stopping = asyncio.Event()
        self._slots = asyncio.Semaphore(self._options.concurrency)
        self._stream = TurnStream(redis, self._keys)
        self._keeper = EntryKeeper(self._stream, leases, self.name)
        self._switch = KillSwitch(redis, self._keys)
        self._switch_seen = False
        self._switch_unreadable = False
        self._next_reclaim = float("-inf")
        self.finished = 0
        """Jobs acknowledged, for tests and metrics."""
        self._progress = asyncio.Condition()

    async def wait_finished(self, count: int) -> None:
        """Wait until `count` jobs in all have been run and acknowledged."""
        async with self._progress:
            await self._progress.wait_for(lambda: self.finished >= count)

    @property
    def stopping(self) -> bool:
        """`stop()` was called."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Drain: stop reading; every live turn suspends at its next cut and is handed over.

        Idle, the worker returns at once (its blocking read is abandoned). Calling it again is
        harmless: two signals are handled like one.
        """
        self._stopping.set()
        self._actor.drain()

    async def run(self) -> None:
        """Read and run jobs until `stop()`."""
        await ensure_group(self._redis, self._keys)
        # The lag monitor outlives the task group: a drain's last turns are watched too.
        async with monitor_loop_lag(self.metrics.event_loop_lag), asyncio.TaskGroup() as group:
            if self._alerts is not None:  # stops with the worker, after the entry in hand
                group.create_task(self._alerts.run(self._stopping))
            while not self._stopping.is_set():
                checkpoint()  # redis-py on 3.11 can swallow a cancel (see `checkpoint`)
                await self._slots.acquire()
                try:
                    entry, reclaimed = await self._next_entry()
                except BaseException:
                    self._slots.release()
                    raise
                if entry is None:
                    self._slots.release()
                    continue
                group.create_task(self._handle(entry, reclaimed=reclaimed))

    async def _next_entry(self) -> tuple[Entry | None, bool]:
        """An entry abandoned by a dead worker (True), else a new one (False), else None.

        Abandoned entries go first, busy or idle: they are the oldest work, and a worker that
        only looked for them while idle would leave them to the reaper under a steady stream
        of new mentions.
        """
        if await self._switched_off():
            return None, False
        reclaimed = await self._reclaim()
        if reclaimed:
            return reclaimed[0], True
        block_ms = int(self._options.block_s * 1000)
        try:
            read = await until_set(self._stopping, self._stream.read(self.name, block_ms))
        except StoreError as exc:  # Redis away: ridden out, one read interval at a time
            log.warning("cannot read the turns stream (%s); retrying", exc)
            await until_set(self._stopping, asyncio.sleep(self._options.block_s))
            return None, False
        return (read[0] if isinstance(read, list) and read else None), False

    async def _switched_off(self) -> bool:
        """While the kill switch is on, or cannot be read, read nothing: wait one interval (True).

        An unreadable switch is never taken for off: the stream may be readable when the
        switch is not (a permission, a key on another node), and a worker that read on would
        run turns an engaged switch forbids.
        """
        try:
            switch = await self._switch.state()
        except StoreError as exc:
            if not self._switch_unreadable:
                self._switch_unreadable = True
                log.warning("kill switch unreadable (%s): reading no turns until it is read", exc)
            await until_set(self._stopping, asyncio.sleep(self._options.block_s))
            return True
        if self._switch_unreadable:
            self._switch_unreadable = False
            log.warning("kill switch readable again")
        if switch.on != self._switch_seen:
            self._switch_seen = switch.on
            if switch.on:
                log.warning("kill switch on (by %s): reading no turns until it is off", switch.by)
            else:
                log.warning("kill switch off: reading turns again")
        if switch.on:
            await until_set(self._stopping, asyncio.sleep(self._options.block_s))
        return switch.on

    async def _reclaim(self) -> list[Entry]:
        """Take over an entry another worker left pending longer than a lease lasts.

        Scans go on while they find work, then rest one lease TTL (and none starts while
        stopping): a worker that died with several analyses has them all taken over at once.
        The entry's session lease decides whether it is really abandoned (see `_lease_for`).
        """
        if self._stopping.is_set() or time.monotonic() < self._next_reclaim:
            return []
        try:
            claimed, scanned = await self._stream.claim_idle(
                self.name, int(self._leases.ttl_s * 1000)
            )
        except StoreError as exc:
            log.warning("cannot reclaim turns (%s)", exc)
            claimed, scanned = [], True
        if scanned and not claimed:
            self._next_reclaim = time.monotonic() + self._leases.ttl_s
        return claimed

    async def _handle(self, entry: Entry, *, reclaimed: bool = False) -> None:
        try:
            job = _job_of(entry)
            if job is None:
                await self._stream.drop(entry.id)  # a poison entry: retrying cannot help
                return
            bind(session=job.session_id, turn=job.turn_id, event=job.event.event_id)
            if not reclaimed:
                self.metrics.claimed(job)
            lease = await self._lease_for(entry, job) if reclaimed else None
            if reclaimed and lease is None:
                return  # its worker is alive (or it was dead-lettered): not ours to run
            async with self._keeper.kept(entry.id) as held:
                if lease is None:
                    lease = await self._leases.acquire(job.session_id, self.name, job.turn_id)
                held.lease = lease
                try:
                    await self._actor.run(job, lease)
                    await self._ack(entry.id, lease)
                finally:
                    held.lease = None  # released below: the keeper's next beat must not renew it
                    await self._release(lease)
            async with self._progress:
                self.finished += 1
                self._progress.notify_all()
        except Exception:
            log.exception("turn entry %s failed in the worker; left pending", entry.id)
        finally:
            self._slots.release()

    async def _lease_for(self, entry: Entry, job: TurnJob) -> Lease | None:
        """The lease of a taken-over entry's session when its worker is really gone.

        None when another worker holds the session (the entry's worker is alive, or it just
        finished), or when the entry was set aside as a poison job.
        """
        lease = await self._leases.try_acquire(job.session_id, self.name, job.turn_id)
        if lease is None:
            log.warning(
                "turn entry %s was idle past the lease TTL, but %s is busy: left pending",
                entry.id,
                job.session_id,
            )
            await self._stream.give_back(self.name, entry.id)  # a claim, not a delivery
            return None
        deliveries = await self._stream.deliveries(entry.id)
        if not deliveries:
            await self._release(lease)
            return None
        if deliveries > MAX_DELIVERIES:
            await self._dead_letter(entry, job, lease, deliveries)
            return None
        log.warning("resuming turn %s, abandoned by its worker", job.turn_id)
        self._failpoints.hit("during_reclaim")
        return lease

    async def _dead_letter(self, entry: Entry, job: TurnJob, lease: Lease, deliveries: int) -> None:
        """Set aside a job that keeps killing its workers (docs/reliability.md Q7), and say so."""
        reason = f"could not be run: its worker stopped {deliveries - 1} times while running it"
        log.error("turn %s dead-lettered after %d deliveries", job.turn_id, deliveries)
        try:
            await self._stream.dead_letter(entry, deliveries)
            await self._actor.give_up(job, lease, reason)
            await self._ack(entry.id, lease)
        finally:
            await self._release(lease)

    async def _ack(self, entry_id: str, lease: Lease) -> None:
        if not await self._stream.ack(entry_id, lease):
            log.warning(
                "turn entry %s not acknowledged: the lease of %s moved on (token %d is stale)",
                entry_id,
                lease.session_id,
                lease.token,
            )

    async def _release(self, lease: Lease) -> None:
        """Release the lease, shielded and bounded (an expiry frees it anyway)."""
        release = asyncio.get_running_loop().create_task(
            asyncio.wait_for(self._leases.release(lease), RELEASE_TIMEOUT_S)
        )
        try:
            await asyncio.shield(release)
        except asyncio.CancelledError:
            await asyncio.wait({release})
            raise
        except Exception as exc:
            log.warning("lease of %s not released (it will expire): %s", lease.session_id, exc)


def _job_of(entry: Entry) -> TurnJob | None:
    try:
        return TurnJob.model_validate_json(entry.fields.get(b"job", b""))
    except ValidationError as exc:
        log.error("turn entry %s is not a job (%s): dropped", entry.id, exc)
        return None
