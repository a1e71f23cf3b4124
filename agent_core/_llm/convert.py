"""Pure conversion between normalized messages and the OpenAI chat-completions wire format.

Nothing here awaits or does I/O. `ToolCallAssembler` rebuilds parallel tool calls from streamed
deltas: the API sends each call's id and name once, then its arguments in fragments keyed by
`index`, interleaved across calls.

`messages_to_wire` converts each message object once: messages are frozen, and a session's are
sent again on every request of every turn, so the wire dict of each is kept (by identity, for as
long as the message itself lives: a weak reference) and shared by every request that sends it.
Those dicts are read-only to their users (the SDK copies what it sends).
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_core._messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserKind,
    UserMessage,
)
from agent_core.tools._base import Toolset

__all__ = ["ToolCallAssembler", "messages_to_wire", "tools_to_wire", "unique_call_ids"]


def _user_text(message: UserMessage) -> str:
    if message.kind is UserKind.CONTEXT:
        return (
            "[The thread's earlier messages, for context only: the task is the next message.]\n"
            f"{message.content}"
        )
    if message.kind is UserKind.STEER:
        who = message.author or "a participant"
        return (
            f"[Correction from {who}, sent while you were working. The original task still "
            f"stands; take this into account from now on.]\n{message.content}"
        )
    if message.author:
        return f"[{message.author}] {message.content}"
    return message.content


def _to_wire(message: Message) -> dict[str, Any]:
    match message:
        case SystemMessage():
            return {"role": "system", "content": message.content}
        case UserMessage():
            return {"role": "user", "content": _user_text(message)}
        case AssistantMessage():
            # Null content is valid only beside tool calls; some providers reject a bare null.
            content = message.content or (None if message.tool_calls else "")
            wire: dict[str, Any] = {"role": "assistant", "content": content}
            if message.tool_calls:
                wire["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in message.tool_calls
                ]
            return wire
        case ToolMessage():
            return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}


class _WireMemo:
    """The wire dict of every live message converted so far, by the message's identity.

    An entry holds a weak reference to its message, whose callback removes the entry when the
    message is collected: the memo holds no message alive, and an id is never reused while its
    entry exists. It is bounded by the messages the process holds (the history store's cache,
    the running turns).
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref[Message], dict[str, Any]]] = {}

    def wire(self, message: Message) -> dict[str, Any]:
        """The message's wire dict, converted on first use."""
        key = id(message)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is message:
            return entry[1]
        wire = _to_wire(message)
        self._entries[key] = (weakref.ref(message, self._forget(key)), wire)
        return wire

    def _forget(self, key: int) -> Callable[[weakref.ref[Message]], None]:
        entries = self._entries  # not `self`: the callback keeps no cycle through the memo

        def forget(_: weakref.ref[Message]) -> None:
            entries.pop(key, None)

        return forget

    def __len__(self) -> int:
        return len(self._entries)


_MEMO = _WireMemo()


def messages_to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Convert a history to the `messages` array of a chat-completions request.

    Each message is converted once in its life (module docstring); the dicts are shared.
    """
    wire = _MEMO.wire
    return [wire(m) for m in messages]


def tools_to_wire(toolset: Toolset) -> list[dict[str, Any]]:
    """Convert a toolset to the `tools` array of a chat-completions request."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": dict(tool.parameters),
            },
        }
        for tool in toolset
    ]


@dataclass
class _PendingCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class ToolCallAssembler:
    """Accumulates streamed tool-call deltas into complete calls, ordered by index."""

    _calls: dict[int, _PendingCall] = field(default_factory=dict)

    def feed(self, index: int, *, id: str | None, name: str | None, arguments: str | None) -> None:
        """Book one delta for the call at `index`."""
        pending = self._calls.setdefault(index, _PendingCall())
        if id:
            pending.id = id
        if name:
            pending.name += name
        if arguments:
            pending.arguments.append(arguments)

    def calls(self, salt: str) -> tuple[ToolCall, ...]:
        """Return the assembled calls; a call streamed without an id gets a stable synthetic one.

        Args:
            salt: Mixed into synthetic ids (the response id), so they stay unique per response.
        """
        out = []
        for index in sorted(self._calls):
            pending = self._calls[index]
            call_id = pending.id or _synthetic_id(salt, index)
            out.append(
                ToolCall(id=call_id, name=pending.name, arguments="".join(pending.arguments))
            )
        return tuple(out)


def _synthetic_id(salt: str, index: int) -> str:
    digest = hashlib.sha256(f"{salt}:{index}".encode()).hexdigest()[:24]
    return f"call_{digest}"


def unique_call_ids(calls: Iterable[ToolCall], taken: set[str]) -> tuple[ToolCall, ...]:
    """Rename calls whose id is already in `taken` (or repeated in `calls`) to `{id}~N`.

    Models occasionally reuse an id within one response or across turns (docs/reliability.md H4);
    the wire cannot tell two calls with one id apart, so the second is renamed before it is ever
    persisted. `taken` is updated with every id returned.
    """
    out = []
    for call in calls:
        call_id, n = call.id, 1
        while call_id in taken:
            n += 1
            call_id = f"{call.id}~{n}"
        taken.add(call_id)
        out.append(call if call_id == call.id else call.model_copy(update={"id": call_id}))
    return tuple(out)
