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
that keeps only the ids seen so far and those of the current tool block. And it need not start
over: `validate_from` goes on from a `CheckedPrefix`, the validator's state at the end of a
closed prefix (the call ids it used, and the answers of the tool block it ends with), and checks
only what follows. It says exactly what `validate_history` says of the whole history (the same
error, index and call ids, or none), so a history that only grows (a run's, a cached session's)
is validated at the cost of its new part.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agent_core._errors import HistoryError
from agent_core._messages import AssistantMessage, Message, ToolCall, ToolMessage

__all__ = ["CheckedPrefix", "is_closed", "open_calls", "validate_from", "validate_history"]

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


@dataclass(frozen=True, slots=True)
class CheckedPrefix:
    """Where the validator stands after a closed prefix of a history: enough to go on from.

    A closed prefix ends between groups, so that state is small: the call ids used so far, and
    the answers of the tool block the prefix ends with (a tool message right after it is a second
    answer to one of those calls, or an orphan). Immutable: a prefix's state may be shared (the
    history store's cache and a run both hold one).
    """

    length: int = 0
    """How many messages were validated: the prefix is `messages[:length]`."""
    call_ids: frozenset[str] = frozenset()
    """Every call id of the prefix."""
    block: Mapping[str, int] = field(default_factory=dict)
    """The answers of the tool block the prefix ends with, by call id, with their index; empty
    when the prefix ends with anything but a tool message."""


def validate_history(messages: Sequence[Message]) -> None:
    """Raise on the first provider rule the history breaks.

    Args:
        messages: The history, oldest first.

    Raises:
        HistoryError: With the offending message's `index` and the `call_ids` involved.
    """
    validate_from(messages)


def validate_from(
    messages: Sequence[Message], prefix: CheckedPrefix | None = None
) -> CheckedPrefix:
    """Validate what follows a closed prefix; return the validator's state at the end.

    Args:
        messages: The history, oldest first; `messages[:prefix.length]` must be the prefix
            `prefix` was returned for (it is not read again).
        prefix: The state after the validated prefix; None validates from the start.

    Returns:
        The state after all of `messages`, to go on from when the history grows.

    Raises:
        HistoryError: As `validate_history(messages)` would (the same text, index and ids).
    """
    prefix = prefix or CheckedPrefix()
    added: set[str] = set()
    block = prefix.block
    index = prefix.length
    while index < len(messages):
        message = messages[index]
        if isinstance(message, ToolMessage):
            if index == prefix.length and message.call_id in block:  # the prefix's last block
                raise _second_answer(message.call_id, block[message.call_id], index)
            raise _error(_ORPHAN, index, message.call_id)
        if isinstance(message, AssistantMessage) and message.tool_calls:
            _check_call_ids(message.tool_calls, index, prefix.call_ids, added)
            index, block = _check_answers(messages, index, message.tool_calls)
        else:
            index, block = index + 1, {}
    call_ids = prefix.call_ids | added if added else prefix.call_ids
    return CheckedPrefix(length=len(messages), call_ids=call_ids, block=block)


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


def _check_call_ids(
    calls: tuple[ToolCall, ...], index: int, before: frozenset[str], seen: set[str]
) -> None:
    """Reject empty ids and ids already used in this or an earlier assistant message.

    `before` holds the ids of the validated prefix, `seen` those found since (added to here).
    """
    for position, call in enumerate(calls):
        if not call.id:
            raise _error(_EMPTY_CALL.format(position=position), index, call.id)
        if call.id in seen or call.id in before:
            raise _error(_DUPLICATE_CALL.format(id=call.id), index, call.id)
        seen.add(call.id)


def _check_answers(
    messages: Sequence[Message], index: int, calls: tuple[ToolCall, ...]
) -> tuple[int, dict[str, int]]:
    """Check the tool block after the assistant message at `index`.

    Returns:
        The index after the block, and its answers by call id with their index.
    """
    pending = {call.id for call in calls}
    answered: dict[str, int] = {}
    cursor = index + 1
    while cursor < len(messages):
        answer = messages[cursor]
        if not isinstance(answer, ToolMessage):
            break
        if answer.call_id in answered:
            raise _second_answer(answer.call_id, answered[answer.call_id], cursor)
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
    return cursor, answered


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


def _second_answer(call_id: str, first: int, index: int) -> HistoryError:
    return _error(_SECOND_ANSWER.format(id=call_id, first=first, index=index), index, call_id)


def _error(text: str, index: int, call_id: str) -> HistoryError:
    return HistoryError(f"messages[{index}]: {text}", index=index, call_ids=(call_id,))
