"""Step labels: the numbers the model reads on tool results, counted by the card's rule.

Why this way: the pass is pure (messages in, messages out), so its rule is pinned on histories
built by hand: the calls after the latest task, in history order, from 1; steers and notices do
not restart the count, a new task does. That the card shows the same numbers for a real
analysis is checked end to end in tests/bot/analysis/test_cited_answer_e2e.py.
"""

from __future__ import annotations

from agent_core import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserKind,
    UserMessage,
)
from agent_core._step_labels import label_steps, step_label, step_numbers


def batch(*ids: str) -> list[AssistantMessage | ToolMessage]:
    calls = tuple(ToolCall(id=i, name="http_get", arguments="{}") for i in ids)
    return [
        AssistantMessage(tool_calls=calls),
        *(ToolMessage(call_id=i, name="http_get", content=f"result {i}") for i in ids),
    ]


def history() -> list[Message]:
    return [
        UserMessage(content="why is checkout slow?"),
        *batch("a1", "a2"),
        AssistantMessage(content="the db"),
        UserMessage(content="what about now?", kind=UserKind.TASK),
        *batch("b1", "b2"),
        UserMessage(content="not the db", author="bob", kind=UserKind.STEER),
        *batch("b3"),
        UserMessage(content="a report came in", kind=UserKind.NOTICE),
        *batch("b4", "b5"),
    ]


def test_steps_are_the_calls_after_the_latest_task_and_steers_do_not_restart_them() -> None:
    assert step_numbers(history()) == {"b1": 1, "b2": 2, "b3": 3, "b4": 4, "b5": 5}
    assert step_numbers([UserMessage(content="hi")]) == {}
    assert step_numbers(batch("x")) == {"x": 1}  # no task at all: every call counts


def test_each_result_sent_ends_with_its_label_and_the_history_is_untouched() -> None:
    original = history()
    kept = [m.model_copy() for m in original]
    sent = label_steps([SystemMessage(content="rules"), *original], original)
    results = {m.call_id: m.content for m in sent if isinstance(m, ToolMessage)}
    assert results["b3"] == "result b3\n[step 3]"
    assert results["b5"] == "result b5" + step_label(5)
    assert results["a1"] == "result a1"  # an earlier analysis's calls are not steps
    assert original == kept  # nothing persisted changes
    assert label_steps(sent, original) == sent  # idempotent: no label twice


def test_numbers_come_from_the_history_even_when_what_is_sent_leaves_some_out() -> None:
    full = history()
    compacted = [m for m in full if not (isinstance(m, ToolMessage) and m.call_id == "b1")]
    sent = label_steps(compacted, full)
    assert [m.content for m in sent if isinstance(m, ToolMessage)][-3:] == [
        "result b3\n[step 3]",
        "result b4\n[step 4]",
        "result b5\n[step 5]",
    ]
