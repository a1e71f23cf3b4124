"""The soak: many analyses across two workers under a rolling SIGTERM/SIGKILL (W8).

Acceptance: 30 or more analyses across two workers with a rolling SIGTERM or SIGKILL every few
seconds; at the end every analysis settled, every card final, zero histories rejected by the
provider, zero finished tools re-run.

Why this way: the faults a rolling restart brings are processes dying at arbitrary moments, so
the soak runs `chatops serve`, two `chatops worker` processes and `chatops scheduler` against
the real Redis, posts signed mentions, and every few seconds starts a replacement worker and
sends SIGTERM or SIGKILL (in turn) to the busiest of the others. Nothing is aimed within an
analysis: the signals land wherever its turns happen to be (mid model stream, mid tool, between
turns, waiting for the card). Each analysis is one to three rounds of `http_get` probes on the
slow service, each probe on a URL path of its own, so every run of a probe is told apart; the
fake provider answers from each request's history (its responder mode), since a FIFO script
cannot follow thirty interleaved analyses whose requests are repeated after a kill.

What is read at the end, and where:
- settled: the settles book, the last settle of every analysis is terminal, and `completed`
  (never the reaper's "interrupted": workers were running to take every analysis over); the
  stream holds no entry once every worker has stopped; no job was dead-lettered; every
  SIGTERMed worker drained and exited 0 within its grace;
- cards final: the fake Slack API, one card per thread, its last state shows the answer and has
  no Stop button;
- no rejected history: every request the fake provider saw was a 200 (it answers a broken
  history with OpenAI's real 400);
- no finished tool re-run: a probe is finished once its result is in some model request's
  messages (the provider saw it in the history); a run of that probe arriving at the slow
  service after that first request is a violation. An interrupted probe may run again (it is
  read-only, docs/reliability.md W3/W4); only finished ones count.

Marked slow and soak. The size is `CHATOPS_SOAK_ANALYSES` (default 30, the size CI runs); run
with `-s` to see the one-line summary.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from agent_core import SettleReason, SettleRecord
from bot.keys import BotKeys
from tests.deployment import Deployment, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import Hit, SlowService
from tests.fakes.slack_api import FakeSlackAPI
from tests.processes import Chatops
from tests.slack_view import card_text, cards_in, final_card, stop_buttons, updates_of

ANALYSES = int(os.environ.get("CHATOPS_SOAK_ANALYSES", "30"))
MENTION_GAP_S = 0.4
"""Between two mentions: the analyses overlap (each takes one to four seconds)."""
CHAOS_PAUSE_S = 0.5
"""Between two rounds; with the replacement's start-up, a signal every 3 s or so."""
ROUNDS_AFTER_POSTING = 3
"""Signals sent once every mention is posted, so the last analyses are hit too."""
SETTLE_TIMEOUT_S = 60.0
"""For everything to settle once the chaos stopped: a SIGKILLed turn waits out its lease."""
DRAIN_WAIT_S = 30.0
"""For a SIGTERMed worker to exit: its grace (25 s by default) and a margin."""
COMPLETED, FAILED = SettleReason.COMPLETED, SettleReason.FAILED
SETTLED = {COMPLETED, FAILED, SettleReason.STOPPED}
"""Reasons that end an analysis (`drained` hands it over; nothing here steers or cancels)."""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.soak,
    pytest.mark.timeout(90 + 4 * ANALYSES),
]

KEYS = BotKeys()
_ANALYSIS = re.compile(r"soak analysis (\d+):")


def mention_text(n: int) -> str:
    return f"<@{sg.SLACK_BOT_USER_ID}> soak analysis {n}: why is checkout slow?"


def answer_text(n: int) -> str:
    return f"Soak analysis {n}: every probe answered; checkout is healthy."


@dataclass
class SoakModel:
    """The model of every analysis, answering from each request's history.

    Analysis n makes 1 + n % 3 rounds of probes (one or two parallel `http_get` calls each),
    then answers. Every call gets a path of its own, `/slow/<ms>/a<n>-<k>`, with k counted
    over the whole run: a request repeated after a kill gets fresh calls, never old paths.
    """

    url: Callable[[str], str]
    _ids: itertools.count[int] = field(default_factory=itertools.count)

    def __call__(self, messages: list[dict[str, Any]]) -> fp.Reply:
        n = analysis_number(messages)
        rounds = sum(1 for m in messages if m.get("role") == "assistant" and m.get("tool_calls"))
        if rounds >= 1 + n % 3:
            return fp.TextReply(answer_text(n), chunk_delay=0.02)
        ids = [next(self._ids) for _ in range(1 + (n + rounds) % 2)]  # one call at a time
        calls = [
            fp.ToolCall("http_get", {"url": self.url(f"/slow/{300 + k * 137 % 900}/a{n}-{k}")})
            for k in ids
        ]
        return fp.ToolCallsReply(calls, chunk_delay=0.01)


def analysis_number(messages: list[dict[str, Any]]) -> int:
    for message in messages:
        found = _ANALYSIS.search(str(message.get("content") or ""))
        if message.get("role") == "user" and found:
            return int(found[1])
    raise LookupError("no soak analysis task in the request")


def finished_at(requests: list[fp.RecordedRequest]) -> dict[str, float]:
    """For each probe path: when a model request first carried its result."""
    first: dict[str, float] = {}
    for request in requests:
        urls = {
            call["id"]: json.loads(call["function"]["arguments"])["url"]
            for m in request.messages
            for call in m.get("tool_calls") or []
        }
        for m in request.messages:
            if m.get("role") == "tool":
                path = urlsplit(urls[m["tool_call_id"]]).path
                first[path] = min(first.get(path, request.arrived_at), request.arrived_at)
    return first


def reruns_after_finish(hits: list[Hit], finished: dict[str, float]) -> list[Hit]:
    """Runs of a probe that arrived after its result had reached the model."""
    return [h for h in hits if h.path in finished and h.arrived_at > finished[h.path]]


@dataclass
class Chaos:
    """The rolling restart: a replacement starts, then one of the others gets the signal.

    SIGTERM and SIGKILL in turn, to the worker holding the most analyses at that moment (so
    the signals land on work, wherever it happens to be); the replacement is up before the
    signal, so two workers always read the stream (and the signalled one drains or is gone).
    """

    deployment: Deployment
    signalled: list[tuple[Chatops, signal.Signals]] = field(default_factory=list)
    timeline: list[str] = field(default_factory=list)

    def unsignalled(self) -> list[Chatops]:
        gone = {id(w) for w, _ in self.signalled}
        return [w for w in self.deployment.workers if id(w) not in gone]

    async def one_round(self, sessions: list[str]) -> None:
        fresh = await self.deployment.add_worker()  # a worker start takes about 2.5 s
        kind = signal.SIGTERM if len(self.signalled) % 2 == 0 else signal.SIGKILL
        victim = await self.busiest([w for w in self.unsignalled() if w is not fresh], sessions)
        victim.signal(kind)
        self.signalled.append((victim, kind))
        self.timeline.append(f"{time.strftime('%H:%M:%S')} {kind.name} worker {victim.proc.pid}")

    async def busiest(self, workers: list[Chatops], sessions: list[str]) -> Chatops:
        """The worker holding the most session leases now; the oldest of those tied."""
        held: list[Any] = (
            await self.deployment.redis.mget([KEYS.live_turn(s) for s in sessions])
            if sessions
            else []
        )
        holders = Counter(h.decode().split("|")[1] for h in held if h is not None)
        leases = [sum(n for name, n in holders.items() if name in w.log) for w in workers]
        return workers[leases.index(max(leases))]

    async def run(self, threads: list[str], posted: asyncio.Event) -> None:
        rounds_after = 0
        while rounds_after < ROUNDS_AFTER_POSTING:
            await asyncio.sleep(CHAOS_PAUSE_S)  # pacing, not a wait for anything
            rounds_after += posted.is_set()
            await self.one_round([slack_session(t) for t in threads])

    def kinds(self) -> Counter[str]:
        return Counter(kind.name for _, kind in self.signalled)


async def post_mentions(deployment: Deployment, threads: list[str], posted: asyncio.Event) -> None:
    for n in range(ANALYSES):
        thread = sg.slack_ts()
        threads.append(thread)
        await deployment.slack(sg.slack_app_mention(ts=thread, text=mention_text(n)))
        await asyncio.sleep(MENTION_GAP_S)  # pacing
    posted.set()


async def settles_until_done(
    deployment: Deployment, chaos: Chaos, sessions: set[str]
) -> dict[str, list[SettleRecord]]:
    """Read the settles book (blocking reads) until every analysis's last settle ends it."""
    settles: dict[str, list[SettleRecord]] = defaultdict(list)

    def open_sessions() -> set[str]:
        return {s for s in sessions if not settles[s] or settles[s][-1].reason not in SETTLED}

    try:
        async with asyncio.timeout(SETTLE_TIMEOUT_S):
            while open_sessions():
                record = await deployment.next_settle(SETTLE_TIMEOUT_S)
                settles[record.session_id].append(record)
    except TimeoutError:
        pytest.fail(f"not settled:\n{story(deployment, chaos, settles, open_sessions())}")
    return settles


async def cards_until_final(slack_api: FakeSlackAPI, threads: list[str]) -> None:
    """Wait (for each next Slack call) until no thread is without a card or has a live one."""

    def live() -> list[str]:
        return [t for t in threads if not cards_in(slack_api, t) or has_live_card(slack_api, t)]

    try:
        async with asyncio.timeout(SETTLE_TIMEOUT_S):
            while True:
                seen = len(slack_api.calls)
                if not live():
                    return
                await slack_api.wait_for_calls(seen + 1)
    except TimeoutError:
        pytest.fail(f"cards not final in threads {live()}")


async def exit_status(worker: Chatops) -> int | None:
    """The exit status of a worker already sent SIGTERM (None: still running after its grace)."""
    try:
        return await asyncio.to_thread(worker.proc.wait, DRAIN_WAIT_S)
    except subprocess.TimeoutExpired:
        return None


def has_live_card(slack_api: FakeSlackAPI, thread: str) -> bool:
    """Whether a card in `thread` still shows a Stop button in its latest state."""
    for posted in cards_in(slack_api, thread):
        latest = (updates_of(slack_api, posted.response["ts"]) or [posted])[-1]
        if stop_buttons(latest):
            return True
    return False


def story(
    deployment: Deployment, chaos: Chaos, settles: dict[str, list[SettleRecord]], sessions: set[str]
) -> str:
    """The signals sent, and what the processes said about `sessions`, for a failure message."""
    lines = [*chaos.timeline]
    lines += [f"{s}: settles {[r.reason.value for r in settles[s]]}" for s in sorted(sessions)]
    turns = {r.turn_id.partition(".")[0] for s in sessions for r in settles[s]}
    for proc in deployment.processes:
        lines += [
            f"  [{proc.args[0]} {proc.proc.pid}] {line}"
            for line in proc.log.splitlines()
            if any(t in line for t in turns | sessions)
        ]
    return "\n".join(lines)


async def test_w8_rolling_restarts_leave_every_analysis_settled_with_a_final_card(
    deployment: Deployment,
    fake_llm: fp.FakeProvider,
    slack_api: FakeSlackAPI,
    slow_service: SlowService,
) -> None:
    started = time.monotonic()
    fake_llm.respond_with(SoakModel(slow_service.url))
    await deployment.start(workers=2, scheduler_interval=0.5)
    chaos, posted = Chaos(deployment), asyncio.Event()
    threads: list[str] = []  # in posting order: analysis n is threads[n]
    async with asyncio.TaskGroup() as group:
        group.create_task(post_mentions(deployment, threads, posted))
        group.create_task(chaos.run(threads, posted))
    session_of = {slack_session(t): t for t in threads}

    settles = await settles_until_done(deployment, chaos, set(session_of))
    await cards_until_final(slack_api, threads)
    terminated = [w for w, kind in chaos.signalled if kind is signal.SIGTERM]
    exits = [await exit_status(w) for w in terminated]  # one signal each: no second SIGTERM
    remaining = [await w.stop() for w in chaos.unsignalled()]  # drained: every entry acked

    # Every analysis settled, and completed: a drained turn is resumed by the worker that reads
    # its hand-over job, a killed one by a worker once its lease expired, both on the same
    # card. Any other end (the reaper's "interrupted" while workers ran, `failed` for another
    # reason, `stopped`: nobody stops anything here) fails the soak.
    last = {session_of[s]: records[-1] for s, records in settles.items()}
    wrong = {t: (r.reason.value, r.error) for t, r in last.items() if r.reason is not COMPLETED}
    assert not wrong, f"{wrong}\n{story(deployment, chaos, settles, set(settles))}"
    assert await deployment.redis.xlen(KEYS.turns_stream) == 0  # acknowledged is deleted
    assert await deployment.redis.xlen(KEYS.dead_letters) == 0
    assert exits == [0] * len(terminated), f"{exits}\n" + "\n".join(chaos.timeline)
    assert remaining == [0] * len(remaining)  # and the last ones drained too

    # Every card final: one per thread, showing the answer, without a Stop button.
    for n, thread in enumerate(threads):
        assert len(cards_in(slack_api, thread)) == 1, thread
        final = final_card(slack_api, thread)
        assert answer_text(n) in card_text(final), card_text(final)
        assert not stop_buttons(final), card_text(final)

    # Zero histories rejected by the provider (nor any other error).
    statuses = Counter(r.status for r in fake_llm.requests)
    assert set(statuses) == {200}, statuses

    # Zero finished tools run again; and every probe of an analysis that completed did finish.
    hits = list(slow_service.hits)
    finished = finished_at(fake_llm.requests)
    rerun = reruns_after_finish(hits, finished)
    assert rerun == [], f"{rerun}\n" + "\n".join(chaos.timeline)
    assert {h.path for h in hits} <= set(finished)  # every probe that ran did finish

    runs = Counter(h.path for h in hits)
    resumed = sum(w.log.count("resuming turn") for w in deployment.workers)
    drained = sum(r.reason is SettleReason.DRAINED for rs in settles.values() for r in rs)
    kinds = chaos.kinds()
    print(
        f"\nsoak: {ANALYSES} analyses in {time.monotonic() - started:.0f} s, "
        f"{sum(r.reason is COMPLETED for r in last.values())} completed; "
        f"signals SIGTERM={kinds['SIGTERM']} SIGKILL={kinds['SIGKILL']}; "
        f"resumed turns {drained + resumed} ({drained} drained, {resumed} taken over); "
        f"probes {len(runs)}, interrupted calls re-run {sum(runs.values()) - len(runs)} "
        f"({sum(h.outcome == 'abandoned' for h in hits)} abandoned); "
        f"model requests {len(fake_llm.requests)} ({fake_llm.aborted_streams} streams cut)"
    )
