"""OpenAI's rules for a chat request's messages, with the exact 400 errors it answers.

The strictest provider rule set we know of: every assistant tool call id non-empty and unique,
each answered exactly once by the contiguous tool messages right after it, and no tool message
answering nothing. The messages and `param` values are copied from real API responses quoted
in public issue threads. The rehearsal model applies them like the real API, so the demo's
"zero provider 400s" means what it says; the tests' fake provider applies the same rules.

A context window is a rule too (`check_context`): a request whose messages and tools count more
tokens than the window gets OpenAI's `context_length_exceeded` 400. Tokens are counted here in
a way of our own, on purpose not chatops's estimate (`agent_core.estimate_tokens`): one token
per 3.3 bytes of the request's `messages` and `tools` as compact JSON, rounded up. JSON keys,
quotes and escapes count, as a real tokenizer's template does, so the runtime must calibrate
from the reported usage to stay under a window, as it must against a real model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTEXT_LENGTH_EXCEEDED",
    "DUPLICATE_CALL_ID",
    "ORPHAN_TOOL_MESSAGE",
    "UNANSWERED_CALLS",
    "Rejection",
    "check_context",
    "check_history",
    "check_request",
    "count_prompt_tokens",
    "error_body",
]

UNANSWERED_CALLS = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to "
    "each 'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
"""OpenAI's 400 for tool calls without contiguous answers (param ``messages.[i].role``)."""

ORPHAN_TOOL_MESSAGE = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
"""OpenAI's 400 for a tool message that answers nothing (the typo "preceeding" is real)."""

DUPLICATE_CALL_ID = (
    "Invalid parameter: Duplicate value for 'tool_call_id' of '{id}', in messages[{first}] "
    "and messages[{second}]."
)
"""OpenAI's 400 for a tool_call_id used twice (param ``messages.[i].tool_call_id``)."""


CONTEXT_LENGTH_EXCEEDED = (
    "This model's maximum context length is {window} tokens. However, your messages resulted "
    "in {tokens} tokens. Please reduce the length of the messages."
)
"""OpenAI's 400 for a request over the window (param ``messages``, code
``context_length_exceeded``)."""

_BYTES_PER_TOKEN = 3.3


def error_body(message: str, type_: str, param: str | None, code: str | None) -> dict[str, Any]:
    """OpenAI's error JSON."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


@dataclass(frozen=True)
class Rejection:
    """Why the API refuses a request, as its 400 says it."""

    message: str
    param: str | None
    code: str | None = None

    def body(self) -> dict[str, Any]:
        """The 400's JSON body."""
        return error_body(self.message, "invalid_request_error", self.param, self.code)


def _orphan(index: int) -> Rejection:
    return Rejection(ORPHAN_TOOL_MESSAGE, f"messages.[{index}].role")


def _duplicate(call_id: str, first: int, second: int, param: str) -> Rejection:
    return Rejection(DUPLICATE_CALL_ID.format(id=call_id, first=first, second=second), param)


def check_request(body: Any) -> Rejection | None:
    """Return why OpenAI would reject this request body with a 400, or None if it is valid."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        return Rejection(
            "Missing required parameter: 'messages'.", "messages", "missing_required_parameter"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            return Rejection(
                f"Invalid type for 'messages[{i}]': expected an object.",
                f"messages[{i}]",
                "invalid_type",
            )
    return check_history(messages)


def check_history(messages: Sequence[Mapping[str, Any]]) -> Rejection | None:
    """Check tool-call pairing the way the strictest provider does.

    Every assistant tool call id must be non-empty, unique in the request, and answered by
    exactly one tool message in the contiguous run of tool messages right after it; a tool
    message anywhere else is an orphan.

    Args:
        messages: The request's ``messages``.

    Returns:
        The first violation, or None.
    """
    seen: dict[str, int] = {}
    i = 0
    while i < len(messages):
        if messages[i].get("role") == "tool":
            return _orphan(i)
        calls = messages[i].get("tool_calls") if messages[i].get("role") == "assistant" else None
        if not calls:
            i += 1
            continue
        end = i + 1
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        rejection = _check_call_ids(i, calls, seen) or _check_answers(messages, i, end, calls)
        if rejection is not None:
            return rejection
        i = end
    return None


def _check_call_ids(
    index: int, calls: Sequence[Mapping[str, Any]], seen: dict[str, int]
) -> Rejection | None:
    for k, call in enumerate(calls):
        call_id = call.get("id")
        where = f"messages[{index}].tool_calls[{k}].id"
        if call_id is None:
            return Rejection(
                f"Missing required parameter: '{where}'.", where, "missing_required_parameter"
            )
        if call_id == "":
            return Rejection(
                f"Invalid '{where}': empty string. Expected a string with minimum length 1, "
                "but got an empty string instead.",
                where,
                "empty_string",
            )
        if call_id in seen:
            return _duplicate(call_id, seen[call_id], index, f"messages.[{index}].tool_calls")
        seen[call_id] = index
    return None


def _check_answers(
    messages: Sequence[Mapping[str, Any]], index: int, end: int, calls: Sequence[Mapping[str, Any]]
) -> Rejection | None:
    expected = [call["id"] for call in calls]
    answered: dict[str, int] = {}
    for j in range(index + 1, end):
        call_id = messages[j].get("tool_call_id")
        if not isinstance(call_id, str) or call_id not in expected:
            return _orphan(j)
        if call_id in answered:
            return _duplicate(call_id, answered[call_id], j, f"messages.[{j}].tool_call_id")
        answered[call_id] = j
    missing = [call_id for call_id in expected if call_id not in answered]
    if not missing:
        return None
    param = f"messages.[{end}].role" if end < len(messages) else "messages"
    return Rejection(UNANSWERED_CALLS.format(ids=", ".join(missing)), param)


def count_prompt_tokens(body: Mapping[str, Any]) -> int:
    """The request's prompt tokens as this rule set counts them (module docstring)."""
    counted = {"messages": body.get("messages") or [], "tools": body.get("tools") or []}
    size = len(json.dumps(counted, separators=(",", ":"), ensure_ascii=False).encode())
    return math.ceil(size / _BYTES_PER_TOKEN)


def check_context(body: Mapping[str, Any], window: int) -> Rejection | None:
    """OpenAI's ``context_length_exceeded`` 400 when the request counts more than ``window``."""
    tokens = count_prompt_tokens(body)
    if tokens <= window:
        return None
    message = CONTEXT_LENGTH_EXCEEDED.format(window=window, tokens=tokens)
    return Rejection(message, "messages", "context_length_exceeded")
