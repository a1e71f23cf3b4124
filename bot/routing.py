"""From a normalized event to a write: read the session's state, classify, submit.

One Redis round trip reads the session's state (known thread? turn live? turns queued?), the
policy table decides, and one script writes (see `bot.queue`). Returns a short outcome label
for metrics and logs.
"""

from __future__ import annotations

import logging

from bot.events import ChatEvent, EventKind
from bot.queue import Queue, Route
from bot.steer_policy import Decision, RunState, ThreadRelation, classify

__all__ = ["route_event"]

log = logging.getLogger(__name__)

_ROUTES = {
    Decision.START: Route.START,
    Decision.STEER: Route.STEER,
    Decision.STOP: Route.STOP,
    Decision.QUEUE: Route.QUEUE,
    Decision.APPROVE: Route.APPROVE,
}


async def route_event(queue: Queue, event: ChatEvent) -> str:
    """Classify `event` against its session's state and write it; return the outcome label."""
    state = await queue.session_state(event.session_id)
    relation = ThreadRelation.BOT_THREAD if state.known else ThreadRelation.NO_SESSION
    run_state = (
        RunState.RUNNING if state.live else RunState.QUEUED if state.queued else RunState.IDLE
    )
    verdict = classify(event, relation=relation, state=run_state)
    log.debug("event %s: %s (%s)", event.event_id, verdict.decision, verdict.reason)
    route = _ROUTES.get(verdict.decision)
    if route is None:
        return "ignored"
    stop_turn = event.action_value if event.kind is EventKind.ACTION else ""
    submitted = await queue.submit(event, route, stop_turn=stop_turn)
    if not submitted.accepted:
        return "duplicate"
    return "cancelled" if submitted.cancelled else route.value
