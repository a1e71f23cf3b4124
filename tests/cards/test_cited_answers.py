"""An answer's citations and sections on every platform: references to steps, within limits.

Why this way: the answer is model output (up to 40 KB, maybe hostile), and its citations `[3]`
turn into markup, so the renderers are checked the way the rest of the card is
(tests/cards/test_cards.py): examples pin what a person reads (each citation of a step a
reference naming its tool, a citation of no step left as text, the parts apart, mentions still
defused), and properties over random answers built from citations, headings and nasty text check
that every platform's limits still hold. Nothing here does I/O.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cards import (
    FEISHU,
    CardStatus,
    CardStep,
    ProgressCard,
    StepState,
    render_console,
    render_feishu,
    render_slack,
)
from cards._answer import MAX_SECTIONS, sections, share
from cards._mentions import JOINER as J
from tests.cards.test_cards import FAST, NASTY, check_feishu, check_slack

STEPS = (
    CardStep(tool="prometheus_query", args="query=rate(http_errors[5m])", state=StepState.DONE),
    CardStep(tool="http_get", args="url=https://status.example.com", state=StepState.DONE),
    CardStep(tool="kubectl_get", args="resource=pods", state=StepState.FAILED),
)
ANSWER = """Checked the error rate and the status page.
Findings:
Errors rose at 12:03 [1]; the status page is up [2][3].
## Hypotheses
The gateway pool is exhausted [1, 2], though [9] and pods[1] say nothing.
**Next steps:** restart nothing yet; check the pool [4]."""


def answered(answer: str = ANSWER, steps: tuple[CardStep, ...] = STEPS) -> ProgressCard:
    return ProgressCard(
        title="Why is checkout failing?",
        turn_id="turn-1",
        status=CardStatus.ANSWERED,
        steps=steps,
        answer=answer,
    )


def slack_answer(shown: ProgressCard) -> list[dict[str, Any]]:
    blocks = render_slack(shown)
    return blocks[next(i for i, b in enumerate(blocks) if b["type"] == "divider") + 1 :]


def feishu_answer(shown: ProgressCard) -> list[dict[str, Any]]:
    elements: list[dict[str, Any]] = render_feishu(shown)["body"]["elements"]
    return elements[next(i for i, e in enumerate(elements) if e["tag"] == "hr") + 1 :]


def test_slack_cites_steps_as_bold_references_in_separate_parts_with_their_sources() -> None:
    parts = slack_answer(answered())
    texts = [b["text"]["text"] for b in parts if b["type"] == "section"]
    assert texts == [
        "Checked the error rate and the status page.",
        "*Findings*\nErrors rose at 12:03 *[1 · prometheus_query]*; the status page is up "
        "*[2 · http_get, 3 · kubectl_get]*.",
        "*Hypotheses*\nThe gateway pool is exhausted *[1 · prometheus_query, 2 · http_get]*, "
        "though [9] and pods[1] say nothing.",
        "*Next steps*\nrestart nothing yet; check the pool [4].",
    ]
    [sources] = [b["elements"][0]["text"] for b in parts if b["type"] == "context"]
    assert sources.splitlines() == [
        "*Sources*",
        "*[1]* `prometheus_query` query=rate(http_errors[5m])",
        "*[2]* `http_get` url=https://status.example.com",
        "*[3]* `kubectl_get` resource=pods",
    ]


def test_feishu_cites_steps_as_bold_references_in_separate_elements() -> None:
    parts = feishu_answer(answered())
    contents = [e["content"] for e in parts if e["tag"] == "markdown"]
    assert contents[1] == (
        "**Findings**\nErrors rose at 12:03 **[1 · prometheus_query]**; the status page is up "
        "**[2 · http_get, 3 · kubectl_get]**."
    )
    assert contents[2].startswith("**Hypotheses**\n") and "though [9] and pods[1]" in contents[2]
    assert contents[3] == "**Next steps**\nrestart nothing yet; check the pool [4]."
    assert contents[4].splitlines()[:2] == [
        "**Sources**",
        "**[1]** `prometheus_query` query=rate(http_errors[5m])",
    ]
    assert parts[4]["text_size"] == "notation"


def test_console_cites_steps_as_plain_references_under_plain_headings() -> None:
    text = render_console(answered(), width=200)
    lines = text.splitlines()
    assert "1. ✅ `prometheus_query` query=rate(http_errors[5m])" in text
    assert "  3. ❌ `kubectl_get` resource=pods · failed" in lines
    at = lines.index("Findings")
    assert lines[at - 1] == "" and lines[at + 1] == (
        "Errors rose at 12:03 [1 · prometheus_query]; the status page is up "
        "[2 · http_get, 3 · kubectl_get]."
    )
    assert lines[lines.index("Next steps") - 1] == ""
    source = lines[lines.index("Sources") + 1]
    assert source == "  [1] `prometheus_query` query=rate(http_errors[5m])"


@pytest.mark.parametrize(
    "text",
    ["[0]", "[4]", "[1, 4]", "[12345]", "x[1]", "[1 2]", "[1,]", "[ ]", "[1", "[١]", "[-1]"],
)
def test_a_citation_of_no_step_is_left_as_it_was(text: str) -> None:
    assert slack_answer(answered(text))[0]["text"]["text"] == text
    assert feishu_answer(answered(text))[0]["content"] == text
    assert text in render_console(answered(text)).splitlines()


def test_an_answer_without_headings_renders_as_one_part_as_before() -> None:
    plain = "The db is down [1].\n\nRestart it? Findings from the logs say no."
    parts = slack_answer(answered(plain))
    assert [b["type"] for b in parts] == ["section", "context", "actions"][: len(parts)]
    assert parts[0]["text"]["text"] == (
        "The db is down *[1 · prometheus_query]*.\n\nRestart it? Findings from the logs say no."
    )
    assert sections("Findings from the logs\nsay no") == sections("Findings from the logs\nsay no")
    assert [s.heading for s in sections(plain)] == [""]


def test_mentions_in_the_answer_and_in_a_referenced_tool_name_stay_defused() -> None:
    steps = (CardStep(tool="<!channel>", args="<@U1>"),)
    shown = answered("Findings:\nTell <!channel> and @here [1]", steps)
    slack = json.dumps(slack_answer(shown), ensure_ascii=False)
    assert "<" not in slack and f"&lt;{J}!channel&gt;" in slack and f"@{J}here" in slack
    assert f"*[1 · &lt;{J}!channel&gt;]*" in slack
    feishu = json.dumps(feishu_answer(shown), ensure_ascii=False)
    assert "<" not in feishu and f"**[1 · &#60;{J}!channel&#62;]**" in feishu
    assert f"[1 · <{J}!channel>]" in render_console(shown)


def test_a_long_part_does_not_crowd_out_the_others() -> None:
    long = "Findings:\n" + "errors everywhere [1]. " * 1000 + "\nNext steps:\ncheck the pool"
    slack = [b["text"]["text"] for b in slack_answer(answered(long)) if b["type"] == "section"]
    assert slack[-1] == "*Next steps*\ncheck the pool" and slack[0].endswith("…")
    assert sum(len(text) for text in slack) <= 3000 + 2 * 16
    notes = [b for b in slack_answer(answered(long)) if b["type"] == "context"]
    assert f"Answer shortened to fit Slack ({len(long.strip()):,} characters in all)" in str(notes)
    feishu = [e["content"] for e in feishu_answer(answered(long)) if e["tag"] == "markdown"]
    assert "**Next steps**\ncheck the pool" in feishu


def test_share_gives_small_parts_all_they_need_and_splits_the_rest() -> None:
    assert share([10, 5000, 100], 3000) == [10, 2890, 100]
    assert share([5000, 5000], 3000) == [1500, 1500]
    assert share([], 3000) == []
    assert len(sections("\n".join(["Findings:", "x"] * 20))) == MAX_SECTIONS


@pytest.mark.parametrize(
    "hostile",
    [
        "[1," * 14_000,  # one bracket that never closes
        "[" * 40_000,
        "[1]" * 13_000,  # every one a reference
        "[1][2][3]" * 4_400,  # one 40 KB merged reference
        "Findings:\n" * 4_000,
        ("x" * 79 + "\n") * 500,  # lines just short enough to be looked at for a heading
    ],
)
def test_a_40_kb_hostile_answer_renders_within_every_limit(hostile: str) -> None:
    shown = answered(hostile)
    check_slack(render_slack(shown), shown)
    check_feishu(render_feishu(shown), shown, FEISHU)
    assert all(len(line) <= 80 for line in render_console(shown).splitlines())


pieces = st.sampled_from(
    [*NASTY, "[1]", "[2, 3]", "[1][3]", "[9]", "[", "]", ",", " ", "x", "\nFindings:\n"]
    + ["\n## Hypotheses\n", "\n**Next steps:** ", "😀" * 50, "中" * 300, "<!channel>"]
)
answers = st.builds(
    lambda parts, times: "".join(parts) * times,
    st.lists(pieces, max_size=60),
    st.integers(1, 60),
)
steps = st.lists(
    st.builds(CardStep, tool=st.sampled_from(["http_get", "😀" * 80, "<@U1>", ""]), args=answers),
    max_size=4,
).map(tuple)


@FAST
@given(answers, steps)
def test_cited_answers_stay_within_every_platforms_limits(answer: str, cited: Any) -> None:
    shown = answered(answer, cited)
    check_slack(render_slack(shown), shown)
    check_feishu(render_feishu(shown), shown, FEISHU)
    assert all(len(line) <= 80 for line in render_console(shown).splitlines())
