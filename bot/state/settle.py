"""The settle writer and the four books: how every claimed turn is accounted for, once.

docs/design.md §Invariants I5: every claimed turn settles exactly once, durably, with a reason. What
a turn means downstream is decided here from the runtime's stamp, never guessed from the answer:

- `settles`, the durable settle: every claimed turn.
- `automation`, turns that did the job: completed with a non-empty answer; never a steered,
  stopped or failed turn.
- `no-final-reply`, a diagnostic: completed with an empty answer; never a steered turn (it was
  cut, not mute).
- `remedies`, the remedy ladder: a re-run of an empty completed turn, at most `remedy_rungs`
  times; never for a steered turn.

A steered turn's settle is still written, with `reason=steered` and an empty final-event id, so
it can never count as a finished automation; skipping it entirely is what once left a card "in
progress" for 36 hours. Token usage (and its cost, when prices are configured) is booked per
turn in the settle and per session in a running total, steered turns included: their tokens were
spent.

The write is one Lua script, fenced by the writer's lease token: a worker whose lease was taken
over cannot settle (the new holder will), and a second settle of the same turn is a no-op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import redis.asyncio as aioredis

from agent_core import Completed, RunOutcome, SettleRecord, map_redis_errors, register_lua
from bot.keys import BotKeys
from bot.state.audit import AuditEvent, AuditLog
from bot.state.lease import Lease

__all__ = [
    "Book",
    "Pricing",
    "SettleCounters",
    "SettleWriter",
    "Settled",
    "Verdict",
    "verdict_of",
]

SETTLE_TTL_S = 30 * 24 * 3600
BOOK_MAXLEN = 100_000


class SettleCounters(Protocol):
    """What a settle writer counts (the worker's metrics, `bot.worker.metrics.WorkerMetrics`)."""

    def ran(self, outcome: RunOutcome) -> None:
        """Count a run's outcome."""

    def settled(self, record: SettleRecord) -> None:
        """Count a written settle record."""


"""Books are capped streams (approximately trimmed): they are for dashboards, not archives."""


class Book(StrEnum):
    """The books a settle may write to."""

    SETTLES = "settles"
    AUTOMATION = "automation"
    NO_FINAL_REPLY = "no-final-reply"
    REMEDIES = "remedies"


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """What one outcome means for the books (pure; see the module table)."""

    automation: bool
    no_final_reply: bool
    remedy_eligible: bool


def verdict_of(outcome: RunOutcome) -> Verdict:
    """Decide the books of an outcome from its result and the runtime's steered stamp."""
    result, steered = outcome.result, outcome.diagnostics.steered
    completed = isinstance(result, Completed) and not steered
    answered = completed and isinstance(result, Completed) and bool(result.answer.strip())
    empty = completed and not answered
    return Verdict(automation=answered, no_final_reply=empty, remedy_eligible=empty)


@dataclass(frozen=True, slots=True, kw_only=True)
class Pricing:
    """Model prices, for the cost booked next to the tokens (0: cost not tracked)."""

    prompt_per_mtok: float = 0.0
    """Price of one million prompt tokens."""
    completion_per_mtok: float = 0.0
    """Price of one million completion tokens."""

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The cost of a turn's usage."""
        return (
            prompt_tokens * self.prompt_per_mtok + completion_tokens * self.completion_per_mtok
        ) / 1e6


class Settled(StrEnum):
    """What a settle call did."""

    WRITTEN = "written"
    DUPLICATE = "duplicate"
    """The turn was already settled: nothing changed."""
    FENCED = "fenced"
    """The writer's lease is gone: refused (the lease's new holder settles)."""


class SettleWriter:
    """Writes settle records and books; idempotent and fenced."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys,
        pricing: Pricing | None = None,
        metrics: SettleCounters | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self._redis = redis
        self._keys = keys
        self.audit = audit or AuditLog(redis, keys)
        """Where each settle written is recorded (the worker's turns record there too)."""
        self._pricing = pricing or Pricing()
        self._metrics = metrics
        """Fed with each settle written here (never a duplicate): reason, tokens, the run."""
        self._settle = register_lua(redis, "bot.state", "settle_write")

    async def settle(self, outcome: RunOutcome, lease: Lease | None) -> Settled:
        """Settle a finished run (`lease` None: the reaper, allowed only once no lease is held)."""
        record = SettleRecord.from_outcome(outcome)
        settled = await self.write(record, verdict_of(outcome), lease)
        if settled is Settled.WRITTEN and self._metrics is not None:
            self._metrics.ran(outcome)
        return settled

    async def write(self, record: SettleRecord, verdict: Verdict, lease: Lease | None) -> Settled:
        """Write one settle record and the books its verdict names."""
        k, session = self._keys, record.session_id
        cost = self._pricing.cost(record.prompt_tokens, record.completion_tokens)
        keys = [
            k.live_turn(session),
            k.settle(session, record.turn_id),
            k.open_turns(session),
            k.usage(session),
            k.book(Book.SETTLES),
            k.book(Book.AUTOMATION),
            k.book(Book.NO_FINAL_REPLY),
        ]
        args: list[str | int | float] = [
            str(lease.token) if lease else "",
            record.model_dump_json(),
            record.turn_id,
            int(verdict.automation),
            int(verdict.no_final_reply),
            record.prompt_tokens,
            record.completion_tokens,
            repr(cost),
            SETTLE_TTL_S,
            record.reason.value,
            session,
            BOOK_MAXLEN,
        ]
        with map_redis_errors("settle"):
            status = int(await self._settle(keys=keys, args=args))
        settled = {1: Settled.WRITTEN, 0: Settled.DUPLICATE}.get(status, Settled.FENCED)
        if settled is Settled.WRITTEN and self._metrics is not None:
            self._metrics.settled(record)
        if settled is Settled.WRITTEN:
            await self.audit.record(_settle_event(record))
        return settled

    async def record(self, session_id: str, turn_id: str) -> SettleRecord | None:
        """The settle record of a turn, if it was settled."""
        with map_redis_errors("read settle"):
            raw = await self._redis.get(self._keys.settle(session_id, turn_id))
        return None if raw is None else SettleRecord.model_validate_json(raw)

    async def book_remedy(self, session_id: str, turn_id: str, rung: int) -> None:
        """Note that the remedy ladder re-ran an empty turn (rung 1, 2, …)."""
        with map_redis_errors("book remedy"):
            await self._redis.xadd(
                self._keys.book(Book.REMEDIES),
                {"session": session_id, "turn": turn_id, "rung": rung},
                maxlen=BOOK_MAXLEN,
                approximate=True,
            )


def _settle_event(record: SettleRecord) -> AuditEvent:
    return AuditEvent(
        ts=time.time(),
        session=record.session_id,
        turn=record.turn_id,
        kind="settle",
        data={
            "reason": record.reason.value,
            "final_event_id": record.final_event_id,
            "prompt_tokens": record.prompt_tokens,
            "completion_tokens": record.completion_tokens,
            # The provider reported no usage: the tokens are our estimate (agent_core/_tokens.py).
            "usage_estimated": record.usage_estimated,
        },
    )
