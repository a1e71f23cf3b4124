"""The memory of past analyses against a real Redis: booking, search, window, marks, the tool.

Why this way: what the memory promises (one record per turn, the window, the first mark kept,
what a search finds and in which order) is what Redis holds and returns, so `MemoryBook` runs
against the real server (sorted sets, expiries, transactions), never a fake. Time is the test's
own clock, offset from the real one only where a record's expiry (which Redis keeps by its own
clock) must stay in the future. The tool is called through its public `Tool` interface, guarded
like the worker's, and its result is read as the model reads it.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import pytest
import redis.asyncio as aioredis

from agent_core import Toolset, guarded
from agent_core.tools._hygiene import UNTRUSTED_NOTE
from bot.events import AlertOrigin, AuthorKind, ChatEvent, Platform
from bot.keys import BotKeys
from bot.state import memory as memory_module
from bot.state.memory import (
    CUT_MARK,
    DAY_S,
    MAX_ANSWER_BYTES,
    MAX_CANDIDATES,
    MAX_LIMIT,
    MAX_TASK_BYTES,
    MemoryBook,
    PastAnalysis,
)
from bot.worker.memory_tool import MAX_OUTPUT_CHARS, PAST_ANALYSES, past_analyses_tool
from tests.tool_context import Ctx

KEYS = BotKeys()


class Clock:
    """Real time, moved on by the test."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def book(redis_client: aioredis.Redis, clock: Clock) -> MemoryBook:
    return MemoryBook(redis_client, KEYS, days=30, clock=clock)


def past(
    turn: str,
    *,
    when: float,
    task: str = "why is checkout slow?",
    answer: str = "The payments-db pool is exhausted.",
    alert: str = "",
    labels: tuple[tuple[str, str], ...] = (),
) -> PastAnalysis:
    return PastAnalysis(
        turn_id=turn,
        session_id=f"slack-{turn}",
        when=when,
        platform="slack",
        channel="C1",
        thread=f"{turn}.0",
        task=task,
        answer=answer,
        alert_name=alert,
        labels=labels,
        fingerprints=("fp1",) if alert else (),
    )


async def test_an_analysis_is_booked_once_per_turn_with_its_alert(book, clock) -> None:
    now = clock()
    first = past("t1", when=now - 60, alert="CheckoutLatencyHigh", labels=(("service", "co"),))
    await book.book(first)
    await book.book(past("t1", when=now, answer="a second answer", alert="Other"))

    (found,) = await book.search("CheckoutLatencyHigh")
    assert found == first
    assert await book.count_for_alert("CheckoutLatencyHigh") == 1
    assert await book.count_for_alert("Other") == 0
    assert await book.count_for_alert("") == 0


async def test_search_finds_the_same_alert_and_the_same_words(book, clock) -> None:
    now = clock()
    await book.book(past("a", when=now - 300, alert="CheckoutLatencyHigh", task="x", answer="y"))
    await book.book(past("b", when=now - 200, alert="DiskFull", task="disk /var", answer="z"))
    await book.book(past("c", when=now - 100, task="checkout latency p99", answer="gateway"))

    # The alert by its exact name, whatever the words; the query naming it, in any case.
    by_alert = await book.search("nothing alike", alert_name="CheckoutLatencyHigh")
    assert [p.turn_id for p in by_alert] == ["a"]
    assert [p.turn_id for p in await book.search("checkoutlatencyhigh")] == ["a"]
    assert [p.turn_id for p in await book.search("is DiskFull firing?")] == ["b"]
    # Words: task, answer, labels, alert name; common words alone match nothing.
    assert [p.turn_id for p in await book.search("Checkout LATENCY")] == ["c"]
    assert [p.turn_id for p in await book.search("the gateway")] == ["c"]
    assert await book.search("what is the alert") == []
    assert await book.search("!!! ...") == []


async def test_the_best_matches_are_kept_and_listed_most_recent_first(book, clock) -> None:
    now = clock()
    await book.book(past("two-words", when=now - 300, task="checkout latency", answer="-"))
    await book.book(past("one-word", when=now - 200, task="checkout", answer="-"))
    await book.book(past("alert", when=now - 400, alert="Latency", task="-", answer="-"))
    await book.book(past("unrelated", when=now - 100, task="disk", answer="-"))

    ranked = await book.search("checkout latency", alert_name="Latency", limit=2)
    assert [p.turn_id for p in ranked] == ["two-words", "alert"]  # best two, newest first
    ranked = await book.search("checkout latency", limit=3)
    assert [p.turn_id for p in ranked] == ["one-word", "two-words", "alert"]


async def test_ties_go_to_the_most_recent_and_the_limit_is_bounded(book, clock) -> None:
    now = clock()
    for n in range(MAX_LIMIT + 5):
        await book.book(past(f"t{n:02d}", when=now - 1000 + n, alert="Same"))
    three = await book.search("", alert_name="Same", limit=3)
    assert [p.turn_id for p in three] == ["t24", "t23", "t22"]
    assert len(await book.search("", alert_name="Same", limit=1000)) == MAX_LIMIT
    assert len(await book.search("", alert_name="Same", limit=0)) == 1
    assert await book.count_for_alert("Same") == MAX_LIMIT + 5


async def test_words_are_searched_among_the_newest_candidates_alerts_beyond(book, clock) -> None:
    now = clock()
    await book.book(past("old-words", when=now - 5000, task="zebra outage", answer="-"))
    await book.book(past("old-alert", when=now - 4000, task="-", answer="-", alert="Zebra"))
    for n in range(MAX_CANDIDATES):
        await book.book(past(f"n{n}", when=now - 1000 + n, task="other", answer="-"))
    # Both are older than the newest MAX_CANDIDATES: words no longer reach the first, the
    # alert's own index still reaches the second.
    assert [p.turn_id for p in await book.search("Zebra outage")] == ["old-alert"]


async def test_the_window_bounds_search_and_count(book, clock) -> None:
    now = clock()
    await book.book(past("recent", when=now - 2 * DAY_S, alert="A"))
    await book.book(past("older", when=now - 10 * DAY_S, alert="A"))
    await book.book(past("gone", when=now - 31 * DAY_S, alert="A"))  # past the book's window

    assert [p.turn_id for p in await book.search("", alert_name="A")] == ["recent", "older"]
    assert [p.turn_id for p in await book.search("", alert_name="A", days=5)] == ["recent"]
    assert len(await book.search("", alert_name="A", days=365)) == 2  # never past the book's
    assert await book.count_for_alert("A") == 2
    assert await book.count_for_alert("A", days=5) == 1
    assert not await book._redis.exists(KEYS.memory_record("gone"))


async def test_records_expire_and_the_indexes_are_trimmed(book, clock, redis_client) -> None:
    now = clock()
    await book.book(past("aging", when=now - 29 * DAY_S, alert="A"))
    left_ms = await redis_client.pttl(KEYS.memory_record("aging"))
    assert 0 < left_ms <= DAY_S * 1000  # it expires when its 30 days are up
    assert await redis_client.ttl(KEYS.memory_index) > 0
    assert await redis_client.ttl(KEYS.memory_alert("A")) > 0

    clock.offset = 2 * DAY_S  # two days on: out of the window
    assert await book.search("", alert_name="A") == []
    assert await book.count_for_alert("A") == 0
    await book.book(past("fresh", when=clock(), alert="A"))  # a write trims what is older
    assert await redis_client.zrange(KEYS.memory_index, 0, -1) == [b"fresh"]
    assert await redis_client.zrange(KEYS.memory_alert("A"), 0, -1) == [b"fresh"]


async def test_task_and_answer_are_cut_on_a_character_boundary(book, clock) -> None:
    await book.book(past("big", when=clock(), task="é" * 10_000, answer="中" * 10_000, alert="B"))
    (found,) = await book.search("", alert_name="B")
    assert found.task.endswith(CUT_MARK) and found.answer.endswith(CUT_MARK)
    assert len(found.task.encode()) <= MAX_TASK_BYTES
    assert len(found.answer.encode()) <= MAX_ANSWER_BYTES
    assert set(found.task.removesuffix(CUT_MARK)) == {"é"}
    assert set(found.answer.removesuffix(CUT_MARK)) == {"中"}
    small = past("small", when=clock(), task="t" * MAX_TASK_BYTES)
    assert small.bounded().task == small.task  # exactly the bound: kept whole


async def test_the_first_mark_wrong_wins_and_an_unknown_turn_is_refused(
    book, clock, redis_client
) -> None:
    await book.book(past("t1", when=clock(), alert="A"))
    assert await book.mark_wrong("t1", "slack:alice", 1_700_000_000.0)
    assert await book.mark_wrong("t1", "slack:bob", 1_700_000_100.0)  # idempotent, not kept
    (found,) = await book.search("", alert_name="A")
    assert (found.wrong_by, found.wrong_at) == ("slack:alice", 1_700_000_000.0)
    assert 0 < await redis_client.pttl(KEYS.memory_wrong("t1")) <= 30 * DAY_S * 1000

    assert not await book.mark_wrong("nobody-booked-this", "slack:alice", 1.0)
    assert not await redis_client.exists(KEYS.memory_wrong("nobody-booked-this"))


async def test_large_candidates_are_scored_off_the_event_loop(book, clock, monkeypatch) -> None:
    threaded: list[Any] = []
    to_thread = asyncio.to_thread

    async def spy(func: Any, *args: Any) -> Any:
        threaded.append(func)
        return await to_thread(func, *args)

    monkeypatch.setattr(asyncio, "to_thread", spy)
    await book.book(past("small", when=clock(), task="checkout"))
    assert len(await book.search("checkout")) == 1
    assert threaded == []
    for n in range(20):
        await book.book(past(f"big{n}", when=clock(), task="checkout", answer="x " * 8000))
    assert len(await book.search("checkout", limit=20)) == 20
    assert threaded == [memory_module._rank]


async def test_an_alert_started_event_gives_its_identity() -> None:
    origin = AlertOrigin(
        sender="alertmanager",
        incident='{}:{alertname="X"}',
        alert_name="X",
        route="checkout",
        labels=(("severity", "page"),),
        fingerprints=("f1", "f2"),
    )
    event = ChatEvent(
        platform=Platform.SLACK,
        event_id="e1",
        workspace="T1",
        channel="C1",
        thread="1.0",
        message_id="",
        author="alert:alertmanager",
        author_kind=AuthorKind.ALERT,
        text="Alert X is firing",
        alert=origin,
    )
    analysis = PastAnalysis.of(event, turn_id="t1", answer="found it", when=5.0)
    assert (analysis.task, analysis.answer, analysis.session_id) == (
        "Alert X is firing",
        "found it",
        event.session_id,
    )
    assert (analysis.alert_name, analysis.incident, analysis.sender, analysis.route) == (
        "X",
        origin.incident,
        "alertmanager",
        "checkout",
    )
    assert analysis.labels == (("severity", "page"),) and analysis.fingerprints == ("f1", "f2")


async def test_a_booking_that_fails_is_logged_never_raised(caplog) -> None:
    closed_port = aioredis.Redis(host="127.0.0.1", port=9)
    broken = MemoryBook(closed_port, KEYS, days=30)
    assert not await broken.book_safely(past("t1", when=time.time()), timeout_s=5)
    assert "t1 not booked in memory" in caplog.text
    await closed_port.aclose()


# The tool, as the worker offers it: guarded, called through its `Tool`.


def tool_of(book: MemoryBook) -> Any:
    tool = guarded(Toolset.of([past_analyses_tool(book)])).get(PAST_ANALYSES)
    assert tool is not None
    return tool


def utc(when: float) -> str:
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


async def test_the_tool_lists_earlier_analyses_newest_first(book, clock) -> None:
    when = clock() - 3 * DAY_S
    await book.book(
        past(
            "first",
            when=when,
            alert="CheckoutLatencyHigh",
            labels=(("service", "checkout"), ("severity", "page")),
            answer="Findings: payments-db pool exhausted [2].",
        )
    )
    await book.book(past("second", when=when + DAY_S, alert="CheckoutLatencyHigh", answer="ok"))
    assert await book.mark_wrong("second", "slack:U0BOB", when + DAY_S + 3600)

    tool = tool_of(book)
    assert tool.risk.value == "read_only" and tool.idempotent
    text = await tool.handler({"query": "CheckoutLatencyHigh"}, Ctx())
    assert text.startswith(UNTRUSTED_NOTE)  # quoted as data, like every tool's output
    assert "2 earlier analyses for 'CheckoutLatencyHigh' in the last 30 days" in text
    assert text.index(utc(when + DAY_S)) < text.index(utc(when))
    assert "alert CheckoutLatencyHigh {service=checkout, severity=page}" in text
    assert "task: why is checkout slow?" in text
    assert "payments-db pool exhausted [2]." in text
    marked = f"MARKED WRONG by slack:U0BOB at {utc(when + DAY_S + 3600)} — do not rely on it"
    assert text.count("MARKED WRONG") == 1 and marked in text
    assert text.index(marked) < text.index(utc(when))  # on the marked one, the newer


async def test_the_tool_says_when_there_is_nothing_and_keeps_its_window(book, clock) -> None:
    tool = tool_of(book)
    text = await tool.handler({"query": "disk full"}, Ctx())
    assert "no earlier analyses for 'disk full' in the last 30 days" in text
    await book.book(past("old", when=clock() - 10 * DAY_S, task="disk full"))
    assert "no earlier analyses" in await tool.handler({"query": "disk", "days": 5}, Ctx())
    wide = await tool.handler({"query": "disk", "days": 400}, Ctx())
    assert "1 earlier analysis for 'disk' in the last 30 days" in wide
    schema = guarded(Toolset.of([past_analyses_tool(book)]))
    with pytest.raises(Exception, match="query"):
        schema.check_arguments(PAST_ANALYSES, {})


async def test_the_tool_output_is_bounded(book, clock) -> None:
    for n in range(8):
        await book.book(past(f"t{n}", when=clock() - n, alert="Big", answer="w " * 8000))
    text = await tool_of(book).handler({"query": "Big"}, Ctx())
    assert text.count("answer:") == 5  # at most five analyses listed
    assert len(text) < MAX_OUTPUT_CHARS + 1_000  # and the whole within its room (plus framing)
