"""Property tests for history validation and repair (docs/design.md §Testing, §Invariants I1).

Why Hypothesis: a corrupted store can hold any interleaving of messages, and the handcrafted
cases in `test_history.py` only cover the corruptions we thought of. Three generators feed the
properties: random "soups" over a tiny id alphabet (so empty, reused and `~2`-suffixed ids
collide often), valid histories built turn by turn, and valid histories broken by the faults a
crash or a bad store produces (a lost, moved, duplicated or re-id'd message, a user message
pushed into a tool block).

Every message gets a unique tag (its content, or its call's arguments) after generation, so a
property can follow one message or call through repair even when repair renames its id. The
validator is also checked against the reference validator of docs/reliability.md §Reference
validator.

CI requires at least 1,000 examples per main property; histories stay short (≤ 16 messages),
which keeps the file at a few seconds while still reaching every pass and every interaction
between passes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core._errors import HistoryError
from agent_core._history import is_closed, validate_history
from agent_core._messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    ToolStatus,
    UserMessage,
)
from agent_core._repair import INTERRUPTED_RESULT, REPAIR_PASSES, repair_history

IDS = ("", "c0", "c1", "c2", "c0~2")
NAMES = ("http_get", "query_logs")


def tagged(messages: list[Message]) -> list[Message]:
    """Give every message (and every call) a unique tag, keeping ids, names and statuses."""
    out: list[Message] = []
    for i, m in enumerate(messages):
        if isinstance(m, AssistantMessage):
            calls = tuple(
                c.model_copy(update={"arguments": f'{{"tag": "m{i}.{k}"}}'})
                for k, c in enumerate(m.tool_calls)
            )
            out.append(AssistantMessage(content=f"m{i}" if m.content else "", tool_calls=calls))
        else:
            out.append(m.model_copy(update={"content": f"m{i}"}))
    return out


def assistant(text: bool, calls: list[tuple[str, str]]) -> AssistantMessage:
    return AssistantMessage(
        content="x" if text else "",
        tool_calls=tuple(ToolCall(id=i, name=n) for i, n in calls),
    )


ANY_MESSAGE = st.one_of(
    st.builds(SystemMessage, content=st.just("s")),
    st.builds(UserMessage, content=st.just("u")),
    st.builds(
        assistant,
        st.booleans(),
        st.lists(st.tuples(st.sampled_from(IDS), st.sampled_from(NAMES)), max_size=3),
    ),
    st.builds(
        ToolMessage,
        call_id=st.sampled_from(IDS),
        name=st.sampled_from(NAMES),
        content=st.just("r"),
        status=st.sampled_from(ToolStatus),
    ),
)
SOUPS = st.lists(ANY_MESSAGE, max_size=14).map(tagged)


@st.composite
def valid_histories(draw: st.DrawFn) -> list[Message]:
    """Closed histories: turns of a user message, batches answered in any order, a final text."""
    messages: list[Message] = [SystemMessage(content="s")]
    next_id = 0
    for _ in range(draw(st.integers(0, 3))):
        messages.append(UserMessage(content="u"))
        for _ in range(draw(st.integers(0, 2))):
            names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3))
            calls = [(f"c{next_id + k}", name) for k, name in enumerate(names)]
            next_id += len(calls)
            messages.append(assistant(draw(st.booleans()), calls))
            for k in draw(st.permutations(range(len(calls)))):
                messages.append(ToolMessage(call_id=calls[k][0], name=calls[k][1], content="r"))
        if draw(st.booleans()):
            messages.append(AssistantMessage(content="done"))
    return tagged(messages)


Fault = Callable[[list[Message], st.DrawFn], None]


def _has_calls(message: Message) -> bool:
    return isinstance(message, AssistantMessage) and bool(message.tool_calls)


def _pick(draw: st.DrawFn, messages: list[Message], want: Callable[[Message], bool]) -> int | None:
    """A random index among the messages `want` accepts, or None."""
    candidates = [i for i, m in enumerate(messages) if want(m)]
    return draw(st.sampled_from(candidates)) if candidates else None


def _delete(messages: list[Message], draw: st.DrawFn) -> None:
    """A lost write: a result (dangling call) or an assistant message (orphans)."""
    del messages[draw(st.integers(0, len(messages) - 1))]


def _move(messages: list[Message], draw: st.DrawFn) -> None:
    """A result stored out of place (H7), or any message reordered."""
    source = _pick(draw, messages, lambda m: isinstance(m, ToolMessage))
    source = draw(st.integers(0, len(messages) - 1)) if source is None else source
    messages.insert(draw(st.integers(0, len(messages) - 1)), messages.pop(source))


def _duplicate(messages: list[Message], draw: st.DrawFn) -> None:
    """A write replayed: a second answer, or an assistant message (and its ids) twice."""
    source = draw(st.integers(0, len(messages) - 1))
    messages.insert(draw(st.integers(0, len(messages))), messages[source])


def _interject(messages: list[Message], draw: st.DrawFn) -> None:
    """A user message stored inside a tool block (a steer racing the batch)."""
    messages.insert(draw(st.integers(0, len(messages))), UserMessage(content="steer"))


def _reuse_id(messages: list[Message], draw: st.DrawFn) -> None:
    """The model reused an id (H4) or sent none (H5), and the loop answered with that id."""
    target = _pick(draw, messages, _has_calls)
    if target is None:
        return
    source = _pick(draw, messages, lambda m: _has_calls(m) and m is not messages[target])
    call = messages[target]
    assert isinstance(call, AssistantMessage)
    k = draw(st.integers(0, len(call.tool_calls) - 1))
    donor = messages[source] if source is not None else None
    new_id = donor.tool_calls[0].id if isinstance(donor, AssistantMessage) else ""
    old_id = call.tool_calls[k].id
    calls = list(call.tool_calls)
    calls[k] = calls[k].model_copy(update={"id": new_id})
    messages[target] = call.model_copy(update={"tool_calls": tuple(calls)})
    cursor = target + 1
    while cursor < len(messages) and isinstance(answer := messages[cursor], ToolMessage):
        if answer.call_id == old_id:
            messages[cursor] = answer.model_copy(update={"call_id": new_id})
        cursor += 1


FAULTS: tuple[Fault, ...] = (_delete, _move, _duplicate, _interject, _reuse_id)


@st.composite
def corrupted_histories(draw: st.DrawFn) -> list[Message]:
    """Valid histories hit by one to three faults a crash or a bad store can produce."""
    messages = list(draw(valid_histories()))
    for fault in draw(st.lists(st.sampled_from(FAULTS), min_size=1, max_size=3)):
        if messages:
            fault(messages, draw)
    return tagged(messages)


HISTORIES = st.one_of(SOUPS, valid_histories(), corrupted_histories())


def reference_closed(messages: list[Message]) -> bool:
    """The reference validator of docs/reliability.md, ported from wire dicts to `Message`s."""
    seen: set[str] = set()
    i = 0
    while i < len(messages):
        m = messages[i]
        if isinstance(m, ToolMessage):
            return False
        ids = [c.id for c in m.tool_calls] if isinstance(m, AssistantMessage) else []
        if any(not x for x in ids) or len(set(ids)) != len(ids) or seen & set(ids):
            return False
        seen |= set(ids)
        j, answered = i + 1, []
        while j < len(messages) and isinstance(after := messages[j], ToolMessage):
            answered.append(after.call_id)
            j += 1
        if (answered and not ids) or sorted(answered) != sorted(ids):
            return False
        i = j if ids else i + 1
    return True


def call_tags(messages: list[Message]) -> dict[str, ToolCall]:
    """Call tag (its arguments) -> the call."""
    return {
        c.arguments: c for m in messages if isinstance(m, AssistantMessage) for c in m.tool_calls
    }


def first_answers_in_block(messages: list[Message]) -> set[str]:
    """Tags of the first answers to each call of the assistant message before their block."""
    tags: set[str] = set()
    open_ids: Counter[str] = Counter()
    for m in messages:
        if not isinstance(m, ToolMessage):
            open_ids = (
                Counter(c.id for c in m.tool_calls)
                if isinstance(m, AssistantMessage)
                else Counter()
            )
        elif open_ids[m.call_id] > 0:
            open_ids[m.call_id] -= 1
            tags.add(m.content)
    return tags


def skeleton(message: Message) -> object:
    """What repair must preserve of a non-tool message: everything but call ids."""
    if isinstance(message, AssistantMessage):
        return (message.content, tuple((c.name, c.arguments) for c in message.tool_calls))
    return message


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_repair_output_always_validates(history: list[Message]) -> None:
    validate_history(repair_history(history).messages)


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_repair_and_each_pass_are_idempotent(history: list[Message]) -> None:
    once = repair_history(history).messages
    twice = repair_history(once)
    assert twice.messages is once
    assert twice.changes == ()
    # Stronger than the pipeline contract: each pass alone, on any history, is idempotent too.
    for repair_pass in REPAIR_PASSES:
        fixed = repair_pass(history)
        assert repair_pass(fixed) is fixed


@settings(max_examples=1000, deadline=None)
@given(valid_histories())
def test_valid_history_is_returned_unchanged(history: list[Message]) -> None:
    validate_history(history)
    report = repair_history(history)
    assert report.messages is history
    assert report.changes == ()
    for repair_pass in REPAIR_PASSES:
        assert repair_pass(history) is history


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_validator_raises_only_history_error_and_agrees_with_reference(
    history: list[Message],
) -> None:
    try:
        validate_history(history)
    except HistoryError as error:
        assert 0 <= error.index < len(history)
        assert str(error).startswith(f"messages[{error.index}]: ")
        closed = False
    else:
        closed = True
    assert closed == is_closed(history) == reference_closed(history)


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_repair_keeps_every_non_tool_message_in_order(history: list[Message]) -> None:
    out = repair_history(history).messages
    before = [skeleton(m) for m in history if not isinstance(m, ToolMessage)]
    after = [skeleton(m) for m in out if not isinstance(m, ToolMessage)]
    assert after == before


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_surviving_results_answer_the_same_call(history: list[Message]) -> None:
    """A kept result answers a call with its original id (renamed or not); others are synthetic.

    And nothing that already answered a call in its own block is lost: every first answer to a
    call of the assistant message right before it survives, whatever else repair does.
    """
    original_call_ids = {tag: c.id for tag, c in call_tags(history).items()}
    original_answers = {m.content: m.call_id for m in history if isinstance(m, ToolMessage)}
    out = repair_history(history).messages
    by_new_id = {c.id: tag for tag, c in call_tags(out).items()}
    survivors = set()
    for m in out:
        if not isinstance(m, ToolMessage):
            continue
        if m.content not in original_answers:
            assert m.status is ToolStatus.SYNTHETIC and m.content == INTERRUPTED_RESULT
            continue
        survivors.add(m.content)
        assert original_call_ids[by_new_id[m.call_id]] == original_answers[m.content]
    assert first_answers_in_block(history) <= survivors


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_repair_renames_only_empty_or_reused_ids(history: list[Message]) -> None:
    uses = Counter(c.id for c in call_tags(history).values())
    before = call_tags(history)
    for tag, c in call_tags(repair_history(history).messages).items():
        original = before[tag].id
        assert c.id == original or original == "" or uses[original] > 1


@settings(max_examples=1000, deadline=None)
@given(HISTORIES)
def test_an_unambiguous_real_result_is_never_replaced(history: list[Message]) -> None:
    """A result whose id names exactly one earlier call, and no other result, survives repair."""
    calls = Counter(c.id for c in call_tags(history).values())
    answers = Counter(m.call_id for m in history if isinstance(m, ToolMessage))
    first_call: dict[str, int] = {}
    for i, m in enumerate(history):
        for c in m.tool_calls if isinstance(m, AssistantMessage) else ():
            first_call.setdefault(c.id, i)
    survivors = {m.content for m in repair_history(history).messages if isinstance(m, ToolMessage)}
    for i, m in enumerate(history):
        if not isinstance(m, ToolMessage) or not m.call_id:
            continue
        if calls[m.call_id] == 1 and answers[m.call_id] == 1 and first_call[m.call_id] < i:
            assert m.content in survivors
