"""The process's `BellHub`: every live turn hears its rings on one Redis connection.

A blocking read per live turn had held one pooled connection each (a worker with a hundred live
analyses exhausted its pool). These tests run many turns at once on one client and count the
connections Redis sees; they cut the hub's connection with a TCP proxy so that a stop rings while
nobody is subscribed, and check that the resubscription's check still stops the turn; and they
flood a turn with rings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from agent_core import (
    BellHub,
    ControlPlane,
    Interruptibility,
    Keys,
    Message,
    ModelResponse,
    Runtime,
    Tool,
    ToolContext,
    ToolMessage,
    Toolset,
    TurnRequest,
    TurnSignals,
    Usage,
    UserMessage,
)
from agent_core._bells import CHECK
from agent_core._llm.client import DeltaSink
from agent_core.testing import ScriptedModel, calls, text

GO = (UserMessage(content="go"),)
TURNS = 40


class CallThenAnswer:
    """Asks for the tool first in every turn, then answers (a script shared by many turns)."""

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        if isinstance(messages[-1], ToolMessage):
            return ModelResponse(message=text("done"), usage=Usage(), response_id="r2")
        return ModelResponse(message=calls(("p", "{}")), usage=Usage(), response_id="r1")


class Started:
    """Counts the tool calls that started; `all` is set once `expected` have."""

    def __init__(self, expected: int) -> None:
        self.count, self.expected, self.all = 0, expected, asyncio.Event()

    def add(self) -> None:
        self.count += 1
        if self.count >= self.expected:
            self.all.set()


def waiting_tool(started: Started, release: asyncio.Event) -> Tool:
    async def wait(args: Mapping[str, Any], ctx: ToolContext) -> str:
        started.add()
        await release.wait()
        return "released"

    return Tool(
        name="p",
        description="",
        parameters={"type": "object"},
        handler=wait,
        interruptibility=Interruptibility.ABORTABLE,
        timeout_s=60.0,
    )


async def connections_named(redis: aioredis.Redis, name: str) -> list[dict[str, Any]]:
    return [c for c in await redis.client_list() if c.get("name") == name]


async def test_many_live_turns_hear_their_stops_on_one_connection(
    redis_server: str, redis_client: aioredis.Redis
) -> None:
    worker = aioredis.Redis.from_url(redis_server, client_name="bells-worker")
    started = Started(TURNS)
    release = asyncio.Event()
    runtime = Runtime(
        model=CallThenAnswer(),
        redis=worker,
        toolset=Toolset.of([waiting_tool(started, release)]),
    )
    requests = [TurnRequest(session_id=f"s{i}", turn_id="t1", inputs=GO) for i in range(TURNS)]
    runs = [asyncio.create_task(runtime.run(r)) for r in requests]
    async with asyncio.timeout(30):
        await started.all.wait()
    held = await connections_named(redis_client, "bells-worker")
    hub = BellHub.of(worker, Keys().prefix)
    assert (hub.waiting, hub.subscriptions) == (TURNS, 1)
    commands = [c["cmd"] for c in held]
    assert commands.count("psubscribe") == 1, commands
    waiting = [c for c in commands if c.startswith(("bl", "br", "bz", "xread", "sub", "psub"))]
    assert waiting == ["psubscribe"], f"{TURNS} live turns wait on {len(waiting)} connections"

    for request in requests:
        await ControlPlane(redis_client).stop(request.session_id, "t1", by="dave")
    async with asyncio.timeout(30):
        outcomes = await asyncio.gather(*runs)
    assert [o.reason for o in outcomes] == ["stopped"] * TURNS, "each heard its own stop"
    assert hub.waiting == 0
    await worker.aclose()


class CuttableProxy:
    """A TCP proxy to Redis whose connections can be cut, refusing new ones until restored."""

    def __init__(self, redis_url: str) -> None:
        target = urlsplit(redis_url)
        self._target = (target.hostname or "127.0.0.1", target.port or 6379)
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self.cut_off = False
        self.port = 0

    async def __aenter__(self) -> CuttableProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        self._server.close()
        for pipe in self._pipes:
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    def cut(self) -> None:
        self.cut_off = True
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._writers |= {writer, up_writer}
        pipes = {
            asyncio.create_task(_pump(reader, up_writer)),
            asyncio.create_task(_pump(up_reader, writer)),
        }
        self._pipes |= pipes
        await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        writer.close()
        up_writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass


async def test_a_stop_rung_while_the_hub_is_cut_off_is_read_when_it_subscribes_again(
    redis_server: str, redis_client: aioredis.Redis
) -> None:
    started = Started(1)
    release = asyncio.Event()
    runtime = Runtime(
        model=ScriptedModel(script=[calls(("p", "{}")), text("done")]),
        redis=redis_client,
        toolset=Toolset.of([waiting_tool(started, release)]),
    )
    request = TurnRequest(session_id="s", turn_id="t1", inputs=GO)
    async with CuttableProxy(redis_server) as proxy:
        through_proxy = aioredis.Redis(host="127.0.0.1", port=proxy.port)
        hub = BellHub(through_proxy, Keys().prefix)
        signals = runtime.signals_for(request)
        signals.bells = hub
        checked = asyncio.Event()
        on_ring = signals._on_ring

        async def recording(note: str) -> None:
            await on_ring(note)
            if note == CHECK:
                checked.set()

        signals._on_ring = recording  # type: ignore[method-assign]
        run = asyncio.create_task(runtime.run(request, signals))
        async with asyncio.timeout(10):
            await started.all.wait()
            # The first subscription's check must have read the records before the stop is
            # written, or that check (late on a loaded machine) would read the tombstone itself.
            await checked.wait()
        assert hub.subscriptions == 1
        proxy.cut()  # the hub hears nothing now, and cannot subscribe again
        await ControlPlane(redis_client).stop("s", "t1", by="dave")
        await asyncio.sleep(0.3)
        assert not run.done(), "nobody heard the ring"
        proxy.cut_off = False
        async with asyncio.timeout(30):
            outcome = await run
        assert outcome.reason == "stopped"
        assert signals.stopped_by == "dave"
        assert hub.subscriptions >= 2, "stopped by the check after subscribing again"
        await through_proxy.aclose()


async def test_a_flood_of_rings_costs_a_bounded_number_of_reads(
    redis_client: aioredis.Redis,
) -> None:
    steered: list[int] = []
    keys = Keys()
    signals = TurnSignals(
        redis=redis_client,
        session_id="s",
        turn_id="t1",
        on_steer=lambda: steered.append(1),
        steer_cancels_tools=False,
    )
    await redis_client.rpush(keys.steers("s"), "a steer")
    async with signals.watching():
        async with redis_client.pipeline(transaction=False) as pipe:
            for _ in range(2000):
                pipe.publish(keys.bell("s"), "steer")
            await pipe.execute()
        await ControlPlane(redis_client).stop("s", "t1", by="dave")  # after the flood, in order
        async with asyncio.timeout(10):
            await signals.stop.wait()
    assert signals.stopped_by == "dave"
    assert 1 <= len(steered) <= 2000 // 4, f"{len(steered)} reads for 2,000 rings"
    assert BellHub.of(redis_client, keys.prefix).waiting == 0
