"""`chatops status`: one analysis and its sub-agents, read from Redis, shown as a tree.

Reading and showing are apart. `read_status` builds a plain `SessionStatus` from the session's
card record (`CardRecord`) and its sub-agent registry (`SubagentRegistry`), recursing into each
child's own session, whose registry holds the child's children. `render_tree` turns it into a
`rich` tree for people; `status_json` into a dict with stable keys for scripts. Nothing here
writes to Redis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from rich.text import Text
from rich.tree import Tree

from agent_core import map_redis_errors
from bot.control.subagents import ChildRecord, ChildState, SubagentRegistry
from bot.keys import BotKeys
from bot.publishing.card_record import CardRecord
from cards import ProgressCard

__all__ = [
    "CardSummary",
    "ChildStatus",
    "SessionStatus",
    "read_status",
    "render_tree",
    "status_json",
]

LINE_MAX = 160
"""Longest task, title, report or question line in the tree (the JSON holds the full text)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CardSummary:
    """What a session's card record says of its analysis."""

    status: str
    """The card's status (`working`, `dispatched`, `answered`, `stopped`, …), or `unreadable`
    when the stored card is not one this version can read."""
    title: str
    final: bool
    """The record holds a final state: the analysis ended."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStatus:
    """One session: its card (None when no card state is recorded) and its sub-agents."""

    session_id: str
    card: CardSummary | None
    children: tuple[ChildStatus, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildStatus:
    """One sub-agent as its parent's registry keeps it, and its own analysis below it."""

    record: ChildRecord
    analysis: SessionStatus
    """The child's session: its card and its own children."""


async def read_status(
    redis: aioredis.Redis, session_id: str, keys: BotKeys | None = None
) -> SessionStatus | None:
    """The session's tree, or None when Redis knows nothing of the session.

    A session is known when it has a card record, sub-agents or a history.

    Raises:
        StoreError: Redis failed.
    """
    keys = keys or BotKeys()
    registry = SubagentRegistry(redis, keys)
    root = await _read_session(redis, keys, registry, session_id, seen=set())
    if root.card is not None or root.children:
        return root
    with map_redis_errors("read a session"):
        known = await redis.exists(keys.card(session_id), keys.session.history(session_id))
    return root if known else None


async def _read_session(
    redis: aioredis.Redis,
    keys: BotKeys,
    registry: SubagentRegistry,
    session_id: str,
    seen: set[str],
) -> SessionStatus:
    seen.add(session_id)
    card = _summary(await CardRecord(redis, keys, session_id).read())
    children = []
    for record in await registry.children(session_id):
        if record.session_id in seen:  # child sessions are fresh ids; never loop regardless
            continue
        analysis = await _read_session(redis, keys, registry, record.session_id, seen)
        children.append(ChildStatus(record=record, analysis=analysis))
    return SessionStatus(session_id=session_id, card=card, children=tuple(children))


def _summary(fields: dict[str, str]) -> CardSummary | None:
    raw = fields.get("state")
    if not raw:  # no record, or attached but nothing shown yet
        return None
    final = fields.get("final") == "1"
    try:
        card = ProgressCard.from_json(raw)
    except ValueError:
        return CardSummary(status="unreadable", title="", final=final)
    return CardSummary(status=card.status.value, title=card.title, final=final)


def status_json(node: SessionStatus) -> dict[str, Any]:
    """The tree as JSON-ready data: every node has `session_id`, `card` and `children`.

    A child node also has `child_id`, `state`, `task`, `report`, `question`, `parent_turn`,
    `created_at` and `updated_at` (unix seconds).
    """
    card = None
    if node.card is not None:
        card = {"status": node.card.status, "title": node.card.title, "final": node.card.final}
    return {
        "session_id": node.session_id,
        "card": card,
        "children": [_child_json(child) for child in node.children],
    }


def _child_json(child: ChildStatus) -> dict[str, Any]:
    r, analysis = child.record, status_json(child.analysis)
    return {
        "child_id": r.child_id,
        "session_id": analysis["session_id"],
        "state": r.state.value,
        "task": r.task,
        "report": r.report,
        "question": r.question,
        "parent_turn": r.parent_turn,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "card": analysis["card"],
        "children": analysis["children"],
    }


def render_tree(node: SessionStatus) -> Tree:
    """The tree for people: the session, then one line per child, nested as spawned."""
    label = Text(node.session_id, style="bold")
    if node.card is None:
        label.append("  no card", style="dim")
    else:
        label.append(f"  {node.card.status}", style=_CARD_STYLES.get(node.card.status, ""))
        label.append(f"  {_line(node.card.title)}")
    tree = Tree(label)
    _add_children(tree, node.children)
    return tree


def _add_children(tree: Tree, children: tuple[ChildStatus, ...]) -> None:
    width = max((len(c.record.state.value) for c in children), default=0)
    for child in children:
        r = child.record
        label = Text(r.child_id, style="bold")
        label.append(f"  {r.state.value:<{width}}", style=_CHILD_STYLES[r.state])
        label.append(f"  {_line(r.task)}")
        if r.state is ChildState.AWAITING and r.question:
            label.append(f"\nasks: {_line(r.question)}", style="yellow")
        elif r.report:
            label.append(f"\nreport: {_line(r.report)}", style="dim")
        _add_children(tree.add(label), child.analysis.children)


def _line(text: str) -> str:
    """The first non-empty line of `text`, shortened to `LINE_MAX` with a marker."""
    lines = text.strip().splitlines() or [""]
    first = lines[0].strip()
    if len(first) > LINE_MAX:
        return first[: LINE_MAX - 1] + "…"
    return f"{first} …" if len(lines) > 1 else first


_CHILD_STYLES = {
    ChildState.PENDING: "dim",
    ChildState.RUNNING: "cyan",
    ChildState.AWAITING: "yellow",
    ChildState.CANCELLED: "magenta",
    ChildState.DONE: "green",
    ChildState.FAILED: "red",
}
_CARD_STYLES = {"answered": "green", "failed": "red", "stopped": "magenta", "interrupted": "red"}
