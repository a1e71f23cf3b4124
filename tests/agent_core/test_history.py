"""Handcrafted histories for `agent_core._history` and each pass of `agent_core._repair`.

Why table-driven, with literal histories: each row is one failure class from docs/reliability.md
(H4 duplicate ids, H5 empty id, H6 text with calls, H7 displaced result, H8 orphan) written the
way it shows up in a corrupted store, so a failing row names the provider rule that broke. The
expected error texts are the providers' own (docs/design.md §Platform facts), because operators grep
logs for them. Random histories live in `test_repair_properties.py`; these pin the exact output of
each pass.
"""

from __future__ import annotations

import pytest

from agent_core._errors import HistoryError
from agent_core._history import is_closed, open_calls, validate_history
from agent_core._messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
)
from agent_core._repair import (
    INTERRUPTED_RESULT,
    REPAIR_PASSES,
    RepairPass,
    close_dangling_calls,
    drop_orphan_results,
    rename_duplicate_ids,
    rename_empty_ids,
    repair_history,
    restore_displaced_results,
)


def call(call_id: str, name: str = "http_get", arguments: str = "{}") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments)


def ask(*calls: ToolCall | str, text: str = "") -> AssistantMessage:
    built = tuple(c if isinstance(c, ToolCall) else call(c) for c in calls)
    return AssistantMessage(content=text, tool_calls=built)


def result(call_id: str, content: str = "ok", name: str = "http_get") -> ToolMessage:
    return ToolMessage(call_id=call_id, name=name, content=content)


def user(text: str = "why is checkout slow?") -> UserMessage:
    return UserMessage(content=text)


SYSTEM = SystemMessage(content="You are an SRE assistant.")


def set_based_closed(messages: list[Message]) -> bool:
    """The naive check docs/reliability.md H7 warns about: every call has a result *somewhere*."""
    calls = {c.id for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
    results = {m.call_id for m in messages if isinstance(m, ToolMessage)}
    return calls == results


VALID: dict[str, list[Message]] = {
    "empty": [],
    "text only": [SYSTEM, user(), AssistantMessage(content="It is the database.")],
    "one batch": [user(), ask("c1"), result("c1"), AssistantMessage(content="done")],
    "answers in any order": [
        user(),
        ask("c1", "c2", "c3"),
        result("c3"),
        result("c1"),
        result("c2"),
    ],
    "H6 text with calls": [user(), ask("c1", text="Let me look."), result("c1")],
    "two turns": [user(), ask("c1"), result("c1"), user("and now?"), ask("c2"), result("c2")],
    "synthetic answer": [
        user(),
        ask("c1"),
        ToolMessage(call_id="c1", name="x", content="i", status=ToolStatus.SYNTHETIC),
    ],
}


@pytest.mark.parametrize("history", VALID.values(), ids=VALID.keys())
def test_valid_histories_pass(history: list[Message]) -> None:
    validate_history(history)
    assert is_closed(history)


INVALID: dict[str, tuple[list[Message], int, tuple[str, ...], str]] = {
    "H4 duplicate ids in one message": (
        [user(), ask("c0", "c0"), result("c0"), result("c0")],
        1,
        ("c0",),
        "Duplicate value for 'tool_calls[].id' of 'c0'",
    ),
    "H4 duplicate ids across turns": (
        [user(), ask("c0"), result("c0"), user(), ask("c0"), result("c0")],
        4,
        ("c0",),
        "Duplicate value for 'tool_calls[].id' of 'c0'",
    ),
    "H5 empty id": (
        [user(), ask(""), result("")],
        1,
        ("",),
        "Invalid 'tool_calls[0].id': empty string",
    ),
    "H7 result displaced after a user message": (
        [user(), ask("c1"), user("hurry"), result("c1")],
        1,
        ("c1",),
        "The following tool_call_ids did not have response messages: c1",
    ),
    "dangling tail": (
        [user(), ask("c1", "c2"), result("c1")],
        1,
        ("c2",),
        "The following tool_call_ids did not have response messages: c2",
    ),
    "H8 orphan after a user message": (
        [user(), result("c9")],
        1,
        ("c9",),
        "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
    ),
    "H8 orphan after a text-only answer": (
        [user(), AssistantMessage(content="hi"), result("c1")],
        2,
        ("c1",),
        "must be a response to a preceeding message",
    ),
    "H8 orphan inside a block": (
        [user(), ask("c1"), result("c1"), result("c2")],
        3,
        ("c2",),
        "must be a response to a preceeding message",
    ),
    "second answer to one call": (
        [user(), ask("c1"), result("c1"), result("c1")],
        3,
        ("c1",),
        "Duplicate value for 'tool_call_id' of 'c1', in messages[2] and messages[3]",
    ),
    "result before its call": (
        [user(), result("c1"), ask("c1")],
        1,
        ("c1",),
        "must be a response to a preceeding message",
    ),
    "result of an older call in a later block": (
        [user(), ask("c1"), user(), ask("c2"), result("c2"), result("c1")],
        1,
        ("c1",),
        "did not have response messages: c1",
    ),
}


@pytest.mark.parametrize(("history", "index", "call_ids", "text"), INVALID.values(), ids=INVALID)
def test_violations_fail_with_provider_wording(
    history: list[Message], index: int, call_ids: tuple[str, ...], text: str
) -> None:
    with pytest.raises(HistoryError) as caught:
        validate_history(history)
    assert caught.value.index == index
    assert caught.value.call_ids == call_ids
    assert str(caught.value).startswith(f"messages[{index}]: ")
    assert text in str(caught.value)
    assert not is_closed(history)


def test_adjacency_not_presence_h7() -> None:
    """A set-based check accepts the displaced result; the validator must not."""
    displaced: list[Message] = [user(), ask("c1"), user("hurry"), result("c1")]
    assert set_based_closed(displaced)
    assert not is_closed(displaced)


OPEN: dict[str, tuple[list[Message], tuple[str, ...]]] = {
    "nothing": ([], ()),
    "no assistant": ([user()], ()),
    "batch just requested": ([user(), ask("c1", "c2")], ("c1", "c2")),
    "batch half answered": ([user(), ask("c1", "c2"), result("c2")], ("c1",)),
    "batch closed": ([user(), ask("c1"), result("c1")], ()),
    "text answer after a batch": ([user(), ask("c1"), result("c1"), ask(text="done")], ()),
    "only the last assistant counts": ([user(), ask("c1"), user(), ask("c2")], ("c2",)),
    "a result after a user message does not answer": ([user(), ask("c1"), user()], ("c1",)),
}


@pytest.mark.parametrize(("history", "expected"), OPEN.values(), ids=OPEN)
def test_open_calls(history: list[Message], expected: tuple[str, ...]) -> None:
    assert tuple(c.id for c in open_calls(history)) == expected


# --- repair passes, one at a time ----------------------------------------------------------


def ids_of(message: Message) -> tuple[str, ...]:
    assert isinstance(message, AssistantMessage)
    return tuple(c.id for c in message.tool_calls)


@pytest.mark.parametrize("history", VALID.values(), ids=VALID.keys())
@pytest.mark.parametrize("repair_pass", REPAIR_PASSES, ids=lambda p: p.name)
def test_every_pass_returns_its_input_when_nothing_to_fix(
    repair_pass: RepairPass, history: list[Message]
) -> None:
    fixed = repair_pass.fix(history)
    assert fixed.messages is history
    assert fixed.notes == ()
    assert repair_pass(history) is history


def test_pass_order_is_the_documented_one() -> None:
    assert [p.name for p in REPAIR_PASSES] == [
        "rename_empty_ids",
        "rename_duplicate_ids",
        "restore_displaced_results",
        "drop_orphan_results",
        "close_dangling_calls",
    ]


def test_pass_docstrings_carry_their_label() -> None:
    labels = [(p.fix.__doc__ or "").split(":")[0] for p in REPAIR_PASSES]
    assert labels == ["RENAME", "RENAME", "MOVE (REMOVE + ADD)", "REMOVE", "ADD"]


def test_rename_empty_ids_pairs_answers_by_name_and_is_stable() -> None:
    history: list[Message] = [
        user(),
        ask(call("", "http_get"), call("", "query_logs")),
        result("", "logs", name="query_logs"),
        result("", "page", name="http_get"),
    ]
    fixed = rename_empty_ids(history).messages
    probe, logs = ids_of(fixed[1])
    assert probe and logs and probe != logs
    assert [m.call_id for m in fixed[2:] if isinstance(m, ToolMessage)] == [logs, probe]
    validate_history(fixed)
    # Stable: the id does not depend on where the message sits (compaction drops the prefix).
    again = rename_empty_ids([SYSTEM, *history]).messages
    assert ids_of(again[2]) == (probe, logs)


def test_identical_empty_id_calls_in_two_turns_get_distinct_ids() -> None:
    """Same probe, same arguments, next turn: the stable ids collide and pass 2 resolves it."""
    history: list[Message] = [user(), ask(""), result("", "a"), user(), ask(""), result("", "b")]
    out = repair_history(history).messages
    (first,) = ids_of(out[1])
    assert ids_of(out[4]) == (f"{first}~2",)
    assert out[2] == result(first, "a") and out[5] == result(f"{first}~2", "b")


def test_rename_empty_ids_leaves_unmatched_empty_results_to_the_orphan_pass() -> None:
    history: list[Message] = [user(), ask(""), result(""), result("")]
    fixed = rename_empty_ids(history).messages
    (new_id,) = ids_of(fixed[1])
    assert [m.call_id for m in fixed if isinstance(m, ToolMessage)] == [new_id, ""]


def test_rename_duplicate_ids_across_turns_h4() -> None:
    history: list[Message] = [
        user(),
        ask("c0"),
        result("c0", "first"),
        user(),
        ask("c0"),
        result("c0", "second"),
    ]
    fix = rename_duplicate_ids(history)
    out = fix.messages
    assert ids_of(out[1]) == ("c0",) and out[2] == history[2]
    assert ids_of(out[4]) == ("c0~2",)
    assert out[5] == result("c0~2", "second")
    assert fix.notes == (
        "messages[4]: duplicate call id 'c0' renamed 'c0~2'",
        "messages[5]: result for 'c0' renamed 'c0~2'",
    )


def test_rename_duplicate_ids_within_one_message_h4() -> None:
    history: list[Message] = [user(), ask("c0", "c0", "c0"), result("c0", "a"), result("c0", "b")]
    out = rename_duplicate_ids(history).messages
    assert ids_of(out[1]) == ("c0", "c0~2", "c0~3")
    assert [m.call_id for m in out[2:] if isinstance(m, ToolMessage)] == ["c0", "c0~2"]


def test_rename_duplicate_ids_avoids_ids_already_in_use() -> None:
    history: list[Message] = [user(), ask("c0"), result("c0"), ask("c0~2"), result("c0~2")]
    history += [ask("c0"), result("c0")]
    out = rename_duplicate_ids(history).messages
    assert ids_of(out[5]) == ("c0~3",)
    validate_history(out)


def test_rename_duplicate_ids_gives_a_displaced_result_the_latest_occurrence() -> None:
    history: list[Message] = [
        user(),
        ask("c0"),
        result("c0"),
        ask("c0"),
        user(),
        result("c0", "late"),
    ]
    out = repair_history(history).messages
    assert out == [
        user(),
        ask("c0"),
        result("c0"),
        ask("c0~2"),
        result("c0~2", "late"),
        user(),
    ]


def test_hermes_regression_reused_id_then_user_message() -> None:
    """NousResearch/hermes-agent#11722: a reused id looked paired to a set-based sanitizer."""
    history: list[Message] = [user(), ask("b9"), result("b9"), ask("b9"), user("nudge")]
    assert set_based_closed(history)
    report = repair_history(history)
    assert ids_of(report.messages[3]) == ("b9~2",)
    synthetic = report.messages[4]
    assert isinstance(synthetic, ToolMessage) and synthetic.call_id == "b9~2"
    assert synthetic.status is ToolStatus.SYNTHETIC


def test_restore_displaced_result_after_user_message_h7() -> None:
    history: list[Message] = [user(), ask("c1", "c2"), result("c1"), user("hurry"), result("c2")]
    fix = restore_displaced_results(history)
    assert fix.messages == [user(), ask("c1", "c2"), result("c1"), result("c2"), user("hurry")]
    assert fix.notes == ("messages[4]: result for 'c2' moved back after messages[1]",)


def test_restore_displaced_result_out_of_a_later_block_in_call_order() -> None:
    history: list[Message] = [
        user(),
        ask("c1", "c2"),
        user(),
        ask("c3"),
        result("c3"),
        result("c2"),
        result("c1"),
    ]
    out = restore_displaced_results(history).messages
    assert out == [
        user(),
        ask("c1", "c2"),
        result("c1"),
        result("c2"),
        user(),
        ask("c3"),
        result("c3"),
    ]


def test_restore_leaves_a_displaced_second_answer_and_a_result_before_its_call() -> None:
    answered: list[Message] = [user(), ask("c1"), result("c1"), user(), result("c1", "again")]
    early: list[Message] = [user(), result("c1"), ask("c1")]
    assert restore_displaced_results(answered).messages is answered
    assert restore_displaced_results(early).messages is early


def test_restore_moves_only_the_first_displaced_answer() -> None:
    history: list[Message] = [
        user(),
        ask("c1"),
        user(),
        result("c1", "a"),
        user(),
        result("c1", "b"),
    ]
    out = restore_displaced_results(history).messages
    assert out == [user(), ask("c1"), result("c1", "a"), user(), user(), result("c1", "b")]
    assert repair_history(history).messages == out[:-1]


DROPS: dict[str, tuple[list[Message], list[Message], str]] = {
    "H8 after a user message": ([user(), result("c9")], [user()], "no call in the block before"),
    "after a text answer": (
        [user(), ask(text="hi"), result("c1")],
        [user(), ask(text="hi")],
        "no call in the block before",
    ),
    "unknown id in a block": (
        [user(), ask("c1"), result("c1"), result("zz")],
        [user(), ask("c1"), result("c1")],
        "no call in the block before",
    ),
    "second answer": (
        [user(), ask("c1"), result("c1", "a"), result("c1", "b")],
        [user(), ask("c1"), result("c1", "a")],
        "a second answer",
    ),
}


@pytest.mark.parametrize(("history", "expected", "why"), DROPS.values(), ids=DROPS)
def test_drop_orphan_results(history: list[Message], expected: list[Message], why: str) -> None:
    fix = drop_orphan_results(history)
    assert fix.messages == expected
    assert len(fix.notes) == 1 and why in fix.notes[0]


def test_close_dangling_calls_after_the_block_in_call_order() -> None:
    history: list[Message] = [
        user(),
        ask(call("c1", "a"), call("c2", "b"), call("c3", "c")),
        result("c2", name="b"),
        user("stop"),
        ask("c4"),
    ]
    out = close_dangling_calls(history).messages
    synthetic = [m for m in out if isinstance(m, ToolMessage) and m.status is ToolStatus.SYNTHETIC]
    assert [m.call_id for m in out if isinstance(m, ToolMessage)] == ["c2", "c1", "c3", "c4"]
    assert [(m.call_id, m.name) for m in synthetic] == [
        ("c1", "a"),
        ("c3", "c"),
        ("c4", "http_get"),
    ]
    assert all(m.content == INTERRUPTED_RESULT for m in synthetic)
    assert "interrupted before it returned a result" in INTERRUPTED_RESULT
    assert "history repair" in INTERRUPTED_RESULT
    assert out[5] == user("stop")
    validate_history(out)


# --- repair_history --------------------------------------------------------------------------


@pytest.mark.parametrize("history", VALID.values(), ids=VALID.keys())
def test_repair_history_leaves_a_valid_history_alone(history: list[Message]) -> None:
    report = repair_history(history)
    assert report.messages is history
    assert report.changes == () and not report.changed


@pytest.mark.parametrize(("history", "index", "call_ids", "text"), INVALID.values(), ids=INVALID)
def test_repair_history_fixes_every_violation(
    history: list[Message], index: int, call_ids: tuple[str, ...], text: str
) -> None:
    report = repair_history(history)
    validate_history(report.messages)
    assert report.changed
    assert all(note.split(":")[0] in {p.name for p in REPAIR_PASSES} for note in report.changes)
    assert repair_history(report.messages).messages is report.messages


def test_repair_history_of_a_displaced_result_keeps_the_real_result() -> None:
    history: list[Message] = [user(), ask("c1"), user("hurry"), result("c1", "200 OK")]
    report = repair_history(history)
    assert report.messages == [user(), ask("c1"), result("c1", "200 OK"), user("hurry")]
    assert report.changes == (
        "restore_displaced_results: messages[3]: result for 'c1' moved back after messages[1]",
    )


def test_repair_history_accepts_any_sequence() -> None:
    history = (user(), ask("c1"))
    report = repair_history(history)
    assert [type(m) for m in report.messages] == [UserMessage, AssistantMessage, ToolMessage]
