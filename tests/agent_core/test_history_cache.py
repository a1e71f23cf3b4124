"""Reading a session's history costs what its new part costs: the store's cache, against Redis.

Why this way: what must hold is about Redis (how many bytes a turn reads, and that what a turn
sees is exactly what the list holds), so every test runs a real redis-server and counts bytes
with the server's own `INFO stats` counter (`total_net_output_bytes`, less what the `INFO`
reply itself adds), never times. The other writers a worker shares a session with are real
too: a second `HistoryStore` (another worker appending or repairing), and a bare client writing
the list behind the store's back. Each cached read is compared with a fresh store's read. The
runtime is driven through `Runtime.run` with `ScriptedModel`, which rejects any broken history.
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

import pytest
import redis.asyncio as aioredis

import agent_core._history_cache as history_cache
import agent_core._turn as turn_module
from agent_core import (
    AssistantMessage,
    Completed,
    Keys,
    Message,
    Runtime,
    ToolCall,
    ToolMessage,
    Toolset,
    TurnRequest,
    UserMessage,
    dump_message,
    validate_history,
)
from agent_core._errors import StoreError
from agent_core._history import CheckedPrefix, validate_from
from agent_core._history_cache import HistoryCache
from agent_core._llm.convert import _MEMO, messages_to_wire
from agent_core._store import Fence, HistoryStore
from agent_core.testing import ScriptedModel, text

SESSION = "s-cache"


def analysis(tag: str, batches: int = 3, result_chars: int = 800) -> list[Message]:
    """One closed analysis: a task, batches of two calls with their results, an answer."""
    out: list[Message] = [UserMessage(content=f"task {tag}: why is checkout slow?")]
    for b in range(batches):
        calls = tuple(ToolCall(id=f"c-{tag}-{b}-{i}", name="read_logs") for i in range(2))
        out.append(AssistantMessage(content="checking", tool_calls=calls))
        out += [
            ToolMessage(call_id=c.id, name=c.name, content=f"{c.id} " + "x" * result_chars)
            for c in calls
        ]
    out.append(AssistantMessage(content=f"answer {tag}"))
    return out


def history_of(size: int, tag: str = "h") -> list[Message]:
    """A closed history of at least `size` messages, analyses after analyses."""
    out: list[Message] = []
    n = 0
    while len(out) < size:
        out += analysis(f"{tag}{n}")
        n += 1
    return out


async def write_raw(client: aioredis.Redis, session: str, messages: list[Message]) -> None:
    """Write the list as another process would, outside any `HistoryStore`."""
    await client.rpush(Keys().history(session), *(dump_message(m) for m in messages))


async def output_bytes(client: aioredis.Redis) -> int:
    stats: Mapping[str, Any] = await client.info("stats")
    return int(stats["total_net_output_bytes"])


async def bytes_of(client: aioredis.Redis, action: Any) -> int:
    """What the server sent while `action` ran, less what the counting `INFO` added."""
    before = await output_bytes(client)
    overhead = await output_bytes(client) - before
    before = await output_bytes(client)
    await action()
    return await output_bytes(client) - before - overhead


def runtime_on(redis_client: aioredis.Redis, answers: int) -> Runtime:
    model = ScriptedModel(script=[text(f"answer {i}") for i in range(answers)])
    return Runtime(model=model, redis=redis_client, toolset=Toolset())


def ask(session: str, turn: str) -> TurnRequest:
    return TurnRequest(
        session_id=session,
        turn_id=turn,
        inputs=(UserMessage(content="and the payments service?", author="bob"),),
    )


async def test_bytes_read_per_turn_stay_flat_as_the_history_grows(
    redis_client: aioredis.Redis,
) -> None:
    sizes = (10, 300, 1200)
    for size in sizes:
        await write_raw(redis_client, f"s{size}", history_of(size, tag=f"s{size}-"))
    runtime = runtime_on(redis_client, answers=3 * len(sizes))
    per_turn: dict[int, list[int]] = {}
    for size in sizes:
        session = f"s{size}"
        first = await runtime.run(ask(session, "t1"))  # the worker reads the session once
        assert isinstance(first.result, Completed)
        per_turn[size] = []
        for turn in ("t2", "t3"):

            async def one_turn(turn: str = turn, session: str = session) -> None:
                outcome = await runtime.run(ask(session, turn))
                assert isinstance(outcome.result, Completed)

            per_turn[size].append(await bytes_of(redis_client, one_turn))
    stored = sum(len(m.model_dump_json()) for m in history_of(1200))
    small, large = per_turn[10], per_turn[1200]
    # A turn's replies are the same commands whatever the history's size; only the numbers
    # in them (a generation, a length) may take a digit more.
    assert all(abs(b - a) <= 16 for a, b in zip(small, large, strict=True)), per_turn
    assert max(large) < stored / 100, (per_turn, stored)


async def test_the_first_read_is_whole_and_later_reads_only_the_new_part(
    redis_client: aioredis.Redis,
) -> None:
    history = history_of(400)
    await write_raw(redis_client, SESSION, history)
    store = HistoryStore(redis_client)
    stored = sum(len(dump_message(m)) for m in history)

    async def begin(turn: str) -> None:
        await store.begin_turn(SESSION, turn, [UserMessage(content="more?")])

    cold = await bytes_of(redis_client, lambda: begin("t1"))
    warm = await bytes_of(redis_client, lambda: begin("t2"))
    assert cold > stored
    assert warm < 400  # the reply's frame, the new input, generation and offset
    assert await store.load(SESSION) == await HistoryStore(redis_client).load(SESSION)


async def test_appends_by_another_worker_are_read_as_the_tail(
    redis_client: aioredis.Redis,
) -> None:
    await write_raw(redis_client, SESSION, history_of(60))
    ours, theirs = HistoryStore(redis_client), HistoryStore(redis_client)
    await ours.begin_turn(SESSION, "t1", [UserMessage(content="first")])
    # Another worker took the session over: its turn begins, closes a batch and an answer.
    await theirs.begin_turn(SESSION, "t2", [UserMessage(content="second")])
    group = analysis("theirs", batches=1)
    await theirs.append_closed(SESSION, "t2", group[1:4])
    await theirs.append_closed(SESSION, "t2", group[4:])
    start = await ours.begin_turn(SESSION, "t3", [UserMessage(content="third")])
    fresh = await HistoryStore(redis_client).load(SESSION)
    assert start.history == fresh
    assert fresh[-1] == UserMessage(content="third")
    assert start.checked is not None and start.checked.length == len(fresh)


async def test_a_bare_client_appending_is_read_too(redis_client: aioredis.Redis) -> None:
    await write_raw(redis_client, SESSION, history_of(30))
    store = HistoryStore(redis_client)
    await store.load(SESSION)
    await write_raw(redis_client, SESSION, analysis("late"))
    assert await store.load(SESSION) == await HistoryStore(redis_client).load(SESSION)
    start = await store.begin_turn(SESSION, "t1", [UserMessage(content="now")])
    assert start.history == await HistoryStore(redis_client).load(SESSION)


def repaired_copy(history: list[Message]) -> list[Message]:
    """A repair elsewhere rewrote earlier messages, keeping the length and the last item."""
    repaired = [*history]
    repaired[2] = AssistantMessage(content="rewritten by a repair")
    repaired[3] = UserMessage(content="rewritten too")
    return repaired


@pytest.mark.parametrize("read", ["begin_turn", "load"])
async def test_a_replace_by_another_store_is_seen_even_at_the_same_length(
    redis_client: aioredis.Redis, read: str
) -> None:
    history = history_of(40)
    await write_raw(redis_client, SESSION, history)
    ours, theirs = HistoryStore(redis_client), HistoryStore(redis_client)
    assert await ours.load(SESSION) == history
    repaired = repaired_copy(history)
    await theirs.replace(SESSION, repaired)
    if read == "load":
        assert await ours.load(SESSION) == repaired
    else:
        start = await ours.begin_turn(SESSION, "t1", [UserMessage(content="after the repair")])
        assert start.history == [*repaired, UserMessage(content="after the repair")]
    assert await ours.load(SESSION) == await HistoryStore(redis_client).load(SESSION)
    assert await redis_client.get(Keys().history_generation(SESSION)) == b"1"


async def test_our_own_replace_and_appends_keep_the_cache_exact(
    redis_client: aioredis.Redis,
) -> None:
    store = HistoryStore(redis_client)
    await store.begin_turn(SESSION, "t1", [UserMessage(content="task")])
    await store.replace(SESSION, [UserMessage(content="only this")])
    await store.append_closed(SESSION, "t1", [AssistantMessage(content="ok")])
    expected = [UserMessage(content="only this"), AssistantMessage(content="ok")]
    assert store.cache.get(SESSION) is not None
    assert list(store.cache.get(SESSION).messages) == expected  # type: ignore[union-attr]
    assert await HistoryStore(redis_client).load(SESSION) == expected
    assert await store.load(SESSION) == expected


async def test_a_list_rewritten_behind_the_stores_back_is_read_whole(
    redis_client: aioredis.Redis,
) -> None:
    """The session's keys deleted and the thread started over: the generation is 0 again."""
    await write_raw(redis_client, SESSION, history_of(20, tag="old"))
    store = HistoryStore(redis_client)
    await store.load(SESSION)
    await redis_client.delete(Keys().history(SESSION), Keys().history_generation(SESSION))
    await write_raw(redis_client, SESSION, history_of(30, tag="new"))
    assert await store.load(SESSION) == history_of(30, tag="new")
    await redis_client.delete(Keys().history(SESSION))
    await write_raw(redis_client, SESSION, history_of(45, tag="newer"))
    start = await store.begin_turn(SESSION, "t1")
    assert start.history == history_of(45, tag="newer")


async def test_a_fenced_writer_is_refused_and_changes_nothing(
    redis_client: aioredis.Redis,
) -> None:
    lease = Keys().key(SESSION, ":live")
    await redis_client.set(lease, "2|w2|t")
    await write_raw(redis_client, SESSION, history_of(20))
    store = HistoryStore(redis_client)
    await store.load(SESSION)
    before = store.cache.get(SESSION)
    with pytest.raises(StoreError, match="fenced"):
        await store.begin_turn(SESSION, "t1", [UserMessage(content="x")], Fence(lease, 1))
    with pytest.raises(StoreError, match="fenced"):
        await store.append_closed(SESSION, "t1", [AssistantMessage(content="x")], Fence(lease, 1))
    assert store.cache.get(SESSION) is before
    assert await HistoryStore(redis_client).load(SESSION) == history_of(20)


async def test_an_evicted_session_is_read_whole_and_right(redis_client: aioredis.Redis) -> None:
    for n in range(3):
        await write_raw(redis_client, f"s{n}", history_of(20, tag=f"s{n}-"))
    store = HistoryStore(redis_client, cache=HistoryCache(max_sessions=2))
    for n in range(3):
        await store.load(f"s{n}")
    assert store.cache.get("s0") is None  # the least recently used went first
    whole = sum(len(dump_message(m)) for m in history_of(20, tag="s0-"))
    read = await bytes_of(redis_client, lambda: store.load("s0"))
    assert read > whole
    assert await store.load("s0") == history_of(20, tag="s0-")
    assert store.cache.get("s1") is None and len(store.cache) == 2


async def test_the_cache_stays_within_its_bounds(redis_client: aioredis.Redis) -> None:
    one = sum(len(dump_message(m)) for m in history_of(50, tag="s0-"))
    cache = HistoryCache(max_sessions=100, max_bytes=int(one * 3.5))
    store = HistoryStore(redis_client, cache=cache)
    for n in range(12):
        await write_raw(redis_client, f"s{n}", history_of(50, tag=f"s{n}-"))
        await store.load(f"s{n}")
        assert cache.held_bytes <= cache.max_bytes
    assert len(cache) == 3
    assert [cache.get(f"s{n}") is not None for n in (9, 10, 11)] == [True, True, True]
    # A history larger than the whole bound is read but never kept.
    await write_raw(redis_client, "huge", history_of(200, tag="huge-"))
    assert await store.load("huge") == history_of(200, tag="huge-")
    assert cache.get("huge") is None and cache.held_bytes <= cache.max_bytes


async def test_a_run_validates_only_what_is_new(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted: messages each validation pass looks at, over the turns of a long session."""
    await write_raw(redis_client, SESSION, history_of(600))
    runtime = runtime_on(redis_client, answers=3)
    looked_at: list[int] = []

    def counting(messages: Any, prefix: CheckedPrefix | None = None) -> CheckedPrefix:
        looked_at.append(len(messages) - (prefix.length if prefix else 0))
        return validate_from(messages, prefix)

    monkeypatch.setattr(turn_module, "validate_from", counting)
    monkeypatch.setattr(history_cache, "validate_from", counting)
    for turn in ("t1", "t2", "t3"):
        outcome = await runtime.run(ask(SESSION, turn))
        assert isinstance(outcome.result, Completed)
        if turn == "t1":  # the first read of the session validates it whole, once
            assert max(looked_at) >= 600
            looked_at.clear()
    assert looked_at and max(looked_at) <= 2, looked_at
    validate_history(await HistoryStore(redis_client).load(SESSION))


def test_each_message_is_converted_once_while_it_lives() -> None:
    history = history_of(30)
    first = messages_to_wire(history)
    again = messages_to_wire(history)
    assert all(a is b for a, b in zip(first, again, strict=True))
    rebuilt = [m.model_copy() for m in history]  # equal, other objects: converted afresh
    assert messages_to_wire(rebuilt) == first
    held = len(_MEMO)
    del history, rebuilt, first, again
    gc.collect()
    assert len(_MEMO) <= held - 60  # both copies' entries left with their messages
