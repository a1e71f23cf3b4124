"""Taking over an analysis another worker started: where it stands, and which card it keeps.

A job reaches a second worker when its first worker drained (a resume job) or died (its stream
entry taken over). The analysis then continues on the card it already has, and an analysis that
had in fact ended (its worker died between its last settle and its final card) is not run
again: its card is finished from the books (the last settle's reason) and the history (the last
answer). The card it continues is reconciled with the history first (`Takeover.continued`):
its record is written only when an update is sent, so it can lack the last steps whose calls the
history holds, and every later step would be numbered short of the step the model reads.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from agent_core import AssistantMessage, HistoryStore, SettleReason, SettleRecord, map_redis_errors
from bot.analysis.progress import reconciled
from bot.keys import BotKeys
from bot.publishing.card_record import CardRecord
from bot.state.settle import SettleWriter
from bot.state.turn_jobs import TurnJob
from cards import CardStatus, ProgressCard

__all__ = ["Takeover", "analysis_of", "continued_card"]

_STATUS_OF = {
    SettleReason.COMPLETED: CardStatus.ANSWERED,
    SettleReason.STOPPED: CardStatus.STOPPED,
    SettleReason.CANCELLED: CardStatus.CANCELLED,
    SettleReason.FAILED: CardStatus.FAILED,
}


_HANDED_ON = frozenset({SettleReason.DRAINED, SettleReason.AWAITING, SettleReason.DISPATCHED})
"""Settle reasons after which the analysis continues in another job."""


def analysis_of(turn_id: str) -> str:
    """The job turn an analysis started from (its later turns are `<job turn>.<n>`)."""
    return turn_id.partition(".")[0]


async def continued_card(record: CardRecord, job: TurnJob) -> ProgressCard | None:
    """The live card of the analysis this job continues, if it has one."""
    fields = await record.read()
    if fields.get("final") != "0" or fields.get("thread") != job.event.thread:
        return None
    try:
        card = ProgressCard.from_json(fields.get("state") or "")
    except ValueError:
        return None
    return card if analysis_of(card.turn_id) == analysis_of(job.turn_id) else None


class Takeover:
    """Reads where a taken-over analysis stands."""

    def __init__(
        self, redis: aioredis.Redis, keys: BotKeys, settle: SettleWriter, store: HistoryStore
    ) -> None:
        self._redis = redis
        self._keys = keys
        self._settle = settle
        self._store = store

    async def ended(self, job: TurnJob, record: CardRecord) -> tuple[bool, ProgressCard | None]:
        """Whether the analysis of `job` already ended, and the final card it still needs.

        Returns `(False, None)` when there is work left (its turn never settled, or a later
        turn of it is still open); `(True, None)` when it ended and its card is final (or
        gone); `(True, card)` when it ended and `card` must still be shown.
        """
        session = job.session_id
        with map_redis_errors("read parked marker"):
            parked = await self._redis.exists(self._keys.parked(session, job.turn_id))
        if parked:
            # Its worker died after parking the continuation (sub-agents or an answer to
            # wait for) but before settling: the analysis goes on there.
            return True, None
        if await self._settle.record(session, job.turn_id) is None:
            return False, None
        if (await record.read()).get("final") != "0":
            return True, None
        last = await self._last_settle(job)
        if last is not None and last.reason in _HANDED_ON:
            # Its worker died after handing the analysis on (a drain's resume job, or the
            # continuation parked for approvals) but before acknowledging this job: the
            # analysis goes on there, and running this job again would run it twice.
            return True, None
        with map_redis_errors("read open turns"):
            still_open = await self._redis.smembers(self._keys.open_turns(session))
        if any(analysis_of(_text(t)) == analysis_of(job.turn_id) for t in still_open):
            return False, None
        card = await self.continued(record, job)
        if card is None or last is None:
            return True, None
        final = card.ended(_STATUS_OF.get(last.reason, CardStatus.FAILED), error=last.error)
        if last.reason is SettleReason.COMPLETED:
            final = final.evolve(answer=await self._last_answer(session))
        return True, final

    async def continued(self, record: CardRecord, job: TurnJob) -> ProgressCard | None:
        """The live card this job continues (`continued_card`), with every step of its history.

        Its steps are the analysis's calls in the session's history, in step order, then any
        the history does not hold yet (`bot.analysis.progress.reconciled`).
        """
        card = await continued_card(record, job)
        if card is None:
            return None
        return reconciled(card, await self._store.load(job.session_id))

    async def _last_settle(self, job: TurnJob) -> SettleRecord | None:
        """The latest settle of the analysis (its own turn, or a later one)."""
        with map_redis_errors("read follow-ups"):
            followups = await self._redis.smembers(self._keys.followups(job.session_id))
        turns = [job.turn_id, *(t for t in map(_text, followups) if t.startswith(job.turn_id))]
        records = [await self._settle.record(job.session_id, t) for t in turns]
        settled = [r for r in records if r is not None]
        return max(settled, key=lambda r: r.ended_at) if settled else None

    async def _last_answer(self, session_id: str) -> str:
        history = await self._store.load(session_id)
        answers = [m for m in history if isinstance(m, AssistantMessage) and not m.tool_calls]
        return answers[-1].content if answers else ""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
