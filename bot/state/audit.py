"""The audit trail: what happened in a session, in order, with who did it.

Contract:
- One Redis stream per session (`BotKeys.audit`), one field `event` holding an `AuditEvent` as
  JSON; capped (`XADD MAXLEN ~`) and expiring (`EXPIRE`, refreshed by every write), both set by
  `CHATOPS_AUDIT_MAXLEN` and `CHATOPS_AUDIT_RETENTION_S`.
- Recording never raises into the caller's path: a failed write is logged and counted
  (`AuditLog.failures`); the analysis, the ingress and the desks go on. A cancellation still
  propagates, once the write it joined has ended (the write itself is not cut short).
- Writes are committed in groups: what every caller of one process records while a write is
  being prepared goes to Redis in one pipeline (a worker with hundreds of live analyses
  records events from all of them at once; one round trip each was 6% of its CPU,
  bench/load.py). A caller still returns only once its own events are written.
- `ts` is when the thing happened, which is not always when it was written: the cut probes of
  a turn are written once it has run, stamped with the time of their place in it. Readers
  order by `ts`; events of equal `ts` keep the stream's order.
- Texts (model output, tool arguments and results) are redacted and cut to `TEXT_CHARS`.

Kinds and their `data`: `turn_start` {inputs}; `model_request` {n, messages};
`model_response` {text, calls, prompt_tokens, completion_tokens}; `tool_call` {id, name,
arguments}; `tool_result` {id, name, status, content, duration_s}; `balance` {balance};
`cut` {site, signal, balance}; `steer` {text}; `stop` {}; `approval` {call_id, tool, verdict};
`killswitch` {on}; `card` {status}; `settle` {reason, final_event_id, prompt_tokens,
completion_tokens}. People's actions carry `who`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field

from agent_core import (
    BalanceLedger,
    ChatModel,
    DeltaSink,
    EventSink,
    Message,
    ModelResponse,
    RunDiagnostics,
    RunEvent,
    StoreError,
    ToolCall,
    Toolset,
    map_redis_errors,
    redact,
)
from bot.keys import BotKeys

if TYPE_CHECKING:
    from bot.settings import Settings

__all__ = [
    "DEFAULT_MAXLEN",
    "DEFAULT_RETENTION_S",
    "TEXT_CHARS",
    "AuditEvent",
    "AuditLog",
    "AuditedModel",
    "TurnAudit",
    "clip",
    "in_analysis",
    "read_audit",
]

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 5.0
"""A group's write gives up after this long (counted and logged as failures): a cancelled
caller waits for the write it joined, and neither may hang on a stalled Redis."""
DEFAULT_MAXLEN = 10_000
"""Entries kept per session (approximately: Redis trims whole macro nodes)."""
DEFAULT_RETENTION_S = 30 * 24 * 3600
"""How long a session's audit outlives its last event."""
TEXT_CHARS = 2_000
"""Characters kept of one text (a model answer, a tool's arguments or result)."""


def clip(text: str) -> str:
    """Redact secrets in `text`, then cut it to `TEXT_CHARS` (marked with an ellipsis)."""
    text = redact(text)
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


class AuditEvent(BaseModel):
    """One thing that happened in a session."""

    model_config = ConfigDict(frozen=True)

    ts: float
    """Unix time (seconds) it happened."""
    session: str
    turn: str
    """The turn it belongs to; empty for a person's action the ingress took in (a steer, a
    press, a command), which names no turn."""
    kind: str
    who: str = ""
    """The person (or operator) who did it, for people's actions."""
    data: dict[str, Any] = Field(default_factory=dict)


def in_analysis(turn: str, root: str) -> bool:
    """Whether `turn` is `root` or one of its follow-ups (`root.1`, `root.1.2`, …)."""
    return turn == root or turn.startswith(root + ".")


class AuditLog:
    """Writes and reads the sessions' audit streams."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys | None = None,
        *,
        maxlen: int = DEFAULT_MAXLEN,
        retention_s: int = DEFAULT_RETENTION_S,
    ) -> None:
        self._redis = redis
        self._keys = keys or BotKeys()
        self._maxlen = maxlen
        self._retention_s = retention_s
        self.failures = 0
        """Events whose write failed (each group was logged and dropped)."""
        self._pending: list[AuditEvent] = []
        self._writing: asyncio.Task[None] | None = None
        """The group write that will take what is pending (None: the next caller starts one)."""

    @property
    def maxlen(self) -> int:
        """Each session's trail is capped at about this many events (`XADD MAXLEN ~`)."""
        return self._maxlen

    @property
    def retention_s(self) -> int:
        """A trail expires this long after its last write."""
        return self._retention_s

    @classmethod
    def from_settings(cls, redis: aioredis.Redis, keys: BotKeys, settings: Settings) -> AuditLog:
        """The audit log with the configured cap and retention."""
        return cls(
            redis, keys, maxlen=settings.audit_maxlen, retention_s=settings.audit_retention_s
        )

    async def record(self, event: AuditEvent) -> None:
        """Append one event (one pipelined round trip); never raises but a cancellation."""
        await self.record_many((event,))

    async def record_many(self, events: Iterable[AuditEvent]) -> None:
        """Append events in order, in one pipelined round trip shared with other callers.

        Never raises but a cancellation (module docstring).
        """
        batch = list(events)
        if not batch:
            return
        self._pending.extend(batch)
        if self._writing is None or self._writing.done():  # done: cancelled before it ran
            self._writing = asyncio.get_running_loop().create_task(self._write_pending())
        writing = self._writing
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                return  # the write was cancelled, not this caller (it counted the loss)
            await asyncio.wait({writing})  # bounded (`WRITE_TIMEOUT_S`): none left running
            raise

    async def _write_pending(self) -> None:
        """Write what was recorded until this task first ran (callers of one loop tick)."""
        batch, self._pending = self._pending, []
        self._writing = None  # later callers start the next group
        try:
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await self._write(batch)
        except (StoreError, OSError, TimeoutError) as exc:
            self.failures += len(batch)
            log.warning("audit: %d event(s) of %s not recorded: %s", len(batch), batch[0].kind, exc)
        except asyncio.CancelledError:
            self.failures += len(batch)
            log.warning(
                "audit: %d event(s) of %s not recorded: cancelled", len(batch), batch[0].kind
            )
            raise

    async def _write(self, batch: list[AuditEvent]) -> None:
        with map_redis_errors("audit"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for event in batch:
                    key = self._keys.audit(event.session)
                    pipe.xadd(
                        key,
                        {"event": event.model_dump_json()},
                        maxlen=self._maxlen,
                        approximate=True,
                    )
                for key in {self._keys.audit(e.session) for e in batch}:
                    pipe.expire(key, self._retention_s)
                await pipe.execute()

    async def read(self, session_id: str, turn_id: str | None = None) -> list[AuditEvent]:
        """The session's events in order; `turn_id`: only that analysis's.

        An analysis is the turn and its follow-ups, plus the people's actions (which name no
        turn) that came while it went on, from its first event to its last.

        Raises:
            StoreError: Redis could not be read.
        """
        with map_redis_errors("read audit"):
            entries: Any = await self._redis.xrange(self._keys.audit(session_id))
        events = [AuditEvent.model_validate_json(fields[b"event"]) for _, fields in entries]
        events.sort(key=lambda e: e.ts)  # stable: the stream's order on ties
        return events if turn_id is None else _of_analysis(events, turn_id)

    def event(self, session: str, turn: str, kind: str, who: str = "", **data: Any) -> AuditEvent:
        """An event happening now (a convenience for the recording sites)."""
        return AuditEvent(ts=time.time(), session=session, turn=turn, kind=kind, who=who, data=data)


def _of_analysis(events: Sequence[AuditEvent], root: str) -> list[AuditEvent]:
    own = [e.ts for e in events if in_analysis(e.turn, root)]
    if not own:
        return []
    first, last = own[0], own[-1]
    return [
        e for e in events if in_analysis(e.turn, root) or (not e.turn and first <= e.ts <= last)
    ]


async def read_audit(
    redis: aioredis.Redis,
    session_id: str,
    turn_id: str | None = None,
    keys: BotKeys | None = None,
) -> list[AuditEvent]:
    """The session's audit events in order (see `AuditLog.read`).

    Raises:
        StoreError: Redis could not be read.
    """
    return await AuditLog(redis, keys).read(session_id, turn_id)


_CUT_AFTER_S = 1e-6
"""A probe that found nothing is stamped this long after the event it followed."""

_CURRENT: ContextVar[TurnAudit | None] = ContextVar("chatops_turn_audit", default=None)
"""The turn whose model requests `AuditedModel` records: the runtime shares one model among
every turn of a worker and tells it no turn, and the context follows the turn's task into the
task the runtime makes for each request."""


def _call(call: ToolCall) -> dict[str, str]:
    return {"id": call.id, "name": call.name, "arguments": clip(call.arguments)}


class TurnAudit:
    """Records one turn's run: its events (as the run's sink), model requests, cut probes.

    Balance changes are counted from the events the sink sees, with the runtime's own ledger
    rules (`agent_core._ledger`).
    """

    def __init__(
        self,
        audit: AuditLog,
        session: str,
        turn: str,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._audit, self.session, self.turn = audit, session, turn
        self._clock = clock
        self._wall0, self._mono0 = clock(), monotonic()
        self._seen = [self._wall0]
        """When the n-th event of the run was seen (0: the run's start)."""
        self._ledger = BalanceLedger()
        self._called: dict[str, float] = {}
        self._requests = 0

    def _event(self, kind: str, ts: float, **data: Any) -> AuditEvent:
        return AuditEvent(ts=ts, session=self.session, turn=self.turn, kind=kind, data=data)

    @contextmanager
    def current(self) -> Iterator[None]:
        """Make this the turn `AuditedModel` records requests for, in this context."""
        token = _CURRENT.set(self)
        try:
            yield
        finally:
            _CURRENT.reset(token)

    async def start(self, inputs: int) -> None:
        """The turn starts with `inputs` new messages."""
        await self._audit.record(self._event("turn_start", self._wall0, inputs=inputs))

    async def sink(self, event: RunEvent) -> None:
        """The run's event sink: tool calls, tool results, and the balance they move."""
        now = self._clock()
        self._seen.append(now)
        if event.partial:
            return
        recorded = []
        for call in event.calls:
            self._called[call.id] = now
            recorded.append(self._event("tool_call", now, **_call(call)))
        for response in event.responses:
            started = self._called.pop(response.call_id, None)
            recorded.append(
                self._event(
                    "tool_result",
                    now,
                    id=response.call_id,
                    name=response.name,
                    status=response.status.value,
                    content=clip(response.content),
                    duration_s=None if started is None else round(now - started, 3),
                )
            )
        before = self._ledger.balance
        self._ledger.observe(event)
        if self._ledger.balance != before:
            recorded.append(self._event("balance", now, balance=self._ledger.balance))
        await self._audit.record_many(recorded)

    def before(self, sink: EventSink) -> EventSink:
        """A sink that records each event here, then hands it to `sink` (a progress card)."""

        async def both(event: RunEvent) -> None:
            await self.sink(event)  # first: it never raises, so it sees every event
            await sink(event)

        return both

    async def request(self, messages: int) -> None:
        """A model request with `messages` messages is sent."""
        self._requests += 1
        n = self._requests
        await self._audit.record(
            self._event("model_request", self._clock(), n=n, messages=messages)
        )

    async def response(self, response: ModelResponse) -> None:
        """The model answered (recorded even if a stop then drops the answer: it was paid for)."""
        message = response.message
        await self._audit.record(
            self._event(
                "model_response",
                self._clock(),
                text=clip(message.content),
                calls=[_call(c) for c in message.tool_calls],
                prompt_tokens=response.usage.prompt_tokens,
                completion_tokens=response.usage.completion_tokens,
            )
        )

    async def finish(self, diagnostics: RunDiagnostics) -> None:
        """Record the run's cut probes, each at its place in the run.

        A probe that took a signal is stamped when the runtime noted the cut; one that found
        nothing, just after the event it followed.
        """
        taken = iter([e.at for e in diagnostics.trace if e.kind == "cut"])
        cuts = []
        for probe in diagnostics.probes:
            if probe.found is not None and (at := next(taken, None)) is not None:
                ts = self._wall0 + (at - self._mono0)
            else:
                ts = self._seen[min(probe.event_index, len(self._seen) - 1)] + _CUT_AFTER_S
            signal = probe.found.value if probe.found is not None else ""
            cuts.append(
                self._event("cut", ts, site=probe.site, signal=signal, balance=probe.balance)
            )
        await self._audit.record_many(cuts)


class AuditedModel:
    """A `ChatModel` that records each request and response of the turn running it."""

    def __init__(self, inner: ChatModel) -> None:
        self._inner = inner

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        """Request one response from the wrapped model, recording both ends."""
        turn = _CURRENT.get()
        if turn is not None:
            await turn.request(len(messages))
        response = await self._inner.respond(messages, toolset, on_delta)
        if turn is not None:
            await turn.response(response)
        return response
