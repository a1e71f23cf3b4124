"""Validation of a history against the strictest provider rules (docs/design.md §Invariants I1).

Contract: `validate_history` accepts a history exactly when every provider we target would:

- every `AssistantMessage` with tool calls is followed *immediately* by one `ToolMessage` per
  call, contiguous, in any order among themselves, with nothing else in between;
- no `ToolMessage` except as such an answer (an orphan, or a second answer to the same call);
- no empty call id, and no call id used twice anywhere in the history.

Adjacency is checked, not just presence (docs/reliability.md H7): a set-based check ("every call has
a result somewhere") passes a result displaced after a user message, which OpenAI and Anthropic both
reject with a 400. Error texts mirror the providers' own wording (docs/design.md §Platform facts),
prefixed by the offending message's index, so a log line reads like the 400 it prevented.

It runs before every model request, so it is one linear pass (about 0.25 ms for 600 messages)
that keeps only the ids seen so far and those of the current tool block.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from agent_core._errors import HistoryError
from agent_core._messages import AssistantMessage, Message, ToolCall, ToolMessage

__all__ = ["is_closed", "open_calls", "validate_history"]

_DANGLING = (
    "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
    "'tool_call_id'. The following tool_call_ids did not have response messages: {ids}"
)
_ORPHAN = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
    "with 'tool_calls'."
)
_SECOND_ANSWER = (
    "Invalid parameter: Duplicate value for 'tool_call_id' of '{id}', in messages[{first}] and "
    "messages[{index}]."
)
_DUPLICATE_CALL = "Invalid parameter: Duplicate value for 'tool_calls[].id' of '{id}'."
_EMPTY_CALL = (
    "Invalid 'tool_calls[{position}].id': empty string. Expected a string with minimum length 1, "
    "but got an empty string instead."
)


def validate_history(messages: Sequence[Message]) -> None:
    """Raise on the first provider rule the history breaks.

    Args:
        messages: The history, oldest first.

    Raises:
        HistoryError: With the offending message's `index` and the `call_ids` involved.
    """
    seen: set[str] = set()
    index = 0
    while index < len(messages):
        message = messages[index]
        if isinstance(message, ToolMessage):
            raise _error(_ORPHAN, index, message.call_id)
        if isinstance(message, AssistantMessage) and message.tool_calls:
            _check_call_ids(message.tool_calls, index, seen)
            index = _check_answers(messages, index, message.tool_calls)
        else:
            index += 1


def is_closed(messages: Sequence[Message]) -> bool:
    """Tell whether `validate_history` accepts the history (invariant 1: safe to persist)."""
    try:
        validate_history(messages)
    except HistoryError:
        return False
    return True


def open_calls(messages: Sequence[Message]) -> tuple[ToolCall, ...]:
    """Return the calls of the last assistant message that its tool block has not answered yet.

    The run loop uses this to know a batch is still in progress: while tools are running, the
    history ends with the assistant message and the results received so far. Only the contiguous
    tool messages right after that assistant message count as answers (as for the provider).

    Args:
        messages: The history, oldest first.

    Returns:
        The unanswered calls in call order; empty when no assistant message has open calls.
    """
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            return _unanswered(message.tool_calls, _block_ids(messages, index + 1))
    return ()


def _check_call_ids(calls: tuple[ToolCall, ...], index: int, seen: set[str]) -> None:
    """Reject empty ids and ids already used in this or an earlier assistant message."""
    for position, call in enumerate(calls):
        if not call.id:
            raise _error(_EMPTY_CALL.format(position=position), index, call.id)
        if call.id in seen:
            raise _error(_DUPLICATE_CALL.format(id=call.id), index, call.id)
        seen.add(call.id)


def _check_answers(messages: Sequence[Message], index: int, calls: tuple[ToolCall, ...]) -> int:
    """Check the tool block after the assistant message at `index`; return the index after it."""
    pending = {call.id for call in calls}
    answered: dict[str, int] = {}
    cursor = index + 1
    while cursor < len(messages):
        answer = messages[cursor]
        if not isinstance(answer, ToolMessage):
            break
        if answer.call_id in answered:
            text = _SECOND_ANSWER.format(
                id=answer.call_id, first=answered[answer.call_id], index=cursor
            )
            raise _error(text, cursor, answer.call_id)
        if answer.call_id not in pending:
            raise _error(_ORPHAN, cursor, answer.call_id)
        pending.discard(answer.call_id)
        answered[answer.call_id] = cursor
        cursor += 1
    if pending:
        missing = tuple(call.id for call in calls if call.id in pending)
        raise HistoryError(
            f"messages[{index}]: {_DANGLING.format(ids=', '.join(missing))}",
            index=index,
            call_ids=missing,
        )
    return cursor


def _block_ids(messages: Sequence[Message], start: int) -> list[str]:
    """Call ids of the contiguous tool messages starting at `start`."""
    ids: list[str] = []
    for index in range(start, len(messages)):
        message = messages[index]
        if not isinstance(message, ToolMessage):
            break
        ids.append(message.call_id)
    return ids


def _unanswered(calls: tuple[ToolCall, ...], answer_ids: list[str]) -> tuple[ToolCall, ...]:
    """The calls left over once each answer has consumed one call with its id."""
    answers = Counter(answer_ids)
    left: list[ToolCall] = []
    for call in calls:
        if answers[call.id] > 0:
            answers[call.id] -= 1
        else:
            left.append(call)
    return tuple(left)


def _error(text: str, index: int, call_id: str) -> HistoryError:
    return HistoryError(f"messages[{index}]: {text}", index=index, call_ids=(call_id,))
