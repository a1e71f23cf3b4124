"""Concurrent calls of one Lua script sent together: one connection, one write, one read per batch.

The ingress calls its submit script once per webhook, and its requests arrive together: every
socket the event loop finds readable in one turn starts a request, and they all reach the submit
in the next. Sent one by one, each call is a checkout, a system call to write that wakes Redis
and a read that wakes the loop, all on the webhook's own CPU. A `ScriptBatch` gathers the calls
made in one turn of the loop and sends them as one pipelined write on one pooled connection,
then reads their replies in order (`bench/ingress.py`).
redis-py has no such automatic pipelining, and its `Pipeline` would pack and parse every command
through its own per-command machinery, which is the cost saved here.

Each call still gets exactly its own reply or its own error: a script error (`ResponseError`)
is that call's, a Redis that lost its scripts is given this one again and the calls it refused
are sent again, and a connection that fails mid-batch is dropped and the calls not yet answered
are sent once more on another (a submit that did run is then a duplicate by its dedupe markers,
never a second event); a second failure is every unanswered call's `ConnectionError`. A caller
that stops waiting (its deadline) leaves the batch to finish for the others, and a batch no
caller waits for any more is abandoned, its connection dropped, as redis-py drops a cancelled
command's. The batch's task is the `ScriptBatch`'s own, and `aclose` waits for those in flight.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError, NoScriptError, ResponseError, TimeoutError

__all__ = ["ScriptBatch"]

_Call = tuple[bytes, "asyncio.Future[Any]"]
_TRIES = 2
"""Rounds a batch may lose to a failed connection, and reloads of the script it may need."""


@dataclass
class _Batch:
    """The calls of one turn of the loop, and the task that sends them once flushed."""

    calls: list[_Call] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    def unwanted(self) -> bool:
        """No caller waits for a reply any more."""
        return all(reply.done() for _, reply in self.calls)


class ScriptBatch:
    """Calls of `script` on `redis`'s pool, batched per turn of the event loop (see the module)."""

    def __init__(self, redis: aioredis.Redis, script: AsyncScript) -> None:
        """`redis` must be a client over one pool (not a cluster's, not a single connection)."""
        self._pool = redis.connection_pool
        self._script = script
        self._pending: _Batch | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    async def __call__(self, keys: list[str], args: list[str | int]) -> Any:
        """The script's reply to `keys` and `args`, as `script(keys=keys, args=args)` gives it.

        A caller cancelled (its deadline) takes its call out of the batch; when no caller of a
        batch waits any more the batch is abandoned as a cancelled command is, its connection
        dropped, so a stalled Redis holds no connection for nobody.

        Raises:
            ResponseError: The script failed (this call's error).
            ConnectionError: Redis could not be reached, twice.
        """
        loop = asyncio.get_running_loop()
        # hiredis packs the command itself (redis-py's packer encodes each argument in Python
        # first; its encoding is UTF-8, as hiredis's is). Its stub types the tuple as of one.
        command = ("EVALSHA", self._script.sha, len(keys), *keys, *args)
        packed = hiredis.pack_command(command)  # type: ignore[arg-type, unused-ignore]
        reply: asyncio.Future[Any] = loop.create_future()
        batch = self._pending
        if batch is None:
            batch = self._pending = _Batch()
            loop.call_soon(self._flush)
        batch.calls.append((packed, reply))
        try:
            return await reply
        except asyncio.CancelledError:
            if batch.task is not None and batch.unwanted():
                batch.task.cancel()
            raise

    async def aclose(self) -> None:
        """Wait for the batches in flight (their callers get their replies)."""
        while self._flushing:
            await asyncio.gather(*self._flushing, return_exceptions=True)

    def _flush(self) -> None:
        batch, self._pending = self._pending, None
        if batch is None or batch.unwanted():
            return  # every caller left before it was sent
        live = [call for call in batch.calls if not call[1].done()]
        batch.task = asyncio.get_running_loop().create_task(self._send(live))
        self._flushing.add(batch.task)
        batch.task.add_done_callback(self._flushing.discard)

    async def _send(self, batch: list[_Call]) -> None:
        """Answer every call of `batch`: rounds until none is left, within `_TRIES` of each kind.

        A connection failure and a NOSCRIPT refusal are counted apart (a failover brings both:
        the old connection fails, the new primary has no scripts). Any other error, such as a
        script that does not compile, is the unanswered calls' own; only a cancellation (the
        callers all gone, or shutdown) leaves the task as an exception.
        """
        unanswered, failures, reloads = batch, 0, 0
        try:
            while unanswered:
                try:
                    refused = await self._round(unanswered)
                    if refused:
                        if reloads == _TRIES:
                            _fail(refused, ConnectionError("Redis kept refusing the script"))
                            return
                        reloads += 1
                        await self._load()  # a restarted or failed-over Redis: load it again
                    unanswered = refused
                except (ConnectionError, TimeoutError, OSError) as exc:
                    unanswered = [call for call in unanswered if not call[1].done()]
                    failures += 1
                    if failures == _TRIES:
                        _fail(unanswered, ConnectionError(f"the script batch failed: {exc}"))
                        return
                except Exception as exc:
                    _fail(unanswered, exc)
                    return
        except BaseException as exc:  # cancelled: no caller waits, or the process is ending
            _fail(unanswered, ConnectionError(f"the script batch was abandoned: {exc!r}"))
            raise

    async def _round(self, calls: list[_Call]) -> list[_Call]:
        """Send `calls` on one connection, answer each; return those refused with NOSCRIPT.

        A connection or timeout error propagates, the connection dropped; the calls answered
        before it are done futures, and `_send` sends only the others again.
        """
        conn = await self._pool.get_connection()  # type: ignore[no-untyped-call, unused-ignore]
        try:
            await conn.send_packed_command([packed for packed, _ in calls])
            refused: list[_Call] = []
            for call in calls:
                try:
                    reply = await conn.read_response()
                except NoScriptError:
                    refused.append(call)
                    continue
                except ResponseError as exc:
                    _answer(call[1], exc)
                    continue
                _answer(call[1], reply)
            return refused
        except BaseException:
            await conn.disconnect()
            raise
        finally:
            await self._pool.release(conn)

    async def _load(self) -> None:
        conn = await self._pool.get_connection()  # type: ignore[no-untyped-call, unused-ignore]
        try:
            await conn.send_command("SCRIPT", "LOAD", self._script.script)
            await conn.read_response()
        finally:
            await self._pool.release(conn)


def _answer(future: asyncio.Future[Any], result: Any) -> None:
    if future.done():
        return  # its caller stopped waiting, or an earlier round answered it
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)


def _fail(calls: list[_Call], error: Exception) -> None:
    for _, future in calls:
        _answer(future, error)
