"""Interrupt signals: who may cut a running turn, and the one place they are read.

Five signals exist. `STOP` acts at once: it aborts a model stream and cancels interruptible
tools, and after it no model request or tool call starts. The other four are only acted on at a
cut (the balance ledger's zero-crossing, or before a model request while no batch is open), and
are probed there in one Redis round trip, in this fixed priority:

    STOP (recorded) → STEER → DRAIN → DISPATCH → AWAIT

Steer and drain suspend the turn (it continues in a next turn); dispatch and await end it.

Writers (`ControlPlane`) leave a durable record (tombstone, steer queue, drain key) and ring the
session's bell (a Pub/Sub message); a live turn hears it through its process's `BellHub`, so a
stop is noticed within one Redis round trip without polling, on one connection for every live
turn. The bell only wakes: the durable records are what a probe reads, so a ring that nobody
heard loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core._bells import CHECK, BellHub
from agent_core._errors import AgentError
from agent_core._keys import Keys
from agent_core._messages import UserKind, UserMessage, dump_message
from agent_core._store import map_redis_errors

__all__ = [
    "INTERRUPTED",
    "PRIORITY",
    "ControlPlane",
    "Signal",
    "TurnSignals",
    "checkpoint",
    "until_set",
]

log = logging.getLogger(__name__)

TOMBSTONE_TTL_S = 24 * 3600
"""A stop outlives a start event that arrives late by up to this long."""
WATCH_BLOCK_S = 2.0
"""How long a waiter waits for a ring before it reads the records again anyway (a lease's expiry
rings nothing), and how long a closing watcher may take to finish its last read."""
RING_QUEUE = 16
"""Rings a turn's watcher holds unread; past it, one check stands for the rest."""

T = TypeVar("T")


class Signal(StrEnum):
    """A reason to cut a turn."""

    STOP = "stop"
    """A person (or the kill switch) said stop: end now, start nothing new."""
    STEER = "steer"
    """A person redirected the analysis: suspend; the next turn carries the correction."""
    DRAIN = "drain"
    """The worker is shutting down: suspend; another worker resumes the turn."""
    DISPATCH = "dispatch"
    """Work was handed to sub-agents: end the turn; their reports resume the session."""
    AWAIT = "await"
    """A sub-agent asked its parent a question: end the turn until the answer arrives."""


PRIORITY: Final = (Signal.STOP, Signal.STEER, Signal.DRAIN, Signal.DISPATCH, Signal.AWAIT)
"""The order in which a cut asks; the first raised signal decides."""


class _Interrupted:
    def __repr__(self) -> str:
        return "INTERRUPTED"


INTERRUPTED: Final = _Interrupted()
"""Returned by `until_set` when the event won the race."""


def checkpoint() -> None:
    """Raise `CancelledError` if the current task has a cancellation pending.

    On Python 3.11, `asyncio.wait_for` (which redis-py wraps around socket I/O) can swallow a
    cancellation that lands just as the awaited operation finishes (CPython gh-86296, fixed in
    3.12). The runtime calls this at every event and cut, so an outside cancel (worker shutdown,
    a timeout around the run) is never lost for longer than one step.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def until_set(event: asyncio.Event, work: Coroutine[object, object, T]) -> T | _Interrupted:
    """Run `work` until it finishes or `event` is set, whichever comes first.

    When the event wins, `work` is cancelled and drained, and `INTERRUPTED` is returned. When the
    caller itself is cancelled, both are cancelled and the cancellation propagates. When `work`
    ends cancelled although the event was not set (something else cancelled what it awaited),
    that is an error, never mistaken for an interrupt.
    """
    loop = asyncio.get_running_loop()
    task = loop.create_task(work)  # owned here: cancelled and drained in `finally`
    waiter = loop.create_task(event.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, waiter):
            pending.cancel()
        await asyncio.wait({task, waiter})
    checkpoint()
    if task.cancelled():
        if event.is_set():
            return INTERRUPTED
        raise AgentError("the awaited work was cancelled without a stop or steer")
    return task.result()


class ControlPlane:
    """Records stops, steers and drains for sessions and turns (the writers' side)."""

    def __init__(self, redis: aioredis.Redis, keys: Keys | None = None) -> None:
        self._redis = redis
        self._keys = keys or Keys()

    def _ring(self, pipe: aioredis.client.Pipeline, session_id: str, note: str) -> None:
        pipe.publish(self._keys.bell(session_id), note)

    async def stop(self, session_id: str, turn_id: str, *, by: str = "") -> None:
        """Stop a turn, whether it is queued, running or not yet created (a tombstone)."""
        with map_redis_errors("record stop"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(
                    self._keys.tombstone(session_id, turn_id), by or "stop", ex=TOMBSTONE_TTL_S
                )
                self._ring(pipe, session_id, f"stop:{turn_id}")
                await pipe.execute()

    async def steer(self, session_id: str, content: str, *, author: str | None = None) -> None:
        """Queue a correction for the session's live turn; it is delivered at the next cut."""
        message = UserMessage(content=content, author=author, kind=UserKind.STEER)
        with map_redis_errors("queue steer"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.rpush(self._keys.steers(session_id), dump_message(message))
                pipe.expire(self._keys.steers(session_id), TOMBSTONE_TTL_S)
                self._ring(pipe, session_id, "steer")
                await pipe.execute()

    async def drain(self, session_id: str, turn_id: str) -> None:
        """Ask a live turn to suspend at its next cut so another worker can resume it."""
        with map_redis_errors("request drain"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(self._keys.drain(session_id, turn_id), "1", ex=TOMBSTONE_TTL_S)
                self._ring(pipe, session_id, f"drain:{turn_id}")
                await pipe.execute()


@dataclass(eq=False)
class TurnSignals:
    """The interrupt state of one live turn: in-process flags plus the Redis-side records.

    Attributes:
        stop: Set once a stop for this turn is accepted; never cleared.
        abort: Set when interruptible tools must stop now (a stop, or a steer when
            `steer_cancels_tools`); `abort_reason` says which.
    """

    redis: aioredis.Redis
    session_id: str
    turn_id: str
    keys: Keys = field(default_factory=Keys)
    steer_cancels_tools: bool = True
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    abort_reason: str = ""
    stopped_by: str = ""
    on_stop: Callable[[str], None] | None = None
    """Called once, synchronously, when a stop is accepted (the runtime notes it in its trace)."""
    on_steer: Callable[[], None] | None = None
    """Called, synchronously, when a steer is queued for the session: it waits for the next
    cut (and cancels the interruptible calls still running if `steer_cancels_tools`)."""
    bells: BellHub | None = None
    """Where the bell is heard: the process's hub for the client (`BellHub.of`) unless given."""
    _raised: set[Signal] = field(default_factory=set)
    _closing: bool = False
    _recheck: bool = False

    def raise_local(self, signal: Signal) -> None:
        """Raise a signal from inside the process (a tool's dispatch/await, a worker's drain)."""
        if signal is Signal.STOP:
            self.accept_stop("in-process stop")
        else:
            self._raised.add(signal)

    def accept_stop(self, by: str) -> None:
        """Record that a stop was accepted: nothing new starts from now on."""
        if not self.stop.is_set():
            self.stopped_by = by
            self.stop.set()
            if self.on_stop is not None:
                self.on_stop(by)
            self._abort(f"a stop ({by})" if by else "a stop")

    def _abort(self, reason: str) -> None:
        if not self.abort.is_set():
            self.abort_reason = reason
            self.abort.set()

    async def probe(self) -> Signal | None:
        """Read every signal in one round trip; return the first raised one in `PRIORITY`."""
        k = self.keys
        with map_redis_errors("probe signals"):
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.get(k.tombstone(self.session_id, self.turn_id))
                pipe.llen(k.steers(self.session_id))
                pipe.exists(k.drain(self.session_id, self.turn_id))
                tomb, steers, drain = await pipe.execute()
        if tomb is not None:
            self.accept_stop(tomb.decode() if isinstance(tomb, bytes) else str(tomb))
        raised = set(self._raised)
        if self.stop.is_set():
            raised.add(Signal.STOP)
        if steers:
            raised.add(Signal.STEER)
        if drain:
            raised.add(Signal.DRAIN)
        return next((s for s in PRIORITY if s in raised), None)

    @asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Hear the session's bell for the duration of the block.

        Rings arrive through the process's `BellHub` (one Redis connection for every live
        turn) into this turn's bounded queue; the watcher task reacts to them, one short read
        each. The watcher is stopped cooperatively (a closing mark in its queue) and, past a
        bound, cancelled; the shutdown is shielded (`asyncio.shield` rather than an anyio scope,
        which would absorb the caller's cancellation), so a second cancellation of the caller
        cannot leave the watcher running after its turn.
        """
        hub = self.bells or BellHub.of(self.redis, self.keys.prefix)
        rings: asyncio.Queue[str | None] = asyncio.Queue(RING_QUEUE)
        self._closing = False
        loop = asyncio.get_running_loop()
        watcher = loop.create_task(self._watch(rings))
        try:
            async with hub.listening(self.keys.bell(self.session_id), self._heard(rings)):
                yield
        finally:
            stopping = loop.create_task(self._stop_watcher(watcher, rings))
            try:
                await asyncio.shield(stopping)
            except asyncio.CancelledError:
                await asyncio.wait({stopping})  # bounded: finish the cleanup, then propagate
                raise

    def _heard(self, rings: asyncio.Queue[str | None]) -> Callable[[str], None]:
        def heard(note: str) -> None:
            try:
                rings.put_nowait(note)
            except asyncio.QueueFull:  # a flood of rings: one check reads what they all meant
                self._recheck = True

        return heard

    async def _stop_watcher(
        self, watcher: asyncio.Task[None], rings: asyncio.Queue[str | None]
    ) -> None:
        self._closing = True
        with contextlib.suppress(asyncio.QueueFull):
            rings.put_nowait(None)
        done, _ = await asyncio.wait({watcher}, timeout=WATCH_BLOCK_S)
        if not done:
            watcher.cancel()
            await asyncio.wait({watcher})
        if not watcher.cancelled() and watcher.exception() is not None:
            log.error("signal watcher failed", exc_info=watcher.exception())

    async def _watch(self, rings: asyncio.Queue[str | None]) -> None:
        """React to the session's rings until closed."""
        while not self._closing:
            note = await rings.get()
            if note is None:
                break
            checkpoint()
            if self._recheck and rings.empty():
                self._recheck, note = False, CHECK
            try:
                await self._on_ring(note)
            except RedisError as exc:  # the probes at every cut still read the records
                log.warning("signal watcher: %s", exc)

    async def _on_ring(self, note: str) -> None:
        if note == CHECK:  # rings may have gone unheard: read what they would have said
            await self._check()
        elif note == f"stop:{self.turn_id}":
            by = "stop"
            try:  # who stopped is on the tombstone; the ring alone is proof enough of a stop
                tomb = await self.redis.get(self.keys.tombstone(self.session_id, self.turn_id))
                by = tomb.decode() if isinstance(tomb, bytes) else str(tomb or by)
            except RedisError as exc:
                log.warning("stop rang, tombstone unreadable (%s): stopping anyway", exc)
            self.accept_stop(by)
        elif note == "steer":
            # Only a steer still queued counts: a ring can outlive its steer.
            if await self.redis.llen(self.keys.steers(self.session_id)):
                self._steered()
        # Rings for other turns of the session are stale wake-ups: the records decide.

    def _steered(self) -> None:
        if self.on_steer is not None:
            self.on_steer()
        if self.steer_cancels_tools:
            self._abort("a steer")

    async def _check(self) -> None:
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(k.tombstone(self.session_id, self.turn_id))
            pipe.llen(k.steers(self.session_id))
            tomb, steers = await pipe.execute()
        if tomb is not None:
            self.accept_stop(tomb.decode() if isinstance(tomb, bytes) else str(tomb))
        elif steers:
            self._steered()
