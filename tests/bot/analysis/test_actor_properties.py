"""Property test of the actor: every claimed turn settles once; every card ends final.

Why this way: the end-to-end tests walk the paths we thought of; the books and the cards must
also come out right for any mix of steers, stops, tool failures, platform faults, a worker shut
down mid-turn and a lease lost to a pause. Hypothesis draws the model's script (batches of
parallel calls with mixed outcomes, answers that may be empty), where in a batch a steer, a stop,
a cancellation or a lease loss strikes, and which card updates the platform refuses (429,
deleted card, outage). The actor, runtime, settle writer, publisher and reaper are the real ones
on a real Redis; the model is `ScriptedModel` (it validates every history like a strict
provider) and the platform is a typed in-process `ChatPlatform` that records what it showed,
so a few hundred interleavings run in seconds.

Checked from the outside after each run (and a reaper sweep, as the scheduler would do): every
turn that began, and the job's own turn, has exactly one settle record and one entry in the
settles book; no turn is left open; the last thing the platform shows is a final card.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_core import (
    AssistantMessage,
    ControlPlane,
    Runtime,
    Tool,
    ToolContext,
    ToolFailed,
    Toolset,
)
from agent_core._messages import ToolCall
from agent_core.testing import ScriptedModel, text
from bot.analysis.actor import ActorOptions
from bot.events import ChatEvent, Platform
from bot.keys import BotKeys
from bot.ops.reaper import Reaper
from bot.publishing.card_publisher import PublisherOptions
from bot.publishing.platform import (
    CardGone,
    CardRef,
    CardTarget,
    PlatformRateLimited,
    PlatformUnavailable,
)
from bot.state.lease import LeaseLost, Leases
from bot.state.settle import Book, SettleWriter
from bot.state.turn_jobs import TurnJob, turn_id_for
from bot.worker.assembly import build_actor
from cards._model import ProgressCard

KEYS = BotKeys()
EXAMPLE_BOUND_S = 30.0
"""A run that has not ended by then is a hang, reported with its falsifying example."""
STRIKES = ("none", "steer", "stop", "cancel", "lease")
FAULTS = (None, "429", "gone", "down")
_MESSAGES = itertools.count(1)


@dataclass
class RecordingPlatform:
    """A `ChatPlatform` that keeps every card it showed and refuses updates as scripted."""

    faults: list[str | None]
    shown: list[tuple[str, ProgressCard]] = field(default_factory=list)

    @property
    def platform(self) -> Platform:
        return Platform.SLACK

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        return None

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        message_id = f"m{next(_MESSAGES)}"
        self.shown.append((message_id, card))
        return CardRef(Platform.SLACK, target.channel, message_id)

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "429":
            raise PlatformRateLimited(0.0)
        if fault == "gone":
            raise CardGone("message_not_found")
        if fault == "down":
            raise PlatformUnavailable("503")
        self.shown.append((ref.message_id, card))

    async def set_status(self, target: CardTarget, status: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


@dataclass
class Strikes:
    """Where interruptions strike, keyed by the call that triggers them."""

    plan: dict[str, str]
    session: str = ""
    redis: aioredis.Redis | None = None
    actor_task: asyncio.Task[None] | None = None
    struck: list[str] = field(default_factory=list)

    async def strike(self, call_key: str) -> None:
        kind = self.plan.pop(call_key, "none")
        if kind == "none" or self.redis is None:
            return
        self.struck.append(kind)
        control = ControlPlane(self.redis)
        if kind == "steer":
            await control.steer(self.session, "look at the gateway", author="tester")
        elif kind == "stop":  # as the ingress does: every open turn of the session
            turns: Any = await self.redis.smembers(KEYS.open_turns(self.session))
            for turn in turns:
                await control.stop(self.session, turn.decode(), by="tester")
        elif kind == "cancel" and self.actor_task is not None:
            self.actor_task.cancel()
        elif kind == "lease":
            await self.redis.delete(KEYS.live_turn(self.session))


def _toolset(strikes: Strikes) -> Toolset:
    async def probe(args: Mapping[str, Any], ctx: ToolContext) -> str:
        for _ in range(int(args["spins"])):
            await asyncio.sleep(0)
        await strikes.strike(str(args["key"]))
        await asyncio.sleep(0)
        if args["mode"] == "fail":
            raise ToolFailed("backend said no")
        return "ok"

    return Toolset.of([Tool(name="probe", description="", parameters={}, handler=probe)])


call_specs = st.tuples(st.sampled_from(("ok", "fail")), st.integers(0, 3), st.sampled_from(STRIKES))
steps = st.one_of(
    st.lists(call_specs, min_size=1, max_size=3),
    st.sampled_from(("answer", "empty")),
)
scripts = st.lists(steps, min_size=1, max_size=6)
fault_lists = st.lists(st.sampled_from(FAULTS), max_size=6)


def _script(drawn: list[Any], plan: dict[str, str]) -> list[AssistantMessage]:
    script: list[AssistantMessage] = []
    for b, step in enumerate(drawn):
        if step == "answer":
            script.append(text("It was DNS."))
        elif step == "empty":
            script.append(text(""))
        else:
            calls = []
            for i, (mode, spins, strike) in enumerate(step):
                key = f"{b}-{i}"
                plan[key] = strike
                args = json.dumps({"mode": mode, "spins": spins, "key": key})
                calls.append(ToolCall(id=f"c{b}-{i}", name="probe", arguments=args))
            script.append(AssistantMessage(tool_calls=tuple(calls)))
    return [*script, text("Final answer.")]


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


async def _scenario(url: str, drawn: list[Any], faults: list[str | None]) -> dict[str, Any]:
    redis = aioredis.Redis.from_url(url)
    plan: dict[str, str] = {}
    job = _job()
    strikes = Strikes(plan=plan, session=job.session_id, redis=redis)
    model = ScriptedModel(script=_script(drawn, plan))
    platform = RecordingPlatform(faults=list(faults))
    # Long enough that only the drawn strikes take the lease: a lapse from a slow machine
    # leaves a turn claimed but never begun, for a worker's takeover this harness has not got.
    leases = Leases(redis, KEYS, ttl_s=5.0)
    settle = SettleWriter(redis, KEYS)
    runtime = Runtime(model=model, redis=redis, toolset=_toolset(strikes))
    options = ActorOptions(
        max_turns=8, publisher=PublisherOptions(min_interval_s=0, retry_s=0, final_timeout_s=2)
    )
    actor = build_actor(
        runtime=runtime,
        redis=redis,
        keys=KEYS,
        leases=leases,
        settle=settle,
        platforms={Platform.SLACK: platform},
        options=options,
    )
    try:
        await redis.sadd(KEYS.open_turns(job.session_id), job.turn_id)  # as the ingress does
        lease = await leases.try_acquire(job.session_id, "w1", job.turn_id)
        assert lease is not None
        task = asyncio.get_running_loop().create_task(actor.run(job, lease))
        strikes.actor_task = task
        try:
            await task
        except (asyncio.CancelledError, LeaseLost):
            pass
        finally:
            await leases.release(lease)
        reaper = Reaper(
            redis=redis,
            keys=KEYS,
            leases=leases,
            settle=settle,
            platforms={Platform.SLACK: platform},
        )
        for _ in range(len(faults) + 1):  # the scheduler's sweeps, until the faults run out
            await reaper.sweep(now_ms=2**62)
        return await _observe(redis, job, platform, strikes)
    finally:
        await redis.aclose()


async def _observe(
    redis: aioredis.Redis, job: TurnJob, platform: RecordingPlatform, strikes: Strikes
) -> dict[str, Any]:
    session = job.session_id
    begun = {
        key.decode().rsplit(":", 1)[1]
        async for key in redis.scan_iter(match=f"{KEYS.session.session_prefix(session)}:begun:*")
    }
    book: dict[str, int] = {}
    entries: Any = await redis.xrange(KEYS.book(Book.SETTLES))
    for _, fields in entries:
        if fields[b"session"].decode() == session:
            turn = fields[b"turn"].decode()
            book[turn] = book.get(turn, 0) + 1
    records = {t: await redis.exists(KEYS.settle(session, t)) for t in begun | {job.turn_id}}
    return {
        "claimed": begun | {job.turn_id},
        "book": book,
        "records": records,
        "open": await redis.smembers(KEYS.open_turns(session)),
        "shown": platform.shown,
        "struck": strikes.struck,
    }


PROPERTY = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@PROPERTY
@given(drawn=scripts, faults=fault_lists)
def test_every_claimed_turn_settles_once_and_every_card_ends_final(
    redis_server, drawn, faults
) -> None:
    seen = asyncio.run(asyncio.wait_for(_scenario(redis_server, drawn, faults), EXAMPLE_BOUND_S))
    assert all(seen["records"].values()), seen
    assert set(seen["book"]) >= seen["claimed"], seen
    assert all(count == 1 for count in seen["book"].values()), seen
    assert not seen["open"], seen
    if seen["shown"]:
        _, last = seen["shown"][-1]
        assert last.is_final, seen
