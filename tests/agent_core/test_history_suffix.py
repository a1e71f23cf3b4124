"""Validating only what follows a checked prefix says what validating the whole history says.

Why Hypothesis: the runtime and the history cache validate a growing history piece by piece
(`validate_from` going on from a `CheckedPrefix`), and the claim is an equivalence with the one
validator every provider rule is written into, for any history and any point it was cut at. The
histories are those of the repair properties (random soups over a tiny id alphabet, valid
histories, valid histories hit by a crash's faults), cut at every point where the prefix is
valid, and also grown in several random steps, as a session grows over turns.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core._errors import HistoryError
from agent_core._history import CheckedPrefix, validate_from, validate_history
from agent_core._messages import AssistantMessage, Message, ToolCall, ToolMessage, UserMessage
from tests.agent_core.test_repair_properties import HISTORIES

Verdict = tuple[str, int, tuple[str, ...]] | CheckedPrefix
"""A validator's answer: the error's text, index and ids, or the state it ended in."""


def verdict(messages: list[Message], prefix: CheckedPrefix | None = None) -> Verdict:
    try:
        return validate_from(messages, prefix)
    except HistoryError as exc:
        return (str(exc), exc.index, tuple(exc.call_ids))


def whole(messages: list[Message]) -> Verdict:
    try:
        validate_history(messages)
    except HistoryError as exc:
        return (str(exc), exc.index, tuple(exc.call_ids))
    return validate_from(messages)


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_going_on_from_any_valid_prefix_agrees_with_the_whole(history: list[Message]) -> None:
    expected = whole(history)
    for cut in range(len(history) + 1):
        prefix = verdict(history[:cut])
        if isinstance(prefix, CheckedPrefix):
            assert prefix.length == cut
            assert verdict(history, prefix) == expected, cut


@settings(max_examples=1000, deadline=None)
@given(HISTORIES, st.lists(st.integers(0, 16), max_size=4))
def test_growing_in_steps_agrees_with_the_whole(history: list[Message], cuts: list[int]) -> None:
    state: CheckedPrefix | None = None
    for cut in sorted(c for c in cuts if c <= len(history)):
        found = verdict(history[:cut], state)
        if not isinstance(found, CheckedPrefix):
            assert found == whole(history[:cut])
            return  # a session whose history broke stops here: the run repairs it
        state = found
    assert verdict(history, state) == whole(history)


def test_an_answer_right_after_a_valid_prefix_is_a_second_answer_or_an_orphan() -> None:
    """The one state a closed prefix carries over: the answers of the block it ends with."""
    call = ToolCall(id="c1", name="read_logs")
    prefix: list[Message] = [
        UserMessage(content="why?"),
        AssistantMessage(tool_calls=(call,)),
        ToolMessage(call_id="c1", name="read_logs", content="r"),
    ]
    state = validate_from(prefix)
    assert state.block == {"c1": 2} and state.call_ids == {"c1"}
    again = ToolMessage(call_id="c1", name="read_logs", content="again")
    stray = ToolMessage(call_id="c9", name="read_logs", content="stray")
    for extra in (again, stray):
        grown = [*prefix, extra]
        assert verdict(grown, state) == whole(grown)
        assert not isinstance(verdict(grown, state), CheckedPrefix)
    assert "Duplicate value for 'tool_call_id' of 'c1'" in str(verdict([*prefix, again], state))
    after_text = [*prefix, AssistantMessage(content="done"), again]
    assert verdict(after_text, state) == whole(after_text)
