"""The clients the worker and the scheduler share: Redis, card clients, thread readers, posters.

Contract: `open_clients` closes, through the caller's stack, only what it opened (a given Redis
client is the caller's); the platforms' clients close before the Redis client they may write
with. The console's cards write with the worker's own Redis client. In production a Redis
without AOF is refused before anything is read (docs/reliability.md Q2).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from contextlib import AsyncExitStack
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from bot.control.subagent_desk import SubagentCards
from bot.control.subagents import SubagentRegistry
from bot.errors import BotConfigError
from bot.events import Platform
from bot.process.redis_pool import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_WAIT_S,
    pooled_redis,
)
from bot.publishing.channel_posts import ChannelPoster
from bot.publishing.metered_platform import MeteredPlatform
from bot.publishing.platform import ChatPlatform
from bot.publishing.thread_reader import ThreadReader
from bot.redis_topology import SINGLE, RedisTopology
from bot.settings import Settings
from bot.worker.metrics import WorkerMetrics

__all__ = [
    "channel_posters",
    "metered_platforms",
    "open_clients",
    "platforms_from",
    "require_durable_redis",
    "thread_readers",
    "worker_redis",
]

CONNECT_TIMEOUT_S = 5.0
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_PROBES = 3
UNACKNOWLEDGED_MS = 30_000


async def require_durable_redis(redis: aioredis.Redis) -> None:
    """Refuse a Redis without AOF: a restart would lose every queued and pending turn.

    Raises:
        BotConfigError: `appendonly` is off (or cannot be read: a managed Redis that hides
            CONFIG must be checked by its operator, and says so by not setting production).
    """
    try:
        reply: Any = await redis.config_get("appendonly")
    except RedisError as exc:
        raise BotConfigError(f"cannot check that Redis persists (CONFIG GET): {exc}") from exc
    value = reply.get("appendonly") or reply.get(b"appendonly")
    if value not in ("yes", b"yes"):
        raise BotConfigError(
            "CHATOPS_PRODUCTION is set but Redis runs without AOF (appendonly no): a restart "
            "would lose queued turns; set appendonly yes and appendfsync everysec"
        )


def platforms_from(
    settings: Settings, redis: aioredis.Redis | None = None
) -> dict[Platform, ChatPlatform]:
    """The card clients of every configured platform.

    Args:
        settings: Which platforms are configured.
        redis: The client the console platform writes its cards with (the worker's own);
            needed only when `CHATOPS_CONSOLE_TOKEN` is set.

    Raises:
        BotConfigError: No platform is configured, or the console is without a Redis client.
    """
    platforms: dict[Platform, ChatPlatform] = {}
    if settings.slack_bot_token is not None:
        from bot.adapters.slack.cards import SlackCards

        platforms[Platform.SLACK] = SlackCards.from_settings(settings)
    if settings.feishu_app_id and settings.feishu_app_secret is not None:
        from bot.adapters.feishu.cards import FeishuCards

        platforms[Platform.FEISHU] = FeishuCards.from_settings(settings)
    if settings.console_token is not None:
        if redis is None:
            raise BotConfigError("the console platform (CHATOPS_CONSOLE_TOKEN) needs Redis")
        from bot.adapters.console.cards import ConsoleCards

        platforms[Platform.CONSOLE] = ConsoleCards(redis)
    if not platforms:
        raise BotConfigError(
            "no platform is set: Slack (SLACK_BOT_TOKEN), Feishu (FEISHU_APP_*) or the console "
            "(CHATOPS_CONSOLE_TOKEN)"
        )
    return platforms


def thread_readers(settings: Settings) -> dict[Platform, ThreadReader]:
    """The thread readers of the configured chat platforms (the console has no thread to read).

    Raises:
        BotConfigError: A platform's credentials are incomplete.
    """
    readers: dict[Platform, ThreadReader] = {}
    if settings.slack_bot_token is not None:
        from bot.adapters.slack.thread import SlackThreads

        readers[Platform.SLACK] = SlackThreads.from_settings(settings)
    if settings.feishu_app_id and settings.feishu_app_secret is not None:
        from bot.adapters.feishu.thread import FeishuThreads

        readers[Platform.FEISHU] = FeishuThreads.from_settings(settings)
    return readers


def channel_posters(
    settings: Settings, platforms: Iterable[Platform], redis: aioredis.Redis | None = None
) -> dict[Platform, ChannelPoster]:
    """The notice posters (top-level messages and their threads) of the given chat platforms.

    Args:
        settings: The platforms' credentials.
        platforms: The platforms to post on (the keys of `platforms_from`'s answer will do);
            a sub-agent has no channel and is passed over.
        redis: The client the console's notices are written with; needed for the console.

    Raises:
        BotConfigError: A platform's credentials are incomplete, or the console is without Redis.
    """
    posters: dict[Platform, ChannelPoster] = {}
    for platform in platforms:
        if platform is Platform.SLACK:
            from bot.adapters.slack.posts import SlackPoster

            posters[platform] = SlackPoster(settings)
        elif platform is Platform.FEISHU:
            from bot.adapters.feishu.posts import FeishuPoster

            posters[platform] = FeishuPoster.from_settings(settings)
        elif platform is Platform.CONSOLE:
            if redis is None:
                raise BotConfigError("the console's notices (CHATOPS_CONSOLE_TOKEN) need Redis")
            from bot.adapters.console.posts import ConsolePoster

            posters[platform] = ConsolePoster(redis)
    return posters


def worker_redis(
    url: str,
    *,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    wait_s: float = DEFAULT_WAIT_S,
    topology: RedisTopology = SINGLE,
) -> aioredis.Redis:
    """The Redis client of the worker and the scheduler: it waits a paused Redis out.

    redis-py's default 5 s per-command socket timeout would turn a Redis that stalls for a few
    seconds (a fork for a rewrite, a failover, a paused VM) into errors mid-turn, and a write
    retried after a timeout may run twice. Without it a command waits for its answer (it is
    sent once); every blocking command carries a server-side timeout of its own, cleanup is
    bounded by the caller, and a holder that waits past its lease is fenced off when it
    resumes (docs/reliability.md Q5, Q11). A peer that is really gone is found by the kernel, which
    a paused but living server still answers: keepalive probes on an idle connection, and
    `TCP_USER_TIMEOUT` for a command whose bytes are never acknowledged, both in about half a
    minute. A URL that sets `socket_timeout` still wins.

    The pool holds `max_connections` and a command waits `wait_s` for a free one
    (`bot.process.redis_pool`): the live turns' rings share one connection (`agent_core.BellHub`),
    so the pool is sized for short commands, not for turns.
    """
    keepalive = {
        socket.TCP_KEEPIDLE: KEEPALIVE_IDLE_S,
        socket.TCP_KEEPINTVL: KEEPALIVE_INTERVAL_S,
        socket.TCP_KEEPCNT: KEEPALIVE_PROBES,
        socket.TCP_USER_TIMEOUT: UNACKNOWLEDGED_MS,
    }
    return pooled_redis(
        url,
        max_connections=max_connections,
        wait_s=wait_s,
        topology=topology,
        socket_timeout=None,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_keepalive=True,
        socket_keepalive_options=keepalive,
    )


async def open_clients(
    settings: Settings, redis: aioredis.Redis | None, stack: AsyncExitStack
) -> tuple[aioredis.Redis, dict[Platform, ChatPlatform]]:
    """The Redis client and the platforms' card clients, closed by `stack` when it opened them.

    A given Redis client is used as it is, and is the caller's to close.

    Raises:
        BotConfigError: The settings cannot work.
    """
    if redis is None and not settings.redis_url:
        raise BotConfigError("REDIS_URL is not set")
    if redis is None:
        assert settings.redis_url
        redis = worker_redis(  # connects on first use, not here
            settings.redis_url,
            max_connections=settings.redis_max_connections,
            wait_s=settings.redis_pool_timeout_s,
            topology=settings.redis_topology,
        )
        stack.push_async_callback(redis.aclose)
    platforms = platforms_from(settings, redis)
    for platform in platforms.values():
        stack.push_async_callback(platform.aclose)
    # Sub-agents' analyses have no chat thread: their card is their registry record.
    platforms[Platform.SUBAGENT] = SubagentCards(SubagentRegistry(redis))
    return redis, platforms


def metered_platforms(
    platforms: dict[Platform, ChatPlatform], metrics: WorkerMetrics
) -> dict[Platform, ChatPlatform]:
    """The card clients, each counting its calls (the sub-agents' record is no platform call)."""
    return {
        name: client if name is Platform.SUBAGENT else MeteredPlatform(client, metrics.card_call)
        for name, client in platforms.items()
    }
