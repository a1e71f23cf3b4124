"""Turn jobs: one turn to run, as it travels on the turns stream, and the stream's consumer group.

The producer (`bot.intake.queue`) writes jobs; workers (`bot.worker`), the scheduler, takeovers
and sub-agents read or re-queue them. Both sides share this module, so a worker never imports
the intake.
"""

from __future__ import annotations

from datetime import UTC, datetime

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, Field
from redis.exceptions import RedisError, ResponseError

from bot.errors import QueueUnavailable
from bot.events import ChatEvent
from bot.keys import BotKeys

__all__ = ["TurnJob", "ensure_group", "turn_id_for"]


class TurnJob(BaseModel):
    """One turn to run, as it travels on the turns stream."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    turn_id: str
    session_id: str
    event: ChatEvent
    enqueued_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    resumed: bool = False
    """A continuation handed over by a draining worker: the task is in the history already."""


def turn_id_for(event: ChatEvent) -> str:
    """The turn id of the turn an event starts: derived from the event, so retries agree."""
    return f"turn-{event.platform}-{event.event_id}"


async def ensure_group(redis: aioredis.Redis, keys: BotKeys) -> None:
    """Create the workers' consumer group (and the stream) if missing.

    Raises:
        QueueUnavailable: Redis refused or did not answer.
    """
    try:
        await redis.xgroup_create(keys.turns_stream, keys.turns_group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise QueueUnavailable(f"cannot create consumer group: {exc}") from exc
    except RedisError as exc:
        raise QueueUnavailable(f"cannot create consumer group: {exc}") from exc
