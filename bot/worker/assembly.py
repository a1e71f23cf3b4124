"""Wiring: the worker built from settings, with every client it needs, and the actor's parts.

The Redis client, the platforms' card clients (`bot.worker.clients`), the model client and the
tools' HTTP clients and MCP sessions (`bot.worker.tools`) are opened here and closed when the
caller's context ends, in reverse of the order they open in; the production profile's startup
check (docs/reliability.md Q2) runs before anything is read.
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace

import redis.asyncio as aioredis

from agent_core import SEARCH_RUNBOOKS, Budget, ControlPlane, LoopLimits, Runtime
from bot.analysis.actor import Actor, ActorOptions, ActorParts
from bot.analysis.card_factory import CardFactory
from bot.analysis.settlement import Settlement
from bot.analysis.takeover import Takeover
from bot.analysis.thread_context import ThreadContext
from bot.analysis.turn_chain import TurnChain
from bot.control.killswitch import KillSwitch
from bot.control.subagent_desk import SubagentDesk
from bot.control.subagents import SubagentRegistry
from bot.errors import BotConfigError
from bot.events import Platform
from bot.keys import BotKeys
from bot.policy.alert_routes import parse_alert_routes
from bot.process.failpoints import Failpoints
from bot.process.metrics_server import Render, serve_metrics
from bot.publishing.platform import ChatPlatform
from bot.settings import Settings
from bot.state.audit import AuditedModel, AuditLog
from bot.state.followups import Followups
from bot.state.lease import Leases
from bot.state.memory import MemoryBook
from bot.state.runs import RunIndex
from bot.state.settle import Pricing, SettleWriter
from bot.worker.alert_dispatch import AlertDispatcher, DispatchOptions
from bot.worker.clients import (
    channel_posters,
    metered_platforms,
    open_clients,
    require_durable_redis,
    thread_readers,
)
from bot.worker.metrics import WorkerMetrics
from bot.worker.model import build_chat_model
from bot.worker.process import Worker, WorkerOptions
from bot.worker.prompt import read_team_instructions, system_prompt
from bot.worker.tools import open_toolset

__all__ = [
    "build_actor",
    "open_worker",
    "pricing_from",
]


def pricing_from(settings: Settings) -> Pricing:
    """The model prices the settle writer books costs with."""
    return Pricing(
        prompt_per_mtok=settings.price_prompt_per_mtok,
        completion_per_mtok=settings.price_completion_per_mtok,
    )


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
    thread_context: ThreadContext | None = None,
    memory: MemoryBook | None = None,
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
        thread_context: Reads a mention's thread for its analysis; none by default.
        memory: Where answered analyses are booked (`bot.state.memory`); none by default.
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
        thread_context=thread_context,
        memory=memory,
    )
    parts = ActorParts(
        runtime=runtime,
        leases=leases,
        turns=turns,
        settlement=settlement,
        takeover=Takeover(redis, keys, settle, runtime.store),
        followups=followups,
        cards=_card_factory(redis, keys, platforms, settle, options),
        switch=KillSwitch(redis, keys),
        control=ControlPlane(redis, keys.session),
        failpoints=failpoints or Failpoints(),
    )
    return Actor(parts, options)


def _card_factory(
    redis: aioredis.Redis,
    keys: BotKeys,
    platforms: Mapping[Platform, ChatPlatform],
    settle: SettleWriter,
    options: ActorOptions,
) -> CardFactory:
    """The factory of every analysis's progress card, auditing with the settle writer's log."""
    return CardFactory(
        redis=redis,
        keys=keys,
        platforms=platforms,
        audit=settle.audit,
        runs=RunIndex(redis, keys, ttl_s=options.run_ttl_s),
        options=options.publisher,
        public_url=options.public_url,
    )


async def _open_runtime(
    settings: Settings,
    redis: aioredis.Redis,
    failpoints: Failpoints,
    subagents: SubagentDesk,
    stack: AsyncExitStack,
    memory: MemoryBook | None = None,
    *,
    concurrency: int,
) -> Runtime:
    """The runtime of the turns, its model client and tools opened on `stack`, in that order.

    The system prompt is chatops's own (`bot.worker.prompt`), with the team's instructions file
    read before anything is opened.

    Raises:
        BotConfigError: A tool's setting or the instructions file cannot work.
    """
    team = await read_team_instructions(settings.instructions_file)
    model, openai_client = build_chat_model(settings)
    stack.push_async_callback(openai_client.close)
    toolset = await open_toolset(settings, stack, subagents, memory, concurrency=concurrency)
    runbooks = toolset.get(SEARCH_RUNBOOKS) is not None
    return Runtime(
        model=AuditedModel(model),
        redis=redis,
        toolset=failpoints.toolset(toolset),
        instructions=system_prompt(team=team, runbooks=runbooks),
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
            intent_check=settings.intent_check,
            context_window_tokens=settings.context_window_tokens,
            answer_reserve_tokens=settings.answer_reserve_tokens,
        ),
    )


def _failpoints(settings: Settings) -> Failpoints:
    """The armed failpoints.

    Raises:
        BotConfigError: `CHATOPS_FAILPOINTS` names an unknown point.
    """
    try:
        return Failpoints.parse(settings.failpoints)
    except ValueError as exc:
        raise BotConfigError(f"CHATOPS_FAILPOINTS: {exc}") from exc


def _settle_writer(
    settings: Settings, redis: aioredis.Redis, keys: BotKeys, metrics: WorkerMetrics
) -> SettleWriter:
    """The settle writer, booking costs at the configured prices into the configured audit."""
    audit = AuditLog.from_settings(redis, keys, settings)
    return SettleWriter(redis, keys, pricing_from(settings), metrics, audit)


def _alert_dispatcher(
    settings: Settings,
    redis: aioredis.Redis,
    keys: BotKeys,
    platforms: Mapping[Platform, ChatPlatform],
    metrics: WorkerMetrics,
) -> AlertDispatcher | None:
    """The worker's alert dispatcher when alerts are routed (`CHATOPS_ALERT_ROUTES`).

    The ingress decides each notification's route and writes it with the entry; the worker
    checks the value too, so a worker with a broken value does not start.

    Raises:
        BotConfigError: A route is invalid.
    """
    if not parse_alert_routes(settings.alert_routes):
        return None
    return AlertDispatcher(
        redis=redis,
        keys=keys,
        posters=channel_posters(settings, tuple(platforms), redis=redis),
        memory=MemoryBook(redis, keys, days=settings.memory_days),
        name=f"{socket.gethostname()}-{os.getpid()}-alerts",
        options=DispatchOptions(
            max_per_hour=settings.alert_max_per_hour,
            triage_steps=settings.alert_triage_steps,
            memory_days=settings.memory_days,
        ),
        registry=metrics.registry,
    )


def _actor_options(settings: Settings, options: ActorOptions | None) -> ActorOptions:
    """The caller's bounds of each analysis, with the public URL and retention configured."""
    return replace(
        options or ActorOptions(),
        public_url=settings.public_url,
        run_ttl_s=settings.audit_retention_s,
    )


async def _serve(stack: AsyncExitStack, render: Render, host: str, port: int) -> None:
    """Serve `GET /metrics` until `stack` closes; port 0: not served.

    Raises:
        BotConfigError: The address cannot be bound.
    """
    if not port:
        return
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
        if settings.production:
            await require_durable_redis(redis)
        keys = BotKeys()
        failpoints = _failpoints(settings)
        subagents = SubagentDesk(SubagentRegistry(redis, keys))
        memory = MemoryBook(redis, keys, days=settings.memory_days)
        concurrency = (options or WorkerOptions()).concurrency
        runtime = await _open_runtime(
            settings, redis, failpoints, subagents, stack, memory, concurrency=concurrency
        )
        leases = Leases(
            redis, keys, ttl_s=settings.lease_ttl_s, replicas=settings.redis_wait_replicas
        )
        actor = build_actor(
            runtime=runtime,
            redis=redis,
            keys=keys,
            leases=leases,
            settle=_settle_writer(settings, redis, keys, metrics),
            platforms=metered_platforms(platforms, metrics),
            options=_actor_options(settings, actor_options),
            failpoints=failpoints,
            subagents=subagents,
            thread_context=ThreadContext(
                thread_readers(settings), max_tokens=settings.thread_context_tokens
            ),
            memory=memory,
        )
        port = settings.worker_metrics_port if metrics_port is None else metrics_port
        await _serve(stack, lambda: metrics.scrape(redis, keys), metrics_host, port)
        alerts = _alert_dispatcher(settings, redis, keys, platforms, metrics)
        yield Worker(
            redis=redis,
            actor=actor,
            leases=leases,
            keys=keys,
            options=options,
            failpoints=failpoints,
            metrics=metrics,
            alerts=alerts,
        )
