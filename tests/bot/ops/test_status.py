"""`chatops status SESSION`: an analysis and its sub-agents, printed as a tree or as JSON.

Why this way: the command only reads what the bot writes, so the tree is built in real Redis
through the same public API the bot uses (`SubagentRegistry.dispatch` and `move` for children
and a grandchild, `CardRecord.claim` for cards), never by writing keys by hand; a change in
either store's layout then shows up here. The command runs as operators run it, the installed
console script with REDIS_URL in its environment, and the assertions read what it printed.
Rendering details that need no Redis (markup in a task, long and multi-line text) are checked
on `render_tree` directly.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import redis.asyncio as aioredis
from rich.console import Console

from agent_core import UserMessage
from agent_core._store import HistoryStore
from bot.control.subagents import ChildRecord, ChildState, SubagentRegistry, child_event
from bot.events import ChatEvent, Platform
from bot.keys import BotKeys
from bot.ops.status import (
    LINE_MAX,
    CardSummary,
    ChildStatus,
    SessionStatus,
    read_status,
    render_tree,
)
from bot.publishing.card_record import CardRecord
from cards._model import CardStatus, ProgressCard

CHATOPS = str(Path(sys.executable).with_name("chatops"))
KEYS = BotKeys()
CHILD_KEYS = {
    "child_id",
    "state",
    "task",
    "report",
    "question",
    "parent_turn",
    "created_at",
    "updated_at",
    "session_id",
    "card",
    "children",
}

PARENT = ChatEvent(
    platform=Platform.SLACK,
    event_id="Ev-status-1",
    workspace="T1",
    channel="C1",
    thread="1700000000.000100",
    message_id="1700000000.000100",
    author="U0ONCALL",
    text="Why is checkout slow?",
)
SESSION = PARENT.session_id


@dataclass
class Built:
    gateway: ChildRecord
    database: ChildRecord
    cache: ChildRecord
    grandchild: ChildRecord


async def show(redis: aioredis.Redis, session: str, title: str, status: CardStatus) -> None:
    card = ProgressCard(title=title, turn_id=f"turn-{session}", status=status)
    assert await CardRecord(redis, KEYS, session).claim(1, card) > 0


async def build_tree(redis: aioredis.Redis) -> Built:
    """A dispatched analysis: three children (done, awaiting, running) and one grandchild."""
    registry = SubagentRegistry(redis, KEYS)
    await show(redis, SESSION, "Why is checkout slow?", CardStatus.DISPATCHED)
    gateway = await registry.dispatch(PARENT, SESSION, "turn-1", "check the gateway latency")
    database = await registry.dispatch(PARENT, SESSION, "turn-1", "check the orders database")
    cache = await registry.dispatch(PARENT, SESSION, "turn-1", "check the cache hit ratio")
    assert gateway and database and cache
    await registry.move(gateway, ChildState.RUNNING)
    done = "p99 is 40 ms at the gateway\nthe slowness is behind it"
    assert await registry.move(gateway, ChildState.DONE, report=done) is ChildState.DONE
    await show(redis, gateway.session_id, gateway.task, CardStatus.ANSWERED)
    asked = await registry.move(database, ChildState.AWAITING, question="Which cluster, eu or us?")
    assert asked is ChildState.AWAITING
    await registry.move(cache, ChildState.RUNNING)
    await show(redis, cache.session_id, cache.task, CardStatus.DISPATCHED)
    cache_event = child_event(PARENT, SESSION, cache.child_id, cache.task)
    grandchild = await registry.dispatch(
        cache_event, cache.session_id, "turn-c1", "count evictions per node"
    )
    assert grandchild is not None
    return Built(gateway=gateway, database=database, cache=cache, grandchild=grandchild)


async def chatops_status(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [CHATOPS, "status", *args],
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def line_with(out: str, needle: str) -> str:
    [line] = [line for line in out.splitlines() if needle in line]
    return line


def indent_of(line: str) -> int:
    return line.index("sub-")


async def test_the_tree_is_read_from_the_registries_and_card_records(redis_client) -> None:
    built = await build_tree(redis_client)
    tree = await read_status(redis_client, SESSION)
    assert tree is not None and tree.card is not None
    assert (tree.card.status, tree.card.title, tree.card.final) == (
        "dispatched",
        "Why is checkout slow?",
        False,
    )
    ids = [c.record.child_id for c in tree.children]
    assert ids == [built.gateway.child_id, built.database.child_id, built.cache.child_id]
    gateway, database, cache = tree.children
    assert gateway.record.state is ChildState.DONE and gateway.analysis.card is not None
    assert gateway.analysis.card.status == "answered" and gateway.analysis.card.final
    assert database.analysis.card is None  # it never showed a card
    [grandchild] = cache.analysis.children
    assert grandchild.record.child_id == built.grandchild.child_id
    assert grandchild.record.state is ChildState.PENDING and grandchild.analysis.children == ()


async def test_status_prints_the_tree_with_states_tasks_reports_and_questions(
    redis_server, redis_client
) -> None:
    built = await build_tree(redis_client)
    done = await chatops_status(redis_server, SESSION)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.splitlines()[0] == f"{SESSION}  dispatched  Why is checkout slow?"
    for record, state in [
        (built.gateway, "done"),
        (built.database, "awaiting"),
        (built.cache, "running"),
        (built.grandchild, "pending"),
    ]:
        line = line_with(out, record.child_id)
        assert state in line and record.task in line, line
    # The report's first line (marked as cut), and the question still waiting for an answer.
    assert "report: p99 is 40 ms at the gateway …" in out
    assert "the slowness is behind it" not in out
    assert "asks: Which cluster, eu or us?" in out
    # The grandchild sits below its parent, one level deeper; its siblings' levels are equal.
    child = line_with(out, built.cache.child_id)
    nested = line_with(out, built.grandchild.child_id)
    assert indent_of(nested) > indent_of(child) == indent_of(line_with(out, built.gateway.child_id))
    assert out.index(built.cache.child_id) < out.index(built.grandchild.child_id)


async def test_json_has_the_same_tree_under_stable_keys(redis_server, redis_client) -> None:
    built = await build_tree(redis_client)
    done = await chatops_status(redis_server, SESSION, "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == {"session_id", "card", "children"}
    assert data["session_id"] == SESSION
    assert data["card"] == {
        "status": "dispatched",
        "title": "Why is checkout slow?",
        "final": False,
    }
    gateway, database, cache = data["children"]
    for node in (gateway, database, cache):
        assert set(node) == CHILD_KEYS
    assert (gateway["child_id"], gateway["state"]) == (built.gateway.child_id, "done")
    assert gateway["report"].splitlines() == [
        "p99 is 40 ms at the gateway",
        "the slowness is behind it",
    ]
    assert gateway["card"]["status"] == "answered" and gateway["card"]["final"] is True
    assert gateway["session_id"] == built.gateway.session_id
    assert (database["state"], database["question"], database["card"]) == (
        "awaiting",
        "Which cluster, eu or us?",
        None,
    )
    [grandchild] = cache["children"]
    assert set(grandchild) == CHILD_KEYS
    assert grandchild["child_id"] == built.grandchild.child_id
    assert (grandchild["state"], grandchild["task"], grandchild["children"]) == (
        "pending",
        "count evictions per node",
        [],
    )


async def test_a_session_without_sub_agents_prints_its_card_alone(
    redis_server, redis_client
) -> None:
    await show(redis_client, SESSION, "Is the API up?", CardStatus.ANSWERED)
    done = await chatops_status(redis_server, SESSION)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{SESSION}  answered  Is the API up?"]


async def test_a_child_session_can_be_asked_for_directly(redis_server, redis_client) -> None:
    built = await build_tree(redis_client)
    done = await chatops_status(redis_server, built.cache.session_id)
    assert done.returncode == 0, done.stderr
    first, nested = done.stdout.splitlines()
    assert first == f"{built.cache.session_id}  dispatched  {built.cache.task}"
    assert built.grandchild.child_id in nested and "pending" in nested


async def test_a_session_known_only_by_its_history_has_no_card(redis_server, redis_client) -> None:
    # A thread whose card record expired (or was never written) still has its history.
    history = HistoryStore(redis_client, KEYS.session)
    await history.replace(SESSION, [UserMessage(content="Why is checkout slow?")])
    done = await chatops_status(redis_server, SESSION)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{SESSION}  no card"]


async def test_an_unknown_session_is_refused_with_exit_status_1(redis_server, redis_client) -> None:
    await build_tree(redis_client)
    done = await chatops_status(redis_server, "slack-00000000000000000000")
    assert done.returncode == 1
    assert done.stdout == ""
    assert "no session 'slack-00000000000000000000' in Redis" in done.stderr
    assert "Traceback" not in done.stderr


async def test_unreachable_redis_is_a_message_not_a_traceback(redis_client) -> None:
    done = await chatops_status("redis://127.0.0.1:9/0", SESSION)
    assert done.returncode == 2
    assert "chatops status:" in done.stderr and "Traceback" not in done.stderr


def test_help_lists_the_command_and_says_where_session_ids_are() -> None:
    top = subprocess.run([CHATOPS, "--help"], capture_output=True, text=True, timeout=60)
    assert top.returncode == 0 and "status" in top.stdout
    own = subprocess.run([CHATOPS, "status", "--help"], capture_output=True, text=True, timeout=60)
    assert own.returncode == 0
    text = " ".join(own.stdout.split())
    assert "--json" in text and "settles book" in text and "{chatops}:SESSION:card" in text


def rendered(tree: SessionStatus) -> str:
    buffer = StringIO()
    Console(file=buffer, width=1000, highlight=False).print(render_tree(tree))
    return buffer.getvalue()


def test_task_text_is_printed_as_written_not_as_markup() -> None:
    record = ChildRecord(
        child_id="sub-1",
        session_id="subagent-1",
        parent_session="slack-1",
        parent_turn="turn-1",
        task="grep [bold]ERROR[/bold] in /var/log",
        state=ChildState.FAILED,
        report="",
    )
    tree = SessionStatus(
        session_id="slack-1",
        card=CardSummary(status="working", title="[red]x", final=False),
        children=(ChildStatus(record=record, analysis=SessionStatus(session_id="s", card=None)),),
    )
    out = rendered(tree)
    assert "grep [bold]ERROR[/bold] in /var/log" in out and "[red]x" in out


def test_long_and_multi_line_text_is_shortened_to_one_line() -> None:
    long_title = "x" * (LINE_MAX + 50)
    tree = SessionStatus(
        session_id="slack-1", card=CardSummary(status="working", title=long_title, final=False)
    )
    [line] = rendered(tree).splitlines()
    assert line.endswith("x" * (LINE_MAX - 1) + "…")
    multi = SessionStatus(
        session_id="slack-1",
        card=CardSummary(status="working", title="first\nsecond", final=False),
    )
    assert rendered(multi).splitlines() == ["slack-1  working  first …"]
