"""Routing outcomes: an enum whose members read as the strings logs and metrics always used.

Why this way: `RoutingOutcome` replaced plain strings, and its values are an external contract
(the `outcome` label of `chatops_ingress_events_total`, dashboards, log searches), so the
vocabulary is pinned here; `route_event` is run against a real redis-server (the submit script
decides duplicates) to check that what it returns is a member, not a bare string.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from bot.events import ChatEvent, Platform
from bot.intake.queue import Queue, Route
from bot.intake.routing import RoutingOutcome, outcome_of, route_event


def _mention(event_id: str = "Ev1", text: str = "<@B1> is the db up?") -> ChatEvent:
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=event_id,
        workspace="T1",
        channel="C1",
        thread="1700000000.000100",
        message_id=f"1700000000.{event_id}",
        author="U1",
        text=text,
        mentioned=True,
    )


def test_the_outcome_vocabulary_is_the_labels_metrics_and_logs_have_always_read() -> None:
    assert {o.value for o in RoutingOutcome} == {
        "start",
        "steer",
        "stop",
        "queue",
        "approve",
        "killswitch",
        "cancelled",
        "duplicate",
        "ignored",
    }
    assert f"{RoutingOutcome.KILL_SWITCH}" == "killswitch"  # as a log line formats it


def test_every_route_has_the_outcome_of_the_same_name() -> None:
    for route in Route:
        assert outcome_of(route).value == route.value


async def test_route_event_returns_members_started_then_duplicate(
    redis_client: aioredis.Redis,
) -> None:
    queue = Queue(redis_client)
    event = _mention()

    first = await route_event(queue, event)
    again = await route_event(queue, event)

    assert first is RoutingOutcome.START
    assert again is RoutingOutcome.DUPLICATE


async def test_an_event_no_state_routes_is_ignored_without_a_write(
    redis_client: aioredis.Redis,
) -> None:
    unmentioned = ChatEvent(
        platform=Platform.SLACK,
        event_id="Ev2",
        workspace="T1",
        channel="C1",
        thread="1700000000.000300",
        message_id="1700000000.000300",
        author="U1",
        text="chatter in a thread the bot is not in",
    )

    assert await route_event(Queue(redis_client), unmentioned) is RoutingOutcome.IGNORED
    assert await redis_client.dbsize() == 0
