"""The tools' HTTP connections: a call waits for one off its clock, and one that gets none says so.

Why this way: the promise is about what the model reads back when a worker's calls outnumber its
connections, so the calls run through `run_batch` (the call's deadline is the batch's) against a
real local HTTP service, with a pool of one. Four calls of half a second each under a 1.2 s
timeout all answer only if the wait for the one connection is not counted; with the wait counted
the third would be answered "timed out" having never left the process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

import redis.asyncio as aioredis

from agent_core import ConnectionSlots, HostAllowlist, http_get_tool
from agent_core._batch import run_batch
from agent_core._diagnostics import RunDiagnostics
from agent_core._interrupts import TurnSignals
from agent_core._messages import ToolCall, ToolMessage, ToolStatus
from agent_core.tools._base import Tool, Toolset
from tests.fakes.service import SlowService
from tests.tool_context import Ctx


def fetching(service: SlowService, slots: ConnectionSlots, timeout_s: float) -> Tool:
    allowlist = HostAllowlist.parse(f"127.0.0.1:{service.port}")
    tool = http_get_tool(allowlist, slots.client(keepalive=False), slots=slots)
    return dataclasses.replace(tool, timeout_s=timeout_s)


async def batch(redis: aioredis.Redis, tool: Tool, urls: list[str]) -> list[ToolMessage]:
    calls = [
        ToolCall(id=f"c{i}", name="http_get", arguments=json.dumps({"url": url}))
        for i, url in enumerate(urls)
    ]

    async def sink(message: object) -> None:
        pass

    diag = RunDiagnostics(session_id="s-slots", turn_id="t1")
    signals = TurnSignals(redis, "s-slots", "t1")
    return await run_batch(calls, Toolset.of([tool]), Ctx(), signals, diag, sink)


async def test_the_wait_for_a_connection_is_not_the_calls_time(
    slow_service: SlowService, redis_client: aioredis.Redis
) -> None:
    slots = ConnectionSlots(1)
    tool = fetching(slow_service, slots, timeout_s=1.2)
    urls = [slow_service.url(f"/slow/500/p{i}") for i in range(4)]
    results = await batch(redis_client, tool, urls)
    assert [r.status for r in results] == [ToolStatus.OK] * 4, [r.content for r in results]
    assert all("healthy after 500 ms" in r.content for r in results)
    assert slots.waited == 3 and slots.refused == 0
    assert [h.outcome for h in slow_service.hits] == ["answered"] * 4


async def test_a_call_that_gets_no_connection_says_so_and_is_never_sent(
    slow_service: SlowService, redis_client: aioredis.Redis
) -> None:
    slots = ConnectionSlots(1, wait_s=0.3)
    tool = fetching(slow_service, slots, timeout_s=10.0)
    held = asyncio.get_running_loop().create_task(
        batch(redis_client, tool, [slow_service.url("/hold/one")])
    )
    await slow_service.wait_for_hits(1)  # the one connection is taken
    (refused,) = await batch(redis_client, tool, [slow_service.url("/ok")])
    slow_service.release("one")
    (answered,) = await held
    assert refused.status is ToolStatus.ERROR
    assert "could not get a connection within 0.3 s" in refused.content
    assert "all 1 of this worker's tool connections were in use" in refused.content
    assert "timed out" not in refused.content
    assert answered.status is ToolStatus.OK
    assert [h.path for h in slow_service.hits] == ["/hold/one"]  # the refused call never left
    assert slots.refused == 1
