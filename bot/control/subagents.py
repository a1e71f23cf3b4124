"""Sub-agents: children an analysis dispatches, counted in one registry per parent.

A parent turn's `dispatch_subagent` call creates a child: its own session and analysis, run by
any worker as an ordinary job whose "card" is its record here (`SubagentCards`: no chat
message). The parent's turn ends at its next cut (`dispatched`) and its continuation is parked;
children report when they end, and the report after which none of its children is pending or
running queues the parent's continuation, which reads every report from its inbox.
A report never steers or cuts a running parent turn: it waits in the inbox.

A child's `ask_parent` ends its turn (`awaiting`); the question goes to the parent's inbox and
wakes the parent; the parent's `answer_child` puts the answer in the child's inbox and queues
the child's parked continuation.

Lifecycle, per child: `pending` (queued) → `running` → `awaiting` (asked) → `running` … →
`done | failed | cancelled`. Every transition is one Lua script on the parent's registry hash,
and a final state never changes again, so a report delivered twice (the publisher retries, the
reaper delivers a dead worker's final state) counts once.

Cascading stop (`stop_tree`): the parent's stop marks the tree stopped, every unfinished child
`cancelled`, tombstones each child's open turns and rings its bell (a running child stops at
once, a queued one never starts), and queues a parked child's continuation, which ends without
calling the model. No report of a stopped tree reaches the parent's inbox or wakes anyone.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Sequence
from enum import StrEnum

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from agent_core import TURN_KEY_TTL_S, QuoteKind, aquote_untrusted, map_redis_errors, register_lua
from bot.events import AuthorKind, ChatEvent, Platform
from bot.keys import BotKeys
from bot.state.followups import Followups
from bot.state.turn_jobs import TurnJob

__all__ = ["ChildRecord", "ChildState", "SubagentRegistry", "child_event", "tree_lines"]

FINAL = frozenset({"done", "failed", "cancelled"})


class ChildState(StrEnum):
    """Where a child stands."""

    PENDING = "pending"
    RUNNING = "running"
    AWAITING = "awaiting"
    CANCELLED = "cancelled"
    DONE = "done"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        """A final state never changes again."""
        return self.value in FINAL


class ChildRecord(BaseModel):
    """One child, as the parent's registry keeps it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    child_id: str
    session_id: str
    """The child's own session."""
    parent_session: str
    parent_turn: str
    """The parent turn that dispatched it."""
    task: str
    state: ChildState = ChildState.PENDING
    report: str = ""
    """The child's answer (done) or why it ended (failed, cancelled)."""
    question: str = ""
    """What it asked its parent, while awaiting."""
    created_at: float = 0.0
    updated_at: float = 0.0


def child_event(parent: ChatEvent, parent_session: str, child_id: str, task: str) -> ChatEvent:
    """The event a child's analysis starts from: its task, on the sub-agent platform."""
    return ChatEvent(
        platform=Platform.SUBAGENT,
        event_id=child_id,
        workspace=parent_session,
        channel=parent_session,
        thread=child_id,
        message_id="",
        author=parent.author,  # whoever asked the parent asked the child, for approvals
        author_name="the parent analysis",
        author_kind=AuthorKind.SUBAGENT,
        text=task,
        tools=parent.tools,  # a narrowed analysis (a scheduled job) narrows its children too
    )


class SubagentRegistry:
    """Creates children, moves them through their lifecycle, and stops whole trees."""

    def __init__(self, redis: aioredis.Redis, keys: BotKeys | None = None) -> None:
        self._redis = redis
        self._keys = keys or BotKeys()
        self._dispatch = register_lua(redis, "bot.control", "subagents_dispatch")
        self._move = register_lua(redis, "bot.control", "subagents_move", INBOX_TTL=TURN_KEY_TTL_S)
        self._park = register_lua(redis, "bot.control", "subagents_park")
        self._followups = Followups(redis, self._keys)

    async def dispatch(
        self,
        parent: ChatEvent,
        parent_session: str,
        parent_turn: str,
        task: str,
        call_id: str = "",
    ) -> ChildRecord | None:
        """Create a child and queue its analysis; None when the parent's tree was stopped.

        With `call_id` (the dispatching call), the child's id derives from the call: the call
        run again (a resumed batch) gets the child it created, which is not queued twice.
        """
        k = self._keys
        if call_id:
            seed = f"{parent_session}\x1f{parent_turn}\x1f{call_id}".encode()
            child_id = f"sub-{hashlib.sha256(seed).hexdigest()[:10]}"
        else:
            child_id = f"sub-{uuid.uuid4().hex[:10]}"
        event = child_event(parent, parent_session, child_id, task)
        session = event.session_id
        now = time.time()
        record = ChildRecord(
            child_id=child_id,
            session_id=session,
            parent_session=parent_session,
            parent_turn=parent_turn,
            task=task,
            created_at=now,
            updated_at=now,
        )
        job = TurnJob(turn_id=f"turn-{child_id}", session_id=session, event=event)
        with map_redis_errors("dispatch a sub-agent"):
            created = await self._dispatch(
                keys=[
                    k.children(parent_session),
                    k.turns_stream,
                    k.open_turns(session),
                    k.parents,
                    k.tree_stopped(parent_session),
                ],
                args=[
                    child_id,
                    record.model_dump_json(),
                    job.model_dump_json(),
                    job.turn_id,
                    TURN_KEY_TTL_S,
                    parent_session,
                ],
            )
        if created == 2:
            return await self.child(parent_session, child_id)
        return record if created else None

    async def children(self, parent_session: str) -> list[ChildRecord]:
        """Every child of the parent, oldest first."""
        with map_redis_errors("read sub-agents"):
            raw = await self._redis.hvals(self._keys.children(parent_session))
        records = [ChildRecord.model_validate_json(v) for v in raw]
        return sorted(records, key=lambda r: (r.created_at, r.child_id))

    async def child(self, parent_session: str, child_id: str) -> ChildRecord | None:
        """One child of the parent."""
        with map_redis_errors("read a sub-agent"):
            raw = await self._redis.hget(self._keys.children(parent_session), child_id)
        return None if raw is None else ChildRecord.model_validate_json(raw)

    async def move(
        self,
        record: ChildRecord,
        state: ChildState,
        *,
        report: str = "",
        question: str = "",
        note: str = "",
    ) -> ChildState | None:
        """Move a child to `state`; `note` goes to the parent's inbox (a report, a question).

        Returns the state it is in now, or None when the record is gone.
        """
        k, parent = self._keys, record.parent_session
        inbox = ""
        if note:
            inbox = _note(record, note).model_dump_json()
        with map_redis_errors("move a sub-agent"):
            moved, now_in = await self._move(
                keys=[
                    k.children(parent),
                    k.tree_stopped(parent),
                    k.inbox(parent),
                    k.awaiting(parent),
                    k.turns_stream,
                ],
                args=[record.child_id, state.value, report, question, time.time(), inbox],
            )
        text = now_in.decode() if isinstance(now_in, bytes) else str(now_in)
        return ChildState(text) if text else None

    async def park(
        self, job: TurnJob, token: int, suspended_turn: str, registry_of: str, waiting_for: str
    ) -> int:
        """Park `job`, the continuation of a turn that ended to wait (`lua/subagents_park.lua`).

        Args:
            job: The continuation.
            token: The lease's fencing token.
            suspended_turn: The turn that ended.
            registry_of: The session whose registry says whether to wait (the parent's).
            waiting_for: `children` (a parent waiting for its dispatch) or a child id (a child
                waiting for its answer).

        Returns 0 when fenced, else 1 (parked), 2 (queued at once) or 3 (parked before).
        """
        k, session = self._keys, job.session_id
        with map_redis_errors("park a continuation"):
            return int(
                await self._park(
                    keys=[
                        k.live_turn(session),
                        k.open_turns(session),
                        k.session.tombstone(session, suspended_turn),
                        k.session.tombstone(session, job.turn_id),
                        k.children(registry_of),
                        k.awaiting(session),
                        k.turns_stream,
                        k.parked(session, suspended_turn),
                        k.session.steers(session),
                        k.inbox(session),
                    ],
                    args=[
                        token,
                        job.turn_id,
                        TURN_KEY_TTL_S,
                        job.model_dump_json(),
                        suspended_turn,
                        waiting_for,
                    ],
                )
            )

    async def answer(self, record: ChildRecord, answer: str) -> bool:
        """Give a child awaiting its parent the answer; queue its continuation.

        Returns False when the child is not waiting for one.
        """
        if record.state is not ChildState.AWAITING:
            return False
        k = self._keys
        note = ChatEvent(
            platform=Platform.SUBAGENT,
            event_id=f"answer-{uuid.uuid4().hex[:10]}",
            workspace=record.parent_session,
            channel=record.parent_session,
            thread=record.child_id,
            message_id="",
            author=record.parent_session,
            author_name="your parent analysis",
            author_kind=AuthorKind.SUBAGENT,
            text=await _answer_note(record.question, answer),
        )
        with map_redis_errors("answer a sub-agent"):
            await self._redis.rpush(k.inbox(record.session_id), note.model_dump_json())
        moved = await self.move(record, ChildState.RUNNING)
        if moved is not ChildState.RUNNING:
            return False
        with map_redis_errors("wake a sub-agent"):
            job = await self._redis.getdel(k.awaiting(record.session_id))
            if job is not None:
                await self._redis.xadd(k.turns_stream, {"job": job})
        return True

    async def forget_stop(self, session_id: str) -> None:
        """A new analysis starts in the session: an earlier stop no longer blocks dispatches."""
        with map_redis_errors("forget a stopped tree"):
            await self._redis.delete(self._keys.tree_stopped(session_id))

    async def stop_tree(self, parent_session: str, by: str) -> list[str]:
        """Stop every descendant of the session; their ids. Nothing of it reports again."""
        k = self._keys
        with map_redis_errors("stop sub-agents"):
            await self._redis.set(k.tree_stopped(parent_session), by or "stop", ex=TURN_KEY_TTL_S)
        stopped: list[str] = []
        for record in await self.children(parent_session):
            if record.state.is_final:
                continue
            await self.move(record, ChildState.CANCELLED, report=f"stopped by {by}")
            await self._followups.stop_waiting(record.session_id, by)
            stopped.append(record.child_id)
            stopped += await self.stop_tree(
                record.session_id, by
            )  # a child of a child, should there be one
        with map_redis_errors("stop sub-agents"):
            # Reports read by nobody must not become the next analysis's input.
            await self._redis.delete(k.inbox(parent_session))
            await self._redis.srem(k.parents, parent_session)
        return stopped


async def _answer_note(question: str, answer: str) -> str:
    """The child's inbox note of its parent's answer: both quoted as untrusted data (X9)."""
    text = f"Your question: {question}\n\nThe answer: {answer}"
    quoted = await aquote_untrusted("parent", text, kind=QuoteKind.SUBAGENT_MESSAGE)
    return f"Answer to your question, from your parent analysis: it is below.\n{quoted}"


def _note(record: ChildRecord, text: str) -> ChatEvent:
    return ChatEvent(
        platform=Platform.SUBAGENT,
        event_id=f"note-{record.child_id}-{uuid.uuid4().hex[:6]}",
        workspace=record.parent_session,
        channel=record.parent_session,
        thread=record.child_id,
        message_id="",
        author=record.child_id,
        author_name=f"sub-agent {record.child_id}",
        author_kind=AuthorKind.SUBAGENT,
        text=text,
    )


def tree_lines(records: Sequence[ChildRecord]) -> list[str]:
    """One line per child: `sub-1a2b… running  check the gateway`."""
    return [f"{r.child_id}  {r.state.value:<9} {r.task}" for r in records]
