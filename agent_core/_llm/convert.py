"""Pure conversion between normalized messages and the OpenAI chat-completions wire format.

Nothing here awaits or does I/O. `ToolCallAssembler` rebuilds tool calls from streamed deltas,
in the shapes real servers send (replayed in tests/agent_core/test_stream_shapes.py):
OpenAI and vLLM send a call's id and name once, then its arguments in fragments keyed by
`index`, interleaved across calls; llama-cpp-python repeats the id and name in every delta;
Ollama sends each whole call in one delta, older versions without an `index`; LiteLLM's Ollama
route numbers parallel calls all `index` 0, each with its own id and name; Poolside and older
mlx-openai-server send a new id in each chunk of one call. So a delta belongs to the call at its
index unless it names another id and a name, or without an index to the call its id names; a
name repeated in a later delta is the same name, not more of it.

An assistant message with tool calls and no text is sent with `content: ""`, never null: OpenAI,
vLLM and Ollama accept both, and llama-cpp-python's server answers null with HTTP 500 (its
`ChatCompletionRequestAssistantMessage.content` is a string).

Each message object is converted once: messages are frozen, and a session's are sent again on
every request of every turn, so the wire dict of each, and its JSON, are kept (by identity, for
as long as the message itself lives: a weak reference) and shared by every request that sends
it; a toolset's JSON likewise. `request_body` then joins those pieces, so building a request
costs the new messages' conversion plus copying bytes, not a walk of the whole history (the
SDK's own `create` transforms every message of every request: 94% of a request's CPU at 500
messages, `bench/model_client.py`). The dicts are read-only to their users.

The JSON is what the SDK itself would send (compact separators, UTF-8, no NaN), with one
difference: a string holding a lone surrogate (JSON can escape half of a surrogate pair alone,
and a chat message, a model's own output or an MCP result may do so) cannot be encoded as
UTF-8, so that message is written with ASCII escapes instead of failing the request.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_core._errors import ModelUnavailable
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

__all__ = [
    "MAX_CALLS",
    "MAX_CALL_CHARS",
    "ToolCallAssembler",
    "messages_to_wire",
    "request_body",
    "tools_json",
    "tools_to_wire",
    "unique_call_ids",
]


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
            # "" beside tool calls, never null (module docstring)
            wire: dict[str, Any] = {"role": "assistant", "content": message.content}
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


def to_json(value: Any) -> bytes:
    """`value` as the SDK would send it (compact, UTF-8, no NaN); ASCII escapes if it must."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate (module docstring)
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


@dataclass(slots=True)
class _Converted:
    ref: weakref.ref[Any]
    wire: Any
    json: bytes | None = None


class _Memo:
    """What was converted from every live object so far (a message, a toolset), by identity.

    An entry holds a weak reference to its object, whose callback removes the entry when the
    object is collected: the memo holds nothing alive, and an id is never reused while its
    entry exists. It is bounded by the objects the process holds (the history store's cache,
    the running turns).
    """

    def __init__(self, convert: Callable[[Any], Any]) -> None:
        self._convert = convert
        self._entries: dict[int, _Converted] = {}

    def _entry(self, item: Any) -> _Converted:
        key = id(item)
        entry = self._entries.get(key)
        if entry is not None and entry.ref() is item:
            return entry
        entry = _Converted(weakref.ref(item, self._forget(key)), self._convert(item))
        self._entries[key] = entry
        return entry

    def wire(self, item: Any) -> Any:
        """The object's wire form, converted on first use."""
        return self._entry(item).wire

    def json(self, item: Any) -> bytes:
        """The object's wire form as JSON (`to_json`), written on first use."""
        entry = self._entry(item)
        if entry.json is None:
            entry.json = to_json(entry.wire)
        return entry.json

    def _forget(self, key: int) -> Callable[[weakref.ref[Any]], None]:
        entries = self._entries  # not `self`: the callback keeps no cycle through the memo

        def forget(_: weakref.ref[Any]) -> None:
            entries.pop(key, None)

        return forget

    def __len__(self) -> int:
        return len(self._entries)


def _tools_of(toolset: Toolset) -> list[dict[str, Any]]:
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


_MEMO = _Memo(_to_wire)
_TOOLS = _Memo(_tools_of)


def messages_to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Convert a history to the `messages` array of a chat-completions request.

    Each message is converted once in its life (module docstring); the dicts are shared.
    """
    wire = _MEMO.wire
    return [wire(m) for m in messages]


def tools_to_wire(toolset: Toolset) -> list[dict[str, Any]]:
    """Convert a toolset to the `tools` array of a chat-completions request (shared, read-only)."""
    wire: list[dict[str, Any]] = _TOOLS.wire(toolset)
    return wire


def tools_json(toolset: Toolset) -> bytes:
    """The `tools` array of a chat-completions request as JSON, written once per toolset."""
    return _TOOLS.json(toolset)


def request_body(
    fields: Mapping[str, Any], messages: Sequence[Message], toolset: Toolset | None = None
) -> bytes:
    """The JSON body of a chat-completions request: `fields`, then `messages` and `tools`.

    Args:
        fields: The request's other fields (`model`, `stream`, `tool_choice`, ...), non-empty.
        messages: The history, each message's JSON written once in its life (module docstring).
        toolset: The tools offered, if any (an empty set sends no `tools`).
    """
    message_json = _MEMO.json
    parts = [to_json(fields)[:-1], b',"messages":[', b",".join(message_json(m) for m in messages)]
    if toolset is not None and len(toolset):
        parts += [b'],"tools":', _TOOLS.json(toolset), b"}"]
    else:
        parts.append(b"]}")
    return b"".join(parts)


MAX_CALLS = 128
"""Tool calls one response may carry; past it the stream is broken (`ModelUnavailable`)."""
MAX_CALL_CHARS = 4_000_000
"""Characters the ids, names and arguments of one response's calls may total."""
MAX_NAME_CHARS = 256
"""Characters one call's name may have; past it the stream is broken (OpenAI allows 64)."""


@dataclass
class _PendingCall:
    id: str = ""
    name_parts: list[str] = field(default_factory=list)
    name_chars: int = 0
    arguments: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "".join(self.name_parts)

    def add_name(self, name: str) -> None:
        """Book a name delta: a repeat of the whole name (llama-cpp-python), else a fragment.

        The name is capped (`MAX_NAME_CHARS`) and kept in parts: a string grown by `+=` per
        fragment costs quadratic time, and a hostile stream of 80k one-character fragments
        held the event loop for 13.5 s (measured before the cap).
        """
        if len(name) == self.name_chars and name == self.name:
            return
        self.name_chars += len(name)
        if self.name_chars > MAX_NAME_CHARS:
            raise ModelUnavailable(f"a tool call's name exceeds {MAX_NAME_CHARS} characters")
        self.name_parts.append(name)


@dataclass
class ToolCallAssembler:
    """Accumulates streamed tool-call deltas into complete calls, in the order they started.

    Which call a delta belongs to (module docstring). With an index: the call at that index,
    unless the delta names another id than that call's and a name (LiteLLM numbers parallel
    calls all 0, each starting with its name; another id alone is the same call re-labelled);
    two indexes are two calls even under one id (a model reusing an id: `unique_call_ids`
    renames the second). Without an index: the call its id names, unless the delta is a whole
    call again (a name, and that call has arguments already); with no id either, the latest
    call when the delta is only more arguments. Otherwise a new call. A name equal to the call's
    is a repeat (llama-cpp-python sends it in every delta); another is appended (a name in
    fragments). Each delta costs a few dict look-ups besides its text, and the text is bounded
    (`MAX_CALLS`, `MAX_CALL_CHARS`, `MAX_NAME_CHARS`).
    """

    _calls: list[_PendingCall] = field(default_factory=list)
    _by_id: dict[str, _PendingCall] = field(default_factory=dict)
    _by_index: dict[int, _PendingCall] = field(default_factory=dict)
    _chars: int = 0

    def feed(
        self, index: int | None, *, id: str | None, name: str | None, arguments: str | None
    ) -> None:
        """Book one delta (`index` None: the provider sent none).

        Raises:
            ModelUnavailable: The response carries more than `MAX_CALLS` calls or
                `MAX_CALL_CHARS` characters of them, or a name over `MAX_NAME_CHARS`.
        """
        self._chars += len(id or "") + len(name or "") + len(arguments or "")
        if self._chars > MAX_CALL_CHARS:
            raise ModelUnavailable(f"the response's tool calls exceed {MAX_CALL_CHARS} characters")
        call = self._call_for(index, id or "", name or "")
        if id and not call.id:
            call.id = id
            self._by_id[id] = call
        if name:
            call.add_name(name)
        if arguments:
            call.arguments.append(arguments)

    def _call_for(self, index: int | None, id: str, name: str) -> _PendingCall:
        at: _PendingCall | None
        if index is not None:
            at = self._by_index.get(index)
            if at is not None and id and name and at.id and at.id != id:
                # Another call at the same index (LiteLLM), known by its name. A new id
                # without a name is the same call's next chunk: some servers send a fresh id
                # in each (poolsideai/pool#9, cubist38/mlx-openai-server#216).
                at = None
        elif id:
            at = self._by_id.get(id)
            if at is not None and name and at.arguments:
                at = None  # a whole call again, under an id already used
        else:
            at = self._calls[-1] if self._calls and not name else None
        if at is None:
            if len(self._calls) >= MAX_CALLS:
                raise ModelUnavailable(f"the response carries more than {MAX_CALLS} tool calls")
            at = _PendingCall()
            self._calls.append(at)
            if index is not None:
                self._by_index[index] = at
        return at

    def calls(self, salt: str) -> tuple[ToolCall, ...]:
        """Return the assembled calls; a call streamed without an id gets a stable synthetic one.

        Args:
            salt: Mixed into synthetic ids (the response id), so they stay unique per response.
        """
        return tuple(
            ToolCall(
                id=call.id or _synthetic_id(salt, position),
                name=call.name,
                arguments="".join(call.arguments),
            )
            for position, call in enumerate(self._calls)
        )


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
