"""What the ingress's routes share: the `Ingress` built once per app, its Redis client, its budgets.

Contract: every Redis command the ingress sends runs under a deadline of its caller's (the
`ACK_BUDGET_S` of a request, readyz's 1 s, `REDIS_CALL_S` for work no request waits on), never
under redis-py's own socket timeout (`ingress_redis`). Bodies past `MAX_BODY_BYTES` are refused
before any signature work (docs/reliability.md S16).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.adapters.slack.inbound import SlackIdentity
from bot.control.approval_desk import ApprovalDesk
from bot.control.killswitch import KillSwitch, KillSwitchDesk
from bot.errors import QueueUnavailable
from bot.intake.accept import Intake
from bot.intake.alert_intake import AlertIntake
from bot.intake.metrics import IngressMetrics
from bot.intake.queue import Queue
from bot.policy.alert_routes import AlertRoute
from bot.process.redis_pool import DEFAULT_MAX_CONNECTIONS, pooled_redis
from bot.redis_topology import SINGLE, RedisTopology
from bot.settings import Settings
from bot.state.audit import AuditLog
from bot.state.memory import MemoryBook

if TYPE_CHECKING:  # lark_oapi is imported only when Feishu is configured
    from bot.adapters.feishu.inbound import FeishuVerifier

__all__ = [
    "ACK_BUDGET_S",
    "MAX_BODY_BYTES",
    "NONCE_TTL_S",
    "REDIS_CALL_S",
    "Ingress",
    "ingress_redis",
]

log = logging.getLogger("bot.ingress.app")  # the logger name the ingress's log lines always had

NONCE_TTL_S = 600
"""Feishu nonces are remembered for twice the ±5-minute window, so no replay fits in it."""
MAX_BODY_BYTES = 1_000_000
"""Larger bodies are refused with 413 before any signature work (docs/reliability.md S16)."""
ACK_BUDGET_S = 2.5
"""Time allowed for the Redis work of one request; the platforms give up after 3 s."""
REDIS_CALL_S = 5.0
"""Deadline of the ingress's Redis calls that no request waits on (startup, cleanup)."""


@dataclass(eq=False)
class Ingress:
    """What the routes need, built once per app."""

    settings: Settings
    redis: aioredis.Redis
    queue: Queue
    metrics: IngressMetrics
    slack: SlackIdentity | None = None
    feishu: FeishuVerifier | None = None
    clock: Callable[[], float] = time.time
    alert_routes: tuple[AlertRoute, ...] = ()
    """`CHATOPS_ALERT_ROUTES`, parsed at start-up (an invalid route stops the ingress)."""
    intake: Intake = field(init=False)
    alerts: AlertIntake = field(init=False)

    def __post_init__(self) -> None:
        audit = AuditLog.from_settings(self.redis, self.queue.keys, self.settings)
        desk = ApprovalDesk(
            self.redis, self.queue.keys, self.settings.responder_ids, self.clock, audit
        )
        switch_desk = KillSwitchDesk(
            KillSwitch(self.redis, self.queue.keys, audit), self.settings.admin_ids
        )
        memory = MemoryBook(self.redis, self.queue.keys, days=self.settings.memory_days)
        self.intake = Intake(self.queue, desk, switch_desk, self.redis, audit, memory)
        self.alerts = AlertIntake(self.redis, self.queue.keys)

    async def forget_nonce(self, nonce: str) -> None:
        """Drop a recorded nonce (best effort: Redis just failed us once already)."""
        if not nonce:
            return
        try:
            async with asyncio.timeout(REDIS_CALL_S):
                await self.redis.delete(self.queue.keys.seen_nonce(nonce))
        except (RedisError, TimeoutError) as exc:
            log.warning("could not forget a nonce: %s", exc)

    async def fresh_nonce(self, nonce: str) -> bool:
        """Record a Feishu nonce; False when it was seen within the window (a replay)."""
        key = self.queue.keys.seen_nonce(nonce)
        try:
            return bool(await self.redis.set(key, "1", nx=True, ex=NONCE_TTL_S))
        except RedisError as exc:
            raise QueueUnavailable(f"cannot check the nonce: {exc}") from exc


def ingress_redis(
    url: str,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    wait_s: float = ACK_BUDGET_S,
    topology: RedisTopology = SINGLE,
) -> aioredis.Redis:
    """The ingress's Redis client (bench/ingress.py builds the same).

    redis-py's per-command socket timeout is off: it wraps every read in a timer of its own, a
    cost on the webhook's hot path (with it off, bench/ingress.py moved from 0.48-0.50x to
    0.51-0.53x of a bare endpoint, together with the lookup caching in routing and metrics).
    Every command this client sends runs under a deadline of the caller's instead (the 2.5 s
    ack budget, readyz's 1 s, `REDIS_CALL_S` elsewhere), and redis-py drops a connection
    whose command was cancelled. A URL that sets `socket_timeout` still wins.

    The pool holds `max_connections`; a request finding them all busy waits for one, within its
    own deadline (`bot.process.redis_pool`), instead of being answered 503 at once.
    """
    return pooled_redis(
        url,
        max_connections=max_connections,
        wait_s=wait_s,
        topology=topology,
        socket_timeout=None,
        socket_connect_timeout=REDIS_CALL_S,
    )
