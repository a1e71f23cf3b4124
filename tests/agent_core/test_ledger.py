"""The balance ledger, exactly as the design specifies it.

Why this way: the ledger is a pure counter, so the seed's semantics are pinned with a few exact
cases and a Hypothesis property over random event streams, compared with a plain-arithmetic
model: +1 per call and -1 per response in final events, 0 for partial and text-only events,
`observe` true exactly when the balance falls from above zero back to zero.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_core import BalanceLedger, RunEvent, ToolCall, ToolMessage
from agent_core._events import EventSource, FunctionCallPart, FunctionResponsePart, TextPart
from agent_core._ledger import delta


def calls(n: int, *, partial: bool = False) -> RunEvent:
    parts = tuple(FunctionCallPart(call=ToolCall(id=f"c{i}", name="t")) for i in range(n))
    return RunEvent(source=EventSource.MODEL, parts=parts, partial=partial)


def responses(n: int) -> RunEvent:
    parts = tuple(
        FunctionResponsePart(response=ToolMessage(call_id=f"c{i}", name="t", content="x"))
        for i in range(n)
    )
    return RunEvent(source=EventSource.TOOL, parts=parts)


def text(partial: bool = True) -> RunEvent:
    return RunEvent(source=EventSource.MODEL, parts=(TextPart(text="…"),), partial=partial)


def test_a_batch_of_three_closes_on_the_third_response() -> None:
    ledger = BalanceLedger()
    assert [ledger.observe(e) for e in (text(), calls(3), responses(1), text(), responses(1))] == [
        False,
        False,
        False,
        False,
        False,
    ]
    assert ledger.balance == 1 and ledger.is_open
    assert ledger.observe(responses(1)) is True
    assert ledger.balance == 0 and not ledger.is_open


def test_partial_and_text_only_events_never_count() -> None:
    assert delta(calls(4, partial=True)) == 0
    assert delta(text(partial=False)) == 0
    assert delta(calls(2)) == 2 and delta(responses(3)) == -3


def test_a_response_with_nothing_open_is_not_a_crossing_and_is_flagged() -> None:
    ledger = BalanceLedger()
    assert ledger.observe(responses(1)) is False
    assert ledger.balance == 0 and ledger.overdrawn == 1


def test_one_event_carrying_calls_and_responses_counts_both() -> None:
    ledger = BalanceLedger()
    ledger.observe(calls(2))
    mixed = RunEvent(source=EventSource.MODEL, parts=calls(1).parts + responses(2).parts)
    assert ledger.observe(mixed) is False and ledger.balance == 1


events = st.one_of(
    st.builds(calls, st.integers(0, 4), partial=st.booleans()),
    st.builds(responses, st.integers(0, 3)),
    st.builds(text, st.booleans()),
)


@settings(max_examples=1000)
@given(st.lists(events, max_size=40))
def test_observe_matches_the_arithmetic_model(stream: list[RunEvent]) -> None:
    ledger, balance = BalanceLedger(), 0
    for event in stream:
        change = 0 if event.partial else len(event.calls) - len(event.responses)
        crossed = ledger.observe(event)
        was_open = balance > 0
        balance = max(0, balance + change)
        assert ledger.balance == balance >= 0
        assert crossed == (change != 0 and was_open and balance == 0)
