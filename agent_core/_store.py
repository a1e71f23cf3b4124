"""The session store in Redis: closed histories, the open batch's journal, turn start.

Contract (docs/design.md §Invariants I1): the persisted history of a session is always closed.
Messages are appended only in closed groups (a final answer, or an assistant message together with
every one of its tool results, in one `MULTI`). While a batch is open its assistant message and each
result, as it arrives, go to a per-turn journal instead, so a resumed turn need not re-run tools
that already finished.

Reads go through the store's `HistoryCache` (agent_core._history_cache): a turn that begins
reads only the items appended since this process last read or wrote the session, whoever
appended them, and gets the whole list again only after a rewrite (`replace`, which moves the
session's history generation in its transaction). The history a turn sees is exactly what Redis
holds, as one atomic read with the turn's start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, WatchError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agent_core._errors import StoreError
from agent_core._history import CheckedPrefix
from agent_core._history_cache import CachedHistory, HistoryCache, digest, read_from
from agent_core._keys import Keys
from agent_core._lua import register_lua
from agent_core._messages import (
    AssistantMessage,
    Message,
    ToolMessage,
    UserMessage,
    dump_message,
    load_message,
)

__all__ = ["Fence", "HistoryStore", "TurnStart", "map_redis_errors"]

TURN_KEY_TTL_S = 7 * 24 * 3600
"""How long per-turn bookkeeping (begun marker, journal) is kept."""
FENCED_WRITE_ATTEMPTS = 5
"""A fenced write whose WATCH saw the key change (a heartbeat) is checked and tried again."""


@contextmanager
def map_redis_errors(action: str) -> Iterator[None]:
    """Translate redis-py exceptions into `StoreError`."""
    try:
        yield
    except RedisError as exc:
        raise StoreError(f"{action}: {type(exc).__name__}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Fence:
    """A condition on every history write of a turn: its writer still holds the turn.

    The write happens only while `key` holds a value starting with `"<token>|"` (the caller's
    lease); a writer whose lease was taken over, a paused "zombie", is refused with
    `StoreError` and changes nothing (docs/design.md §Invariants I7).
    """

    key: str
    token: int

    def holds(self, value: bytes | str | None) -> bool:
        """Whether `value` (the key's current value) is this writer's lease."""
        text = value.decode() if isinstance(value, bytes) else (value or "")
        return text.startswith(f"{self.token}|")


@dataclass(frozen=True, slots=True)
class TurnStart:
    """What `HistoryStore.begin_turn` found."""

    tombstoned: bool
    """A stop was recorded for the turn before it started."""
    history: list[Message]
    """The session's history including this turn's inputs and absorbed steers."""
    steers: int
    """How many queued steer messages were moved into the history."""
    checked: CheckedPrefix | None = None
    """The validator's state after all of `history`, when the store knows it (it validated what
    it cached); None when the history breaks a rule or was not validated."""


class HistoryStore:
    """Reads and writes session histories and open-batch journals.

    Args:
        redis: The client every read and write goes through.
        keys: The key layout (its prefix).
        cache: The histories this store read or wrote (default: a `HistoryCache` of the default
            bounds, one per store).
    """

    def __init__(
        self, redis: aioredis.Redis, keys: Keys | None = None, cache: HistoryCache | None = None
    ) -> None:
        self._redis = redis
        self._keys = keys or Keys()
        self._cache = cache if cache is not None else HistoryCache()
        self._begin = register_lua(redis, "agent_core", "store_begin_turn")

    @property
    def cache(self) -> HistoryCache:
        """The histories this store keeps between reads."""
        return self._cache

    async def begin_turn(
        self,
        session_id: str,
        turn_id: str,
        inputs: Sequence[UserMessage] = (),
        fence: Fence | None = None,
    ) -> TurnStart:
        """Start a turn: check its tombstone, append inputs and queued steers, load history.

        Raises:
            StoreError: Redis failed, or `fence` no longer holds.
        """
        k = self._keys
        keys = [
            k.tombstone(session_id, turn_id),
            k.begun(session_id, turn_id),
            k.history(session_id),
            k.steers(session_id),
            k.drain(session_id, turn_id),
            fence.key if fence else k.history(session_id),
            k.history_generation(session_id),
        ]
        cached = self._cache.get(session_id)
        token = str(fence.token) if fence else ""
        args: list[str | int] = [TURN_KEY_TTL_S, token, *read_from(cached)]
        args += [dump_message(m) for m in inputs]
        with map_redis_errors("begin turn"):
            reply = await self._begin(keys=keys, args=args)
        if reply[0] == 2:
            raise StoreError(f"begin turn {turn_id}: fenced (the lease has moved on)")
        if reply[0] == 1:
            return TurnStart(tombstoned=True, history=[], steers=0)
        _, raw, steers, generation, start = reply
        base = cached if int(start) else None  # the script read on from the cached length
        entry = self._refreshed(session_id, base, int(generation), raw)
        return TurnStart(
            tombstoned=False,
            history=list(entry.messages),
            steers=int(steers),
            checked=entry.checked,
        )

    async def load(self, session_id: str) -> list[Message]:
        """Return the session's persisted history (reading only what is new since cached)."""
        cached = self._cache.get(session_id)
        if cached is not None and cached.length:  # from the last cached item on: still it?
            generation, raw = await self._read(session_id, cached.length - 1)
            if generation == cached.generation and raw and digest(raw[0]) == cached.digest:
                return list(self._refreshed(session_id, cached, generation, raw[1:]).messages)
        generation, raw = await self._read(session_id, 0)
        return list(self._refreshed(session_id, None, generation, raw).messages)

    async def _read(self, session_id: str, start: int) -> tuple[int, list[bytes]]:
        """The history generation and the items from `start` on, read in one transaction."""
        with map_redis_errors("load history"):
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.get(self._keys.history_generation(session_id))
                pipe.lrange(self._keys.history(session_id), start, -1)
                generation, raw = await pipe.execute()
        return _int(generation), raw

    def _refreshed(
        self,
        session_id: str,
        base: CachedHistory | None,
        generation: int,
        raw: Sequence[bytes | str],
    ) -> CachedHistory:
        """Cache what a read returned: the items after `base`, or the whole list (None)."""
        entry = CachedHistory.read(generation, raw) if base is None else base.extended(raw)
        self._cache.put(session_id, entry)
        return entry

    async def _write(
        self, action: str, fill: Callable[[Pipeline], None], fence: Fence | None
    ) -> list[Any]:
        """Run the commands `fill` queues as one transaction, only while `fence` holds.

        The fence key is WATCHed: a lease that moves between the check and the EXEC aborts
        the transaction, so a refused writer changes nothing. The holder's own heartbeat also
        touches the key (it renews the expiry); an aborted transaction is therefore checked
        again and retried while the token still holds, a few times at most. redis-py also
        reports a connection lost while watching as a `WatchError`; that one is not retried:
        its EXEC may have been applied, and a history write must never happen twice.

        Returns:
            The answers of the commands `fill` queued, in order.
        """
        for _ in range(FENCED_WRITE_ATTEMPTS):
            with map_redis_errors(action):
                async with self._redis.pipeline(transaction=True) as pipe:
                    if fence is not None:
                        await pipe.watch(fence.key)
                        if not fence.holds(await pipe.get(fence.key)):
                            raise StoreError(f"{action}: fenced (the lease has moved on)")
                        pipe.multi()  # type: ignore[no-untyped-call]
                    fill(pipe)
                    try:
                        return list(await pipe.execute())
                    except WatchError as exc:
                        if _connection_lost(exc):  # EXEC may have been applied: never twice
                            raise StoreError(f"{action}: connection lost mid-write") from exc
                        continue  # the key changed: check the token again
        raise StoreError(f"{action}: fenced (the lease kept moving meanwhile)")

    async def replace(
        self, session_id: str, messages: Sequence[Message], fence: Fence | None = None
    ) -> None:
        """Overwrite the history (after a repair) atomically, moving its generation."""
        key = self._keys.history(session_id)
        raw = [dump_message(m) for m in messages]

        def fill(pipe: Pipeline) -> None:
            pipe.delete(key)
            if raw:
                pipe.rpush(key, *raw)
            pipe.incr(self._keys.history_generation(session_id))

        answers = await self._write("replace history", fill, fence)
        entry = CachedHistory(generation=int(answers[-1])).extended(raw, messages)
        self._cache.put(session_id, entry)

    async def append_closed(
        self,
        session_id: str,
        turn_id: str,
        messages: Sequence[Message],
        fence: Fence | None = None,
    ) -> None:
        """Append one closed group (final answer, or a call batch with all its results)."""
        raw = [dump_message(m) for m in messages]

        def fill(pipe: Pipeline) -> None:
            pipe.rpush(self._keys.history(session_id), *raw)
            pipe.delete(self._keys.journal(session_id, turn_id))
            pipe.get(self._keys.history_generation(session_id))

        answers = await self._write("append history", fill, fence)
        self._cache.appended(session_id, int(answers[0]), _int(answers[-1]), messages, raw)

    async def suspend(
        self,
        session_id: str,
        turn_id: str,
        records: Mapping[str, str],
        expires_at: float,
        results: Sequence[ToolMessage] = (),
        fence: Fence | None = None,
    ) -> None:
        """Suspend the turn's open batch for approvals: `records` are JSON, by call id.

        `results` (the batch's calls that ran) are written to the journal with it.

        The batch stays in the turn's journal; the session's `suspended` key names the turn.
        """
        k = self._keys

        def fill(pipe: Pipeline) -> None:
            pipe.hset(k.approvals(session_id), mapping=_fields(records))
            pipe.expire(k.approvals(session_id), TURN_KEY_TTL_S)
            for result in results:  # the journal is best effort: the suspension is not
                pipe.hset(k.journal(session_id, turn_id), result.call_id, dump_message(result))
            pipe.set(k.suspended(session_id), turn_id, ex=TURN_KEY_TTL_S)
            pipe.delete(k.closing(session_id), k.continuation(session_id))
            pipe.expire(k.journal(session_id, turn_id), TURN_KEY_TTL_S)

        # Indexed first (another slot: outside the transaction), so a request that exists can
        # always expire; an entry without a request is harmless.
        with map_redis_errors("index approvals"):
            await self._redis.zadd(k.approvals_due, {session_id: expires_at}, lt=True)
        await self._write("suspend batch", fill, fence)

    async def update_approvals(
        self, session_id: str, records: Mapping[str, str], fence: Fence | None = None
    ) -> None:
        """Overwrite approval records (JSON, by call id), while `fence` holds."""
        key = self._keys.approvals(session_id)

        def fill(pipe: Pipeline) -> None:
            pipe.hset(key, mapping=_fields(records))

        await self._write("update approvals", fill, fence)

    async def close_suspended(
        self,
        session_id: str,
        suspended_turn: str,
        messages: Sequence[Message],
        records: Mapping[str, str],
        fence: Fence | None = None,
    ) -> None:
        """Append the closed group of a suspended batch; end the suspension, keep the records.

        `records` are the final approval records (JSON, by call id), kept for the audit.
        """
        k = self._keys
        raw = [dump_message(m) for m in messages]

        def fill(pipe: Pipeline) -> None:
            pipe.rpush(k.history(session_id), *raw)
            pipe.delete(
                k.journal(session_id, suspended_turn),
                k.suspended(session_id),
                k.closing(session_id),
                k.continuation(session_id),
            )
            if records:
                pipe.hset(k.approvals(session_id), mapping=_fields(records))
            pipe.get(k.history_generation(session_id))

        answers = await self._write("close suspended batch", fill, fence)
        self._cache.appended(session_id, int(answers[0]), _int(answers[-1]), messages, raw)
        with map_redis_errors("index approvals"):
            await self._redis.zrem(k.approvals_due, session_id)

    async def journal_batch(
        self,
        session_id: str,
        turn_id: str,
        message: AssistantMessage,
        fence: Fence | None = None,
    ) -> None:
        """Record the assistant message whose calls are about to run."""
        key = self._keys.journal(session_id, turn_id)

        def fill(pipe: Pipeline) -> None:
            pipe.delete(key)
            pipe.hset(key, "batch", dump_message(message))
            pipe.expire(key, TURN_KEY_TTL_S)

        await self._write("journal batch", fill, fence)

    async def journal_result(
        self, session_id: str, turn_id: str, result: ToolMessage, fence: Fence | None = None
    ) -> None:
        """Record one finished call of the open batch as it arrives."""
        key = self._keys.journal(session_id, turn_id)

        def fill(pipe: Pipeline) -> None:
            pipe.hset(key, result.call_id, dump_message(result))

        await self._write("journal result", fill, fence)

    async def journal(
        self, session_id: str, turn_id: str
    ) -> tuple[AssistantMessage | None, dict[str, ToolMessage]]:
        """Return the open batch of a turn and the results journaled so far."""
        with map_redis_errors("read journal"):
            raw = await self._redis.hgetall(self._keys.journal(session_id, turn_id))
        batch: AssistantMessage | None = None
        results: dict[str, ToolMessage] = {}
        for value in raw.values():
            message = load_message(value)
            if isinstance(message, AssistantMessage):
                batch = message
            elif isinstance(message, ToolMessage):
                results[message.call_id] = message
        return batch, results


def _int(value: bytes | str | int | None) -> int:
    """A counter's value as Redis answers it (None: the key does not exist, generation 0)."""
    return int(value) if value is not None else 0


def _fields(records: Mapping[str, str]) -> dict[Any, Any]:
    """Hash fields in the shape redis-py's `hset` is typed for (its key type is invariant)."""
    return dict(records)


def _connection_lost(exc: WatchError) -> bool:
    """Whether redis-py raised `exc` for a dropped connection rather than an aborted EXEC."""
    cause = exc.__cause__ or exc.__context__
    return isinstance(cause, RedisConnectionError | RedisTimeoutError | OSError) or (
        "occurred while watching" in str(exc)
    )
