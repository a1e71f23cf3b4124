"""Call ids for history repair: stable ids for empty ones, fresh ids for reused ones.

The two renaming passes of `agent_core._repair` (`rename_empty_ids`, `rename_duplicate_ids`)
walk a history with these. An id minted for an empty one hashes the call's position in its
message, its name and its arguments, so it does not depend on where the message sits in the
history; a reused id becomes the first `{id}~{n}` (n >= 2) not used anywhere in the history.
"""

from __future__ import annotations

import hashlib
from collections import deque

from agent_core._messages import AssistantMessage, Message, ToolCall, ToolMessage

__all__ = ["Renamer", "all_ids", "call_ids", "rename_empty_block"]


def _stable_id(position: int, call: ToolCall) -> str:
    digest = hashlib.sha256(f"{position}\0{call.name}\0{call.arguments}".encode()).hexdigest()
    return f"call_repaired_{digest[:16]}"


def rename_empty_block(
    out: list[Message], index: int, message: AssistantMessage, notes: list[str]
) -> None:
    """Rename the empty call ids of `message` (at `index` in `out`) and their answers, in `out`."""
    calls: list[ToolCall] = []
    unpaired: list[ToolCall] = []
    for position, call in enumerate(message.tool_calls):
        if not call.id:
            call = call.model_copy(update={"id": _stable_id(position, call)})
            unpaired.append(call)
            notes.append(f"messages[{index}]: empty id of call {call.name!r} set to {call.id!r}")
        calls.append(call)
    out[index] = message.model_copy(update={"tool_calls": tuple(calls)})
    cursor = index + 1
    while cursor < len(out) and isinstance(answer := out[cursor], ToolMessage):
        if not answer.call_id and unpaired:
            paired = _take(unpaired, answer.name)
            out[cursor] = answer.model_copy(update={"call_id": paired.id})
            notes.append(f"messages[{cursor}]: empty call id of result set to {paired.id!r}")
        cursor += 1


def _take(calls: list[ToolCall], name: str) -> ToolCall:
    """Remove and return the first call named `name`, else the first call."""
    position = next((i for i, call in enumerate(calls) if call.name == name), 0)
    return calls.pop(position)


def all_ids(messages: list[Message]) -> set[str]:
    """Every call id and result call id in the history."""
    ids: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            ids.add(message.call_id)
        else:
            ids.update(call_ids(message))
    return ids


def call_ids(message: Message) -> list[str]:
    """The ids of the message's tool calls (none for anything but an assistant message)."""
    if isinstance(message, AssistantMessage):
        return [call.id for call in message.tool_calls]
    return []


class Renamer:
    """State of one `rename_duplicate_ids` walk over a history."""

    def __init__(self, taken: set[str]) -> None:
        self.taken = taken
        """Every id in the history plus every id minted so far: a fresh id avoids all of them."""
        self.seen: set[str] = set()
        self.latest: dict[str, str] = {}
        """Original id -> id given to its latest occurrence."""
        self.block: dict[str, deque[str]] = {}
        """Original id -> ids of its occurrences in the current tool block, not yet answered."""
        self.suffixes: dict[str, int] = {}
        self.notes: list[str] = []

    def visit(self, index: int, message: Message) -> Message:
        """The message at `index` with its reused call ids (or its answers' ids) renamed."""
        if isinstance(message, ToolMessage):
            return self._answer(index, message)
        self.block = {}
        if not isinstance(message, AssistantMessage) or not message.tool_calls:
            return message
        calls = tuple(self._call(index, call) for call in message.tool_calls)
        if all(new is old for new, old in zip(calls, message.tool_calls, strict=True)):
            return message
        return message.model_copy(update={"tool_calls": calls})

    def _call(self, index: int, call: ToolCall) -> ToolCall:
        new_id = self._fresh(call.id) if call.id and call.id in self.seen else call.id
        self.seen.add(new_id)
        self.latest[call.id] = new_id
        self.block.setdefault(call.id, deque()).append(new_id)
        if new_id == call.id:
            return call
        self.notes.append(f"messages[{index}]: duplicate call id {call.id!r} renamed {new_id!r}")
        return call.model_copy(update={"id": new_id})

    def _answer(self, index: int, message: ToolMessage) -> ToolMessage:
        pending = self.block.get(message.call_id)
        new_id = pending.popleft() if pending else self.latest.get(message.call_id)
        if new_id is None or new_id == message.call_id:
            return message
        self.notes.append(f"messages[{index}]: result for {message.call_id!r} renamed {new_id!r}")
        return message.model_copy(update={"call_id": new_id})

    def _fresh(self, base: str) -> str:
        suffix = self.suffixes.get(base, 1)
        while True:
            suffix += 1
            candidate = f"{base}~{suffix}"
            if candidate not in self.taken:
                break
        self.suffixes[base] = suffix
        self.taken.add(candidate)
        return candidate
