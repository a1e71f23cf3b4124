"""The demo's incident, played through the console channel against the local stack.

1. A person mentions the bot: "checkout is returning 500s". The card goes live; the model
   (the rehearsal, or a real one) starts a parallel batch of probes against the demo service.
2. While that batch runs, the person redirects it: "focus on the payments database". The card
   shows the redirect waiting for the batch (the cut), then the redirected analysis, then the
   answer.
3. A second analysis starts, and the person presses Stop while its probes run.

Then a summary from the bot's own books: every turn and how it ended, probes per turn, the
time from the redirect to the cut, and whether every card ended final. Exit status 0 only when
the story happened as told.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import redis.asyncio as aioredis

from agent_core import SettleReason, SettleRecord
from bot.adapters.console.channel import CardView, ConsoleChannel, Screen
from bot.demo.stack import LocalStack
from bot.keys import BotKeys
from bot.state.settle import Book
from cards import CardStep, StepState

__all__ = ["DemoSummary", "play"]

INCIDENT = "checkout is returning 500s since 10:40. What is going on?"
REDIRECT = "focus on the payments database first"
SECOND = "is the search service healthy?"
STEP_TIMEOUT_S = 120.0


@dataclass
class DemoSummary:
    """What the demo's two analyses did, read from the settles book and the cards."""

    settles: list[SettleRecord] = field(default_factory=list)
    steer_to_cut_s: float | None = None
    cards: list[CardView] = field(default_factory=list)
    provider_400s: int | None = None
    """Requests the rehearsal model refused as the real API would (None: a real model)."""

    @property
    def ok(self) -> bool:
        """The story happened as told: a redirect, an answer, a stop; no failure."""
        reasons = [s.reason for s in self.settles]
        return (
            SettleReason.STEERED in reasons
            and SettleReason.COMPLETED in reasons
            and SettleReason.STOPPED in reasons
            and SettleReason.FAILED not in reasons
            and len(self.cards) == 2
            and all(c.final for c in self.cards)
            and not self.provider_400s
        )

    def lines(self) -> list[str]:
        """The summary, as printed."""
        out = [f"summary: {len(self.cards)} analyses, {len(self.settles)} turns"]
        out += [
            f"  turn {s.turn_id}: {s.reason.value}, {s.model_requests} model requests, "
            f"{s.probes} signal probes"
            for s in self.settles
        ]
        for card in self.cards:
            states = Counter(step.state.value for step in card.card.steps)
            calls = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            out.append(f"  analysis {card.card.turn_id}: tool calls {calls or 'none'}")
        if self.steer_to_cut_s is not None:
            out.append(f"  redirect to cut: {self.steer_to_cut_s:.2f} s")
        final = sum(c.final for c in self.cards)
        failed = sum(s.reason is SettleReason.FAILED for s in self.settles)
        out.append(f"  cards final: {final} of {len(self.cards)}; failed turns: {failed}")
        if self.provider_400s is not None:
            out.append(f"  histories the model refused (400): {self.provider_400s}")
        out.append("demo: " + ("ok" if self.ok else "FAILED: the story did not happen as told"))
        return out


async def play(stack: LocalStack, redis: aioredis.Redis, out: TextIO) -> DemoSummary:
    """Play the incident; print the cards as they change and return the summary."""
    keys = BotKeys()
    channel = ConsoleChannel(stack.ingress_url, stack.console_token, redis, user="alice")
    screen = Screen(out)
    try:
        await channel.start_reading()
        screen.say(f"alice: @chatops {INCIDENT}")
        await channel.mention(INCIDENT)
        await _until(channel, screen, lambda v: len(_running(v)) >= 2)
        screen.say(f"alice (in the thread): {REDIRECT}")
        steered_at = time.time()
        await channel.say(REDIRECT)
        first = await _until(channel, screen, lambda v: v.final)

        screen.say(f"alice: @chatops {SECOND}")
        await channel.mention(SECOND)
        await _until(channel, screen, lambda v: len(_running(v)) >= 1)
        screen.say("alice presses [ Stop ]")
        await channel.stop()
        second = await _until(channel, screen, lambda v: v.final)
    finally:
        await channel.aclose()
    summary = DemoSummary(settles=await _settles(redis, keys), cards=[first, second])
    if stack.rehearsal is not None:
        summary.provider_400s = int(stack.rehearsal.state.rejected)
    steered = [s for s in summary.settles if s.reason is SettleReason.STEERED]
    if steered:
        summary.steer_to_cut_s = steered[0].ended_at.timestamp() - steered_at
    for line in summary.lines():
        out.write(line + "\n")
    return summary


async def _until(
    channel: ConsoleChannel, screen: Screen, done: Callable[[CardView], bool]
) -> CardView:
    """Show card updates of the current thread until one satisfies `done`."""
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while time.monotonic() < deadline:
        view = await channel.next_update()
        if view is None or view.thread != channel.thread:
            continue
        screen.card(view)
        if done(view):
            return view
    raise TimeoutError("the demo waited too long for the card")


def _running(view: CardView) -> list[CardStep]:
    return [s for s in view.card.steps if s.state is StepState.RUNNING]


async def _settles(redis: aioredis.Redis, keys: BotKeys) -> list[SettleRecord]:
    entries: Any = await redis.xrange(keys.book(Book.SETTLES))
    return [SettleRecord.model_validate_json(f[b"record"]) for _, f in entries]
