"""`ToolCallAssembler` on hostile and non-conformant delta sequences.

Why this way: these shapes are about which call a delta joins and how much one call may grow,
decided by the assembler alone, so they are fed to it directly; the real servers' streams go
through the SDK in test_stream_shapes.py. Bounds are asserted by counts (how many deltas were
taken before the refusal), never by time.
"""

from __future__ import annotations

import pytest

from agent_core import ModelUnavailable
from agent_core._llm.convert import MAX_NAME_CHARS, ToolCallAssembler


def test_a_name_in_endless_fragments_is_refused_once_past_the_cap() -> None:
    calls = ToolCallAssembler()
    taken = 0
    with pytest.raises(ModelUnavailable, match="name"):
        for taken in range(100_000):
            calls.feed(0, id="c", name="ab"[taken % 2], arguments=None)
    assert taken == MAX_NAME_CHARS  # each fragment grew the name by one; refused past the cap
    assert MAX_NAME_CHARS >= 64  # OpenAI's own limit on a function name fits


def test_a_name_at_the_cap_is_kept_whole() -> None:
    calls = ToolCallAssembler()
    for n in range(MAX_NAME_CHARS):
        calls.feed(0, id="c", name="ab"[n % 2], arguments=None)
    (only,) = calls.calls("r")
    assert len(only.name) == MAX_NAME_CHARS and only.name.startswith("abab")


def test_one_whole_name_over_the_cap_is_refused() -> None:
    with pytest.raises(ModelUnavailable, match="name"):
        ToolCallAssembler().feed(None, id="c", name="x" * (MAX_NAME_CHARS + 1), arguments="{}")


def test_a_new_id_in_each_chunk_of_one_call_at_one_index_is_still_one_call() -> None:
    """Poolside (poolsideai/pool#9) and mlx-openai-server before #216: one call, many ids."""
    calls = ToolCallAssembler()
    calls.feed(0, id="call_a", name="http_get", arguments="")
    calls.feed(0, id="call_b", name=None, arguments='{"url": ')
    calls.feed(0, id="call_c", name=None, arguments='"http://a/"}')
    calls.feed(1, id="call_d", name="http_probe", arguments="{")
    calls.feed(1, id="call_e", name=None, arguments="}")
    assert [(c.id, c.name, c.arguments) for c in calls.calls("r")] == [
        ("call_a", "http_get", '{"url": "http://a/"}'),
        ("call_d", "http_probe", "{}"),
    ]


def test_parallel_calls_all_at_index_0_each_with_a_name_are_separate_calls() -> None:
    """LiteLLM numbers parallel calls all 0; each new call's first delta carries its name."""
    calls = ToolCallAssembler()
    calls.feed(0, id="call_1", name="http_get", arguments='{"url": ')
    calls.feed(0, id=None, name=None, arguments='"http://a/"}')
    calls.feed(0, id="call_2", name="http_probe", arguments="{")
    calls.feed(0, id=None, name=None, arguments="}")
    assert [(c.id, c.name, c.arguments) for c in calls.calls("r")] == [
        ("call_1", "http_get", '{"url": "http://a/"}'),
        ("call_2", "http_probe", "{}"),
    ]
