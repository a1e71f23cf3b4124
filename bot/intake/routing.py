"""From a normalized event to a write: classify for every state, then one script call.

The policy stays in Python; what it needs from Redis is the session's state, which only the
write itself should read (reading first and writing later leaves a gap, and costs a second
round trip: measured at 0.31x vs 0.40x of a bare endpoint). So the event is classified for each
state its session can be in, and the submit script reads the state and takes the matching
route, atomically with the dedupe and the write.

What became of the event is a `RoutingOutcome`: a `StrEnum`, so logs, span attributes and the
`outcome` label of `chatops_ingress_events_total` read the same strings as before it was one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final, assert_never

from bot.events import AuthorKind, ChatEvent, EventKind
from bot.intake.queue import Queue, Route, StateRoutes, Submitted, Trail
from bot.policy.steer import Decision, Marker, RunState, ThreadRelation, decide, marker_of

__all__ = [
    "RoutingOutcome",
    "Submit",
    "outcome_of",
    "route_event",
    "route_submitted",
    "routes_for",
]

log = logging.getLogger(__name__)


class RoutingOutcome(StrEnum):
    """What became of one event at the intake (a metrics label and a log word)."""

    START = "start"
    """A new analysis was queued."""
    STEER = "steer"
    """A correction for the running analysis was queued."""
    STOP = "stop"
    """The session's turns were stopped (tombstoned)."""
    QUEUE = "queue"
    """A message was kept for the analysis's next turn."""
    APPROVE = "approve"
    """An Approve or Deny press, for the approval desk to decide."""
    KILL_SWITCH = "killswitch"
    """An admin's kill switch command, for the kill switch desk."""
    CANCELLED = "cancelled"
    """A start that a later stop had already cancelled (sent before the stop)."""
    DUPLICATE = "duplicate"
    """The event, or its message, was already written once."""
    IGNORED = "ignored"
    """The policy takes no route for it in the session's state."""


def outcome_of(route: Route) -> RoutingOutcome:
    """The outcome of an event written on `route`."""
    match route:
        case Route.START:
            return RoutingOutcome.START
        case Route.STEER:
            return RoutingOutcome.STEER
        case Route.STOP:
            return RoutingOutcome.STOP
        case Route.QUEUE:
            return RoutingOutcome.QUEUE
        case Route.APPROVE:
            return RoutingOutcome.APPROVE
        case Route.KILL_SWITCH:
            return RoutingOutcome.KILL_SWITCH
        case never:
            assert_never(never)


Submit = Callable[[ChatEvent], Coroutine[Any, Any, RoutingOutcome]]
"""Takes in one event and returns its routing outcome (`route_event` on a queue, or
`bot.intake.accept.Intake.submit`, which also decides presses and commands)."""

_ROUTES = {
    Decision.START: Route.START,
    Decision.STEER: Route.STEER,
    Decision.STOP: Route.STOP,
    Decision.QUEUE: Route.QUEUE,
    Decision.APPROVE: Route.APPROVE,
    Decision.KILL_SWITCH: Route.KILL_SWITCH,
}
# The states a session can be in, in the order the submit script indexes them.
_STATES = (
    (ThreadRelation.NO_SESSION, RunState.IDLE),
    (ThreadRelation.BOT_THREAD, RunState.IDLE),
    (ThreadRelation.BOT_THREAD, RunState.QUEUED),
    (ThreadRelation.BOT_THREAD, RunState.RUNNING),
)


def _routes_in_each_state(author: AuthorKind, kind: EventKind, marker: Marker) -> StateRoutes:
    unknown, idle, queued, live = (
        _ROUTES.get(
            decide(author=author, event=kind, relation=relation, state=state, marker=marker)
        )
        for relation, state in _STATES
    )
    return unknown, idle, queued, live


# The policy table folded over the four states, built once from `POLICY` (through `decide`):
# one lookup per event instead of four, on the webhook's hot path (bench/ingress.py).
_BY_EVENT: Final[Mapping[tuple[AuthorKind, EventKind, Marker], StateRoutes]] = MappingProxyType(
    {
        (author, kind, marker): _routes_in_each_state(author, kind, marker)
        for author in AuthorKind
        for kind in EventKind
        for marker in Marker
    }
)


def routes_for(event: ChatEvent) -> StateRoutes:
    """The route the policy chooses for `event` in each state its session may be in."""
    return _BY_EVENT[event.author_kind, event.kind, marker_of(event)]


async def route_event(queue: Queue, event: ChatEvent) -> RoutingOutcome:
    """Classify and write `event`; return what became of it, for metrics and logs."""
    outcome, _ = await route_submitted(queue, event)
    return outcome


async def route_submitted(
    queue: Queue,
    event: ChatEvent,
    trail: Callable[[StateRoutes], Trail | None] | None = None,
) -> tuple[RoutingOutcome, Submitted | None]:
    """`route_event`, with the audit entries of a steer or a stop written in the same call.

    Args:
        queue: Where the event is written.
        event: The event.
        trail: Builds the audit entries for the routes the event may take (None: none).

    Returns:
        The outcome, and what the write did (None when no route applied in any state).
    """
    routes = routes_for(event)
    if not any(routes):
        return RoutingOutcome.IGNORED, None  # whatever the session's state: no round trip at all
    stop_turn = event.action_value if event.kind is EventKind.ACTION else ""
    entries = trail(routes) if trail is not None else None
    submitted = await queue.submit(event, routes, stop_turn=stop_turn, trail=entries)
    if submitted.duplicate:
        return RoutingOutcome.DUPLICATE, submitted
    if submitted.route is None:
        return RoutingOutcome.IGNORED, submitted
    log.debug("event %s: %s", event.event_id, submitted.route)
    if submitted.cancelled:
        return RoutingOutcome.CANCELLED, submitted
    return outcome_of(submitted.route), submitted
