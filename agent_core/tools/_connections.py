"""The HTTP connections the worker's tools share, and the wait for one kept off a call's clock.

A tool call's `timeout_s` is the time its dependency gets to answer. When a worker runs a
thousand analyses, their calls can outnumber the connections the worker allows itself; waiting
for one of them is the worker's own queue, not the dependency being slow, so it must neither
count against the call's timeout (a call that never left the process answered "timed out") nor
go on forever. `ConnectionSlots` admits at most `limit` requests at once through the client it
builds (whose pool holds exactly that many, so httpx itself never waits); a call waits for a slot
for at most `wait_s`, with its deadline paused meanwhile (`off_the_clock`), and one that got none
fails saying so. The batch (`agent_core._batch`) sets the deadline `off_the_clock` pauses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    asynccontextmanager,
    contextmanager,
    nullcontext,
    suppress,
)
from contextvars import ContextVar

import httpx

from agent_core._errors import ToolFailed

__all__ = ["DEFAULT_WAIT_S", "ConnectionSlots", "held", "off_the_clock", "on_the_clock"]

DEFAULT_WAIT_S = 30.0
"""How long a call waits for a free connection before it fails saying it could not get one."""

_DEADLINE: ContextVar[asyncio.Timeout | None] = ContextVar("tool_call_deadline", default=None)


@contextmanager
def on_the_clock(deadline: asyncio.Timeout) -> Iterator[None]:
    """Make `deadline` the one `off_the_clock` pauses, for what runs (and is started) inside."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


@asynccontextmanager
async def off_the_clock() -> AsyncIterator[None]:
    """Pause the running call's deadline for the block; it resumes with the time it had left.

    Outside a tool call (no deadline set) the block simply runs. A deadline that has already
    fired is left as it is.
    """
    deadline = _DEADLINE.get()
    when = None if deadline is None or deadline.expired() else deadline.when()
    if deadline is None or when is None:  # no call's deadline, or one already paused or fired
        yield
        return
    loop = asyncio.get_running_loop()
    left = when - loop.time()
    deadline.reschedule(None)
    try:
        yield
    finally:
        # A call cancelled twice may outlive its deadline's block, which then refuses changes.
        with suppress(RuntimeError):
            if not deadline.expired():
                deadline.reschedule(loop.time() + left)


class ConnectionSlots:
    """At most `limit` requests in flight through one HTTP client; the rest wait their turn.

    Build the client with `client()`, and send every request inside `held()`.
    """

    def __init__(self, limit: int, *, wait_s: float = DEFAULT_WAIT_S) -> None:
        if limit < 1 or not wait_s > 0:
            raise ValueError(
                f"connection slots need a positive limit and wait, not {limit}, {wait_s}"
            )
        self.limit = limit
        self.wait_s = wait_s
        self.waited = 0
        """Requests that found every slot taken and waited (whether they then got one or not)."""
        self.refused = 0
        """Requests that got no slot within `wait_s`."""
        self._free = asyncio.Semaphore(limit)

    def client(self, *, keepalive: bool = True) -> httpx.AsyncClient:
        """An HTTP client whose pool holds `limit` connections (none idle without `keepalive`)."""
        kept = self.limit if keepalive else 0
        limits = httpx.Limits(max_connections=self.limit, max_keepalive_connections=kept)
        return httpx.AsyncClient(limits=limits)

    @asynccontextmanager
    async def held(self, what: str) -> AsyncIterator[None]:
        """Hold a slot for the block, waiting off the call's clock for one.

        Raises:
            ToolFailed: No slot came free within `wait_s` (not retryable: a retry would only wait
                in the same queue again); the message names `what` and says why.
        """
        if self._free.locked():
            self.waited += 1
            async with off_the_clock():
                try:
                    async with asyncio.timeout(self.wait_s):
                        await self._free.acquire()
                except TimeoutError:
                    self.refused += 1
                    raise ToolFailed(
                        f"{what} was not sent: could not get a connection within "
                        f"{self.wait_s:g} s (all {self.limit} of this worker's tool connections "
                        "were in use)"
                    ) from None
        else:
            await self._free.acquire()
        try:
            yield
        finally:
            self._free.release()


def held(slots: ConnectionSlots | None, what: str) -> AbstractAsyncContextManager[None]:
    """`slots.held(what)`, or nothing to wait for when the tool was built without slots."""
    return nullcontext() if slots is None else slots.held(what)
