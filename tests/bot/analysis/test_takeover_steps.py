"""A taken-over analysis's card numbers its steps as the model does, even when its record lags.

Why this way: the card record is written only when an update is sent (paced), so a worker that
dies can leave it without the last steps whose calls the history already holds; the worker that
takes over must show those steps too, or every later step is numbered short of the `[step N]`
the model reads and cites. The dead worker's state is written to a real Redis through the same
stores it uses (the history, the card record under its lease); a real actor then takes the job
over, with a scripted model and a platform that records every card it is asked to show. The
assertions read the card the platform last showed and what the model was sent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from agent_core import (
    AssistantMessage,
    Runtime,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserKind,
    UserMessage,
    step_numbers,
)
from agent_core.testing import ScriptedModel, text
from agent_core.tools import Tool, ToolContext, Toolset
from bot.analysis.actor import ActorOptions
from bot.analysis.progress import reconciled
from bot.events import ChatEvent, Platform
from bot.keys import BotKeys
from bot.publishing.card_publisher import PublisherOptions
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import CardRef, CardTarget
from bot.state.lease import Leases
from bot.state.settle import SettleWriter
from bot.state.turn_jobs import TurnJob, turn_id_for
from bot.worker.assembly import build_actor
from cards import CardStatus, CardStep, ProgressCard, StepState

KEYS = BotKeys()


@dataclass
class RecordingPlatform:
    """A `ChatPlatform` that keeps every card it was asked to show."""

    shown: list[ProgressCard] = field(default_factory=list)

    @property
    def platform(self) -> Platform:
        return Platform.SLACK

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        return None

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        self.shown.append(card)
        return CardRef(Platform.SLACK, target.channel, "m-new")

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        self.shown.append(card)

    async def set_status(self, target: CardTarget, status: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


def _job() -> TurnJob:
    event = ChatEvent(
        platform=Platform.SLACK,
        event_id=f"Ev{uuid.uuid4().hex[:10]}",
        workspace="T1",
        channel="C1",
        thread=f"{uuid.uuid4().int % 10**9}.000100",
        message_id="1.0",
        author="U1",
        text="why is checkout slow?",
        mentioned=True,
    )
    return TurnJob(turn_id=turn_id_for(event), session_id=event.session_id, event=event)


def _probe(n: int) -> ToolCall:
    return ToolCall(id=f"c{n}", name="probe", arguments=json.dumps({"host": f"db-{n}"}))


def _batch(*numbers: int) -> list[AssistantMessage | ToolMessage]:
    """One closed batch: the calls, then each one's answer (the fourth one failed)."""
    answers = [
        ToolMessage(
            call_id=f"c{n}",
            name="probe",
            content="error: refused" if n == 4 else "ok",
            status=ToolStatus.ERROR if n == 4 else ToolStatus.OK,
        )
        for n in numbers
    ]
    return [AssistantMessage(tool_calls=tuple(_probe(n) for n in numbers)), *answers]


def _toolset() -> Toolset:
    async def probe(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return "ok"

    return Toolset.of([Tool(name="probe", description="", parameters={}, handler=probe)])


async def test_a_card_record_missing_steps_is_continued_with_every_step_of_the_history(
    redis_server: str,
) -> None:
    redis = aioredis.Redis.from_url(redis_server)
    await redis.flushall()
    job = _job()
    session = job.session_id
    model = ScriptedModel(script=[AssistantMessage(tool_calls=(_probe(6),)), text("Done [6].")])
    runtime = Runtime(model=model, redis=redis, toolset=_toolset())
    leases = Leases(redis, KEYS, ttl_s=30.0)
    platform = RecordingPlatform()
    actor = build_actor(
        runtime=runtime,
        redis=redis,
        keys=KEYS,
        leases=leases,
        settle=SettleWriter(redis, KEYS),
        platforms={Platform.SLACK: platform},
        options=ActorOptions(publisher=PublisherOptions(min_interval_s=0, retry_s=0)),
    )
    try:
        # The dead worker: its turn began (the task is in the history) and two batches closed,
        # five calls, but the card it last sent was written when only the first three were.
        await redis.sadd(KEYS.open_turns(session), job.turn_id)
        dead = await leases.try_acquire(session, "w-dead", job.turn_id)
        assert dead is not None
        task = UserMessage(content=job.event.text, kind=UserKind.TASK)
        await runtime.store.begin_turn(session, job.turn_id, [task])
        await runtime.store.append_closed(session, job.turn_id, _batch(1, 2, 3))
        await runtime.store.append_closed(session, job.turn_id, _batch(4, 5))
        record = CardRecord(redis, KEYS, session)
        target = CardTarget(Platform.SLACK, job.event.channel, job.event.thread)
        assert await record.attach(dead.token, target) == ""
        await record.set_message("m-old")
        sent = ProgressCard(
            title="checkout",
            turn_id=job.turn_id,
            thread=job.event.thread,
            steps=tuple(
                CardStep(tool="probe", args=f"host=db-{n}", state=StepState.DONE, call_id=f"c{n}")
                for n in (1, 2, 3)
            ),
        )
        assert await record.claim(dead.token, sent) > 0
        await redis.delete(KEYS.live_turn(session))  # its lease lapsed: the job is taken over
        history = await runtime.store.load(session)

        lease = await leases.try_acquire(session, "w2", job.turn_id)
        assert lease is not None
        await actor.run(job, lease)
    finally:
        await redis.aclose()

    final = platform.shown[-1]
    assert final.status is CardStatus.ANSWERED
    numbers = step_numbers(history)
    assert numbers == {f"c{n}": n for n in range(1, 6)}
    assert [s.call_id for s in final.steps] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    assert [(s.tool, s.args) for s in final.steps] == [
        ("probe", f"host=db-{n}") for n in range(1, 7)
    ]
    assert [s.state for s in final.steps] == [StepState.DONE] * 3 + [
        StepState.FAILED,
        StepState.DONE,
        StepState.DONE,
    ]
    # The card's step 6 is the one the model read as step 6 (the label on its result).
    (result,) = [m for m in model.requests[-1] if isinstance(m, ToolMessage) and m.call_id == "c6"]
    assert result.content.endswith("\n[step 6]")
    assert final.steps[5].call_id == "c6"


def test_steps_the_history_does_not_hold_yet_follow_it_and_unmatched_cards_stay_as_they_are() -> (
    None
):
    history = [UserMessage(content="why?"), *_batch(1, 2), *_batch(3)]
    open_batch = CardStep(tool="probe", args="host=db-9", call_id="c9")
    card = ProgressCard(
        title="checkout",
        turn_id="t",
        steps=(CardStep(tool="probe", args="host=db-1", call_id="c1"), open_batch),
    )
    steps = reconciled(card, history).steps
    assert [s.call_id for s in steps] == ["c1", "c2", "c3", "c9"]
    assert steps[0] == card.steps[0]  # a step the card had is kept as it was (still running)
    assert steps[3] is open_batch
    legacy = ProgressCard(title="checkout", turn_id="t", steps=(CardStep(tool="probe", args=""),))
    assert reconciled(legacy, history) is legacy
