"""Concurrent calls of one script, batched: each gets its own reply, on one connection.

Why this way: `ScriptBatch` replaces one round trip per call with one per turn of the event loop,
so what must hold is what a caller of `script(keys=, args=)` could see: its own reply or its own
error whatever the others' were, a Redis that lost its scripts, a connection the server killed
mid-batch, a caller that stopped waiting. Everything runs against the real redis-server; the
connections a batch uses are counted on the server (its CLIENT LIST, by client name), and a
script that counts its own runs shows when a call was sent again.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from bot.process.redis_pool import pooled_redis
from bot.process.script_batch import ScriptBatch

NAME = "script-batch"
CALLS = 20


@pytest.fixture
async def client(redis_server: str) -> AsyncIterator[aioredis.Redis]:
    redis = pooled_redis(f"{redis_server}?client_name={NAME}", socket_timeout=None)
    try:
        yield redis
    finally:
        await redis.aclose()


async def connections(admin: aioredis.Redis) -> int:
    listed: Any = await admin.client_list()
    return sum(1 for c in listed if c.get("name") == NAME)


async def kill_batch_connection(admin: aioredis.Redis) -> int:
    listed: Any = await admin.client_list()
    ids = [c["id"] for c in listed if c.get("name") == NAME]
    return sum([await admin.client_kill_filter(_id=i) for i in ids])


async def test_concurrent_calls_get_their_own_replies_over_one_connection(
    client: aioredis.Redis, redis_client: aioredis.Redis
) -> None:
    """Twenty calls in one turn of the loop: twenty replies, each its own, one connection."""
    batch = ScriptBatch(client, client.register_script("return {KEYS[1], ARGV[1], ARGV[2] + 1}"))
    replies = await asyncio.gather(*(batch([f"batch:{n}"], [f"é{n}", n]) for n in range(CALLS)))
    assert replies == [[f"batch:{n}".encode(), f"é{n}".encode(), n + 1] for n in range(CALLS)]
    assert await connections(redis_client) == 1


async def test_a_script_error_is_only_its_own_calls(client: aioredis.Redis) -> None:
    batch = ScriptBatch(
        client,
        client.register_script(
            "if ARGV[1] == 'bad' then return redis.error_reply('ERR no') end return ARGV[1]"
        ),
    )
    calls = [batch([], ["good"]), batch([], ["bad"]), batch([], ["after"])]
    answers: list[Any] = await asyncio.gather(*calls, return_exceptions=True)
    assert (answers[0], answers[2]) == (b"good", b"after")
    assert isinstance(answers[1], ResponseError) and "no" in str(answers[1])


async def test_a_redis_that_lost_its_scripts_is_given_it_again(client: aioredis.Redis) -> None:
    batch = ScriptBatch(client, client.register_script("return ARGV[1]"))
    assert await batch([], ["one"]) == b"one"
    await client.script_flush()
    answers = list(await asyncio.gather(batch([], ["two"]), batch([], ["three"])))
    assert answers == [b"two", b"three"]


async def test_a_connection_killed_mid_batch_is_replaced_and_the_calls_sent_again(
    client: aioredis.Redis, redis_client: aioredis.Redis
) -> None:
    """The server kills the batch's connection while it holds its script: the call is sent again.

    CLIENT PAUSE WRITE holds every script; the call is answered once the pause ends.
    """
    counting = client.register_script("return redis.call('INCR', KEYS[1])")
    await redis_client.delete("batch:runs")
    batch = ScriptBatch(client, counting)
    assert await batch(["batch:runs"], []) == 1  # connected, the script loaded
    await redis_client.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        call = asyncio.get_running_loop().create_task(batch(["batch:runs"], []))
        await asyncio.sleep(0.1)  # sent, and held by the pause
        assert await kill_batch_connection(redis_client) == 1
        await asyncio.sleep(0.1)  # the batch saw its connection closed and sent the call again
        assert not call.done()
    finally:
        await redis_client.execute_command("CLIENT", "UNPAUSE")
    assert await asyncio.wait_for(call, 5) == 2
    assert await connections(redis_client) == 1


async def test_a_caller_that_stops_waiting_leaves_the_batch_to_the_others(
    client: aioredis.Redis,
) -> None:
    batch = ScriptBatch(client, client.register_script("return ARGV[1]"))
    gone = asyncio.get_running_loop().create_task(batch([], ["gone"]))
    stays = asyncio.get_running_loop().create_task(batch([], ["stays"]))
    await asyncio.sleep(0)
    gone.cancel()
    assert await stays == b"stays"
    with pytest.raises(asyncio.CancelledError):
        await gone
    await batch.aclose()
    assert await batch([], ["next"]) == b"next"


async def test_a_batch_nobody_waits_for_is_abandoned_and_its_connection_dropped(
    client: aioredis.Redis, redis_client: aioredis.Redis
) -> None:
    """Its only caller's deadline passes while Redis holds the script: the connection is closed.

    So the held command never runs, and the pool does not wait on a stalled Redis for nobody.
    """
    counting = client.register_script("return redis.call('INCR', KEYS[1])")
    await redis_client.delete("batch:abandoned")
    batch = ScriptBatch(client, counting)
    assert await batch(["batch:other"], []) >= 1  # connected, the script loaded
    await redis_client.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await batch(["batch:abandoned"], [])
        await batch.aclose()
        assert await connections(redis_client) == 0
    finally:
        await redis_client.execute_command("CLIENT", "UNPAUSE")
    assert await redis_client.get("batch:abandoned") is None
    assert await batch(["batch:abandoned"], []) == 1


async def test_a_failover_mid_batch_is_a_lost_connection_then_a_redis_without_the_script(
    client: aioredis.Redis, redis_client: aioredis.Redis
) -> None:
    """The batch's connection dies, and the Redis it reaches next has no scripts: both survived.

    Each has its own tries, and every call runs once.
    """
    counting = client.register_script("return redis.call('INCR', KEYS[1])")
    await redis_client.delete("batch:failover")
    batch = ScriptBatch(client, counting)
    assert await batch(["batch:failover"], []) == 1
    await redis_client.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        loop = asyncio.get_running_loop()
        calls = [loop.create_task(batch(["batch:failover"], [])) for _ in range(3)]
        await asyncio.sleep(0.1)  # sent, and held by the pause
        await redis_client.script_flush()  # the Redis it reaches next has no scripts
        assert await kill_batch_connection(redis_client) == 1
        await asyncio.sleep(0.1)
    finally:
        await redis_client.execute_command("CLIENT", "UNPAUSE")
    assert sorted(await asyncio.wait_for(asyncio.gather(*calls), 5)) == [2, 3, 4]


async def test_a_script_that_does_not_compile_is_its_callers_error(
    client: aioredis.Redis,
) -> None:
    """As with `script()`: a `ResponseError` naming the compile error, not a lost connection."""
    batch = ScriptBatch(client, client.register_script("return ("))
    with pytest.raises(ResponseError, match="compil"):
        await batch([], [])
