"""Wiring: the worker and the scheduler built from settings, with every client they need.

The Redis client, the platforms' card clients, the model client and the HTTP client of the
tools are opened here and closed when the caller's context ends; the production profile's
startup check (docs/reliability.md Q2) runs before anything is read.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Any

import httpx
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from agent_core import (
    SHELL_MAX_OUTPUT_BYTES,
    BodyLimit,
    Budget,
    CommandAllowlist,
    ConfigError,
    ControlPlane,
    HostAllowlist,
    LoopLimits,
    Runtime,
    ShellProfiles,
    Toolset,
    guarded,
    http_get_tool,
    http_probe_tool,
    open_mcp_tools,
    parse_mcp_servers,
    prometheus_tool,
    shell_tool,
    subagent_tools,
)
from bot.analysis.actor import Actor, ActorOptions, ActorParts
from bot.analysis.card_factory import CardFactory
from bot.analysis.settlement import Settlement
from bot.analysis.takeover import Takeover
from bot.analysis.turn_chain import TurnChain
from bot.control.killswitch import KillSwitch
from bot.control.subagent_desk import SubagentCards, SubagentDesk
from bot.control.subagents import SubagentRegistry
from bot.errors import BotConfigError
from bot.events import Platform
from bot.keys import BotKeys
from bot.process.failpoints import Failpoints
from bot.process.metrics_server import Render, serve_metrics
from bot.publishing.metered_platform import MeteredPlatform
from bot.publishing.platform import ChatPlatform
from bot.settings import Settings
from bot.state.audit import AuditedModel, AuditLog
from bot.state.followups import Followups
from bot.state.lease import Leases
from bot.state.runs import RunIndex
from bot.state.settle import Pricing, SettleWriter
from bot.worker.metrics import WorkerMetrics
from bot.worker.model import build_chat_model
from bot.worker.process import Worker, WorkerOptions

__all__ = [
    "INSTRUCTIONS",
    "build_actor",
    "open_clients",
    "open_worker",
    "platforms_from",
    "pricing_from",
    "require_durable_redis",
    "worker_redis",
]

CONNECT_TIMEOUT_S = 5.0
KEEPALIVE_IDLE_S = 10
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_PROBES = 3
UNACKNOWLEDGED_MS = 30_000

INSTRUCTIONS = (
    "You are chatops, an SRE assistant in an incident thread. Investigate with your tools, "
    "say what you checked, and end with a short, concrete answer. When a person corrects you, "
    "follow the correction while the original task still stands."
)


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


def pricing_from(settings: Settings) -> Pricing:
    """The model prices the settle writer books costs with."""
    return Pricing(
        prompt_per_mtok=settings.price_prompt_per_mtok,
        completion_per_mtok=settings.price_completion_per_mtok,
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


def worker_redis(url: str) -> aioredis.Redis:
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
    """
    keepalive = {
        socket.TCP_KEEPIDLE: KEEPALIVE_IDLE_S,
        socket.TCP_KEEPINTVL: KEEPALIVE_INTERVAL_S,
        socket.TCP_KEEPCNT: KEEPALIVE_PROBES,
        socket.TCP_USER_TIMEOUT: UNACKNOWLEDGED_MS,
    }
    return aioredis.Redis.from_url(
        url,
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
        redis = worker_redis(settings.redis_url)  # connects on first use, not here
        stack.push_async_callback(redis.aclose)
    platforms = platforms_from(settings, redis)
    for platform in platforms.values():
        stack.push_async_callback(platform.aclose)
    # Sub-agents' analyses have no chat thread: their card is their registry record.
    platforms[Platform.SUBAGENT] = SubagentCards(SubagentRegistry(redis))
    return redis, platforms


def _metered(
    platforms: dict[Platform, ChatPlatform], metrics: WorkerMetrics
) -> dict[Platform, ChatPlatform]:
    """The card clients, each counting its calls (the sub-agents' record is no platform call)."""
    return {
        name: client if name is Platform.SUBAGENT else MeteredPlatform(client, metrics.card_call)
        for name, client in platforms.items()
    }


def build_actor(
    *,
    runtime: Runtime,
    redis: aioredis.Redis,
    keys: BotKeys,
    leases: Leases,
    settle: SettleWriter,
    platforms: Mapping[Platform, ChatPlatform],
    options: ActorOptions | None = None,
    failpoints: Failpoints | None = None,
    subagents: SubagentDesk | None = None,
) -> Actor:
    """The worker's actor, with every collaborator it uses built here, once.

    Args:
        runtime: Runs the turns.
        redis: The worker's client.
        keys: The key layout.
        leases: The sessions' leases.
        settle: The settle writer (its audit records the cards too).
        platforms: Each platform's card client.
        options: Bounds of each analysis.
        failpoints: Where a test kills the worker; none armed by default.
        subagents: The sub-agent desk the tools share; one of its own by default.
    """
    options = options or ActorOptions()
    subagents = subagents or SubagentDesk(SubagentRegistry(redis, keys))
    settlement = Settlement(settle, subagents.registry)
    followups = Followups(redis, keys)
    turns = TurnChain(
        runtime=runtime,
        keys=keys,
        settle=settle,
        settlement=settlement,
        followups=followups,
        remedy_rungs=options.remedy_rungs,
        max_turns=options.max_turns,
        subagents=subagents,
    )
    cards = CardFactory(
        redis=redis,
        keys=keys,
        platforms=platforms,
        audit=settle.audit,
        runs=RunIndex(redis, keys, ttl_s=options.run_ttl_s),
        options=options.publisher,
        public_url=options.public_url,
    )
    parts = ActorParts(
        runtime=runtime,
        leases=leases,
        turns=turns,
        settlement=settlement,
        takeover=Takeover(redis, keys, settle, runtime.store),
        followups=followups,
        cards=cards,
        switch=KillSwitch(redis, keys),
        control=ControlPlane(redis, keys.session),
        failpoints=failpoints or Failpoints(),
    )
    return Actor(parts, options)


async def _serve(stack: AsyncExitStack, render: Render, host: str, port: int) -> None:
    """Serve `GET /metrics` until `stack` closes.

    Raises:
        BotConfigError: The address cannot be bound.
    """
    try:
        await stack.enter_async_context(serve_metrics(render, host, port))
    except OSError as exc:
        raise BotConfigError(f"metrics on {host}:{port}: {exc}") from exc


@asynccontextmanager
async def open_worker(
    settings: Settings,
    *,
    redis: aioredis.Redis | None = None,
    actor_options: ActorOptions | None = None,
    options: WorkerOptions | None = None,
    metrics_host: str = "0.0.0.0",
    metrics_port: int | None = None,
) -> AsyncIterator[Worker]:
    """Build a worker from the settings, with every client it needs; close them afterwards.

    Args:
        settings: The configuration.
        redis: A client to use instead of one from `REDIS_URL` (the caller's to close).
        actor_options: Bounds of each analysis.
        options: How much the worker takes on.
        metrics_host: Address of the worker's `GET /metrics`.
        metrics_port: Its port (default `CHATOPS_WORKER_METRICS_PORT`); 0: not served.

    Raises:
        BotConfigError: The settings cannot work, or the metrics port cannot be bound.
    """
    async with AsyncExitStack() as stack:
        redis, platforms = await open_clients(settings, redis, stack)
        metrics = WorkerMetrics()
        platforms = _metered(platforms, metrics)
        if settings.production:
            await require_durable_redis(redis)
        model, openai_client = build_chat_model(settings)
        stack.push_async_callback(openai_client.close)
        http = httpx.AsyncClient()
        stack.push_async_callback(http.aclose)
        keys = BotKeys()
        try:
            failpoints = Failpoints.parse(settings.failpoints)
        except ValueError as exc:
            raise BotConfigError(f"CHATOPS_FAILPOINTS: {exc}") from exc
        subagents = SubagentDesk(SubagentRegistry(redis, keys))
        limit = BodyLimit(max_bytes=settings.tool_max_bytes)
        # `http_get` connects to the address it checked, by IP, so pooled connections would be
        # keyed by address: with none kept, no name reuses a TLS session verified for another.
        fetch_http = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0))
        stack.push_async_callback(fetch_http.aclose)
        tools = [
            http_get_tool(HostAllowlist.parse(settings.http_allowlist), fetch_http, limit=limit),
            *subagent_tools(subagents),
        ]
        if settings.http_allowlist.strip():
            # Its own client, keeping no idle connection: every probe opens a new one, so its
            # latency includes connect and TLS, and it reads a fresh handshake's certificate.
            probe_http = httpx.AsyncClient(limits=httpx.Limits(max_keepalive_connections=0))
            stack.push_async_callback(probe_http.aclose)
            allowlist = HostAllowlist.parse(settings.http_allowlist)
            tools.append(http_probe_tool(allowlist, probe_http))
        if prometheus_url := (settings.prometheus_url or "").strip():
            try:
                tools.append(prometheus_tool(prometheus_url, http, limit=limit))
            except ConfigError as exc:
                raise BotConfigError(f"CHATOPS_PROMETHEUS_URL: {exc}") from exc
        try:
            profiles = ShellProfiles.load(settings.shell_profiles_file)
        except ConfigError as exc:
            raise BotConfigError(f"CHATOPS_SHELL_PROFILES_FILE: {exc}") from exc
        if settings.shell_allowlist.strip():
            try:
                commands = CommandAllowlist.parse(settings.shell_allowlist, profiles)
            except ConfigError as exc:
                raise BotConfigError(f"CHATOPS_SHELL_ALLOWLIST: {exc}") from exc
            cap = min(settings.tool_max_bytes, SHELL_MAX_OUTPUT_BYTES)
            tools.append(shell_tool(commands, max_output_bytes=cap))
        if settings.mcp_servers.strip():
            # The MCP SDK is imported by the first of these calls, so only when configured.
            try:
                mcp_servers = parse_mcp_servers(settings.mcp_servers)
            except ConfigError as exc:
                raise BotConfigError(f"CHATOPS_MCP_SERVERS: {exc}") from exc
            tools.extend(await open_mcp_tools(mcp_servers, stack, max_bytes=limit.max_bytes))
        toolset = failpoints.toolset(guarded(Toolset.of(tools)))
        audit = AuditLog.from_settings(redis, keys, settings)
        runtime = Runtime(
            model=AuditedModel(model),
            redis=redis,
            toolset=toolset,
            instructions=INSTRUCTIONS,
            sink=failpoints.sink(),
            limits=LoopLimits(
                budget=Budget(
                    max_model_requests=settings.max_steps,
                    max_tool_calls=settings.max_tool_calls,
                    max_identical_calls=settings.max_identical_calls,
                    max_tokens=settings.token_budget,
                ),
                steer_cancels_tools=settings.steer_cancels_tools,
                approval_timeout_s=settings.approval_timeout_s,
            ),
        )
        leases = Leases(redis, keys, ttl_s=settings.lease_ttl_s)
        actor = build_actor(
            runtime=runtime,
            redis=redis,
            keys=keys,
            leases=leases,
            settle=SettleWriter(redis, keys, pricing_from(settings), metrics, audit),
            platforms=platforms,
            options=replace(
                actor_options or ActorOptions(),
                public_url=settings.public_url,
                run_ttl_s=settings.audit_retention_s,
            ),
            failpoints=failpoints,
            subagents=subagents,
        )
        port = settings.worker_metrics_port if metrics_port is None else metrics_port
        if port:
            await _serve(stack, lambda: metrics.scrape(redis, keys), metrics_host, port)
        yield Worker(
            redis=redis,
            actor=actor,
            leases=leases,
            keys=keys,
            options=options,
            failpoints=failpoints,
            metrics=metrics,
        )
