"""Progress-card rendering: Slack blocks and Feishu card JSON stay valid for any card.

Why this way: a card Slack or Feishu refuses is not a cosmetic bug. `chat.update` fails whole
with `invalid_blocks`, Feishu answers 230025 past 30 KB, and the thread then shows a stale card
with a Stop button for a turn that has ended. The renderers are pure, so the limits are checked
as properties over random cards (long unicode and emoji titles, 0..500 steps, long answers full of
`<`, `&` and quotes, every status) instead of over the few cards we thought of. The Feishu byte
budget also gets a worst case built by hand (4-byte characters everywhere), because random text
rarely fills every field at once. Example tests pin the wording people read and the escaping that
keeps model output from pinging a channel. No fakes are needed: nothing here does I/O.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cards
from cards import (
    FEISHU,
    SLACK,
    CardStatus,
    CardStep,
    FeishuLimits,
    Intervention,
    InterventionKind,
    LimitExceeded,
    ProgressCard,
    SlackLimits,
    StepState,
    render_feishu,
    render_slack,
    slack_text,
    truncate,
)
from cards._feishu import HEADER_TEMPLATES, escape_markdown
from cards._mentions import JOINER as J
from cards._slack import escape_mrkdwn

FAST = settings(max_examples=200, deadline=None)
# Pieces that grow when escaped, cost bytes in JSON, or must not be split (the last is a family:
# three people joined by zero-width joiners).
NASTY = ["<", ">", "&", "@", "*", "`", '"', "\\", "\n", "\x00", "😀", "中", "e\u0301", "👍🏽"]
NASTY.append("\U0001f469\u200d\U0001f469\u200d\U0001f467")

nasty_texts = st.lists(st.sampled_from(NASTY), max_size=40).map("".join)
texts = st.one_of(st.text(max_size=40), nasty_texts)
long_texts = st.builds(lambda text, times: text * times, texts, st.integers(0, 400))
ids = st.from_regex(r"[A-Za-z0-9._:-]{1,64}", fullmatch=True)
seconds = st.floats(allow_nan=True, allow_infinity=True)
steps_strategy = st.builds(
    CardStep,
    tool=texts,
    args=long_texts,
    state=st.sampled_from(StepState),
    duration_s=st.none() | seconds,
)
interventions_strategy = st.builds(
    Intervention, kind=st.sampled_from(InterventionKind), by=texts, text=long_texts
)
cards_strategy = st.builds(
    ProgressCard,
    title=long_texts,
    turn_id=ids,
    thread=ids | st.just(""),
    status=st.sampled_from(CardStatus),
    # A few distinct steps repeated up to 500 times: the count matters, not 500 random texts.
    steps=st.builds(
        lambda pattern, n: tuple(itertools.islice(itertools.cycle(pattern), n)),
        st.lists(steps_strategy, min_size=1, max_size=4),
        st.integers(0, 500),
    ),
    interventions=st.lists(interventions_strategy, max_size=30).map(tuple),
    elapsed_s=seconds,
    pending_calls=st.integers(0, 10**6),
    answer=long_texts,
    error=long_texts,
    note=long_texts,
)


def card(**fields: Any) -> ProgressCard:
    return ProgressCard(**{"title": "Why is checkout slow?", "turn_id": "turn-1", **fields})


def steer(by: str, text: str = "") -> Intervention:
    return Intervention(kind=InterventionKind.STEER, by=by, text=text)


def stop(by: str) -> Intervention:
    return Intervention(kind=InterventionKind.STOP, by=by)


# --- Slack -----------------------------------------------------------------------------------


def check_mrkdwn(text: dict[str, Any], limit: int) -> None:
    assert text["type"] == "mrkdwn" and text["verbatim"] is True
    assert 1 <= len(text["text"]) <= limit
    assert "<" not in text["text"], "only escaped text: no mention, ping or link can form"


def check_slack_block(block: dict[str, Any]) -> list[dict[str, Any]]:
    """Check one block against SLACK; return its buttons."""
    kind = block["type"]
    if kind == "header":
        assert block["text"]["type"] == "plain_text"
        assert 1 <= len(block["text"]["text"]) <= SLACK.header_text
    elif kind == "section":
        check_mrkdwn(block["text"], SLACK.section_text)
    elif kind == "context":
        assert 1 <= len(block["elements"]) <= SLACK.context_elements
        for element in block["elements"]:
            check_mrkdwn(element, SLACK.context_text)
    else:
        assert kind in {"actions", "divider"}
    return list(block.get("elements", [])) if kind == "actions" else []


def check_slack(blocks: list[dict[str, Any]], shown: ProgressCard) -> None:
    assert 1 <= len(blocks) <= SLACK.max_blocks
    buttons = [button for block in blocks for button in check_slack_block(block)]
    # A live card has Stop; an answered final card nobody marked has "Mark answer wrong".
    assert len(buttons) == (0 if shown.is_final and not shown.can_mark_wrong else 1)
    for button in buttons:
        label = "Stop" if not shown.is_final else "Mark answer wrong"
        assert button["type"] == "button" and label in button["text"]["text"]
        assert button["value"] == shown.turn_id
        assert len(button["text"]["text"]) <= SLACK.button_text
        assert len(button["action_id"]) <= SLACK.action_id
        assert button["value"] == shown.turn_id and len(button["value"]) <= SLACK.button_value


@FAST
@given(cards_strategy)
def test_slack_blocks_stay_within_limits(shown: ProgressCard) -> None:
    check_slack(render_slack(shown), shown)
    text = slack_text(shown)
    assert 1 <= len(text) <= SLACK.fallback_text and "<" not in text


def test_live_card_has_the_stop_button_and_a_final_card_none() -> None:
    live = render_slack(card(status=CardStatus.WORKING))
    assert live[-1] == {
        "type": "actions",
        "elements": [
            {
                "type": "button",
                "action_id": "stop",
                "value": "turn-1",
                "style": "danger",
                "text": {"type": "plain_text", "text": "Stop"},
            }
        ],
    }
    for status in CardStatus:
        blocks = render_slack(card(status=status))
        assert any(b["type"] == "actions" for b in blocks) is not status.is_final


def test_slack_escapes_model_and_user_text() -> None:
    shown = card(
        status=CardStatus.ANSWERED,
        title="ping <!channel>",
        answer="Tell <!channel> & <@U123>: see <https://evil.example|docs>",
        steps=(CardStep(tool="http_get", args="url=<!here>"),),
        interventions=(steer("<!everyone>", "no, <!channel>"),),
    )
    dumped = json.dumps(render_slack(shown)[1:], ensure_ascii=False)  # header: plain_text
    assert "<!" not in dumped and "<@" not in dumped and "<http" not in dumped
    assert f"Tell &lt;{J}!channel&gt; &amp; &lt;{J}@U123&gt;" in dumped  # escaped and defused
    assert slack_text(shown) == (
        f"ping &lt;{J}!channel&gt; · Answered (redirected by &lt;{J}!everyone&gt;)"
    )


def test_slack_long_answer_is_cut_with_the_marker_and_a_note() -> None:
    blocks = render_slack(card(status=CardStatus.ANSWERED, answer="x" * 5000))
    answer = next(b for b in blocks if b["type"] == "section" and b["text"]["text"][0] == "x")
    assert answer["text"]["text"] == "x" * (SLACK.section_text - 1) + "…"
    [note] = [b for b in blocks if b["type"] == "context" and "characters" in str(b)]
    assert "5,000 characters" in note["elements"][0]["text"]


def test_slack_refuses_a_turn_id_it_would_have_to_cut() -> None:
    with pytest.raises(LimitExceeded) as raised:
        render_slack(card(turn_id="t" * (SLACK.button_value + 1)))
    assert raised.value.what == "turn_id" and raised.value.limit == SLACK.button_value
    render_slack(card(turn_id="t" * 5000, status=CardStatus.ANSWERED))  # final: no button


# --- Feishu ----------------------------------------------------------------------------------


def check_feishu(rendered: dict[str, Any], shown: ProgressCard, limits: FeishuLimits) -> None:
    assert len(json.dumps(rendered, ensure_ascii=False).encode()) <= limits.card_bytes
    assert rendered["schema"] == "2.0" and rendered["config"] == {"update_multi": True}
    title = rendered["header"]["title"]
    assert title["tag"] == "plain_text" and 1 <= len(title["content"]) <= limits.title_chars
    assert rendered["header"]["template"] == HEADER_TEMPLATES[shown.status]
    elements = rendered["body"]["elements"]
    assert 1 <= len(elements) <= limits.max_elements
    for element in (e for e in elements if e["tag"] == "markdown"):
        assert 1 <= len(element["content"]) <= limits.markdown_chars
        assert "<" not in element["content"], "only escaped text: no <at> tag can form"
    buttons = [e for e in elements if e["tag"] == "button"]
    assert len(buttons) == (0 if shown.is_final and not shown.can_mark_wrong else 1)
    for button in buttons:
        label = "Stop" if not shown.is_final else "Mark answer wrong"
        assert label in button["text"]["content"]
        [behavior] = button["behaviors"]
        assert behavior["type"] == "callback"
        assert behavior["value"] == {
            "action": "stop" if not shown.is_final else "wrong",
            "turn": shown.turn_id,
            "thread": shown.thread,
        }


@FAST
@given(cards_strategy)
def test_feishu_card_stays_within_limits(shown: ProgressCard) -> None:
    check_feishu(render_feishu(shown), shown, FEISHU)


@pytest.mark.parametrize("status", list(CardStatus))
def test_feishu_worst_case_card_fits_the_byte_budget(status: CardStatus) -> None:
    emoji = "😀"  # 4 bytes of UTF-8: the most a kept character costs
    worst = ProgressCard(
        title=emoji * 1000,
        turn_id="t" * 450,
        thread="h" * 450,
        status=status,
        steps=(CardStep(tool=emoji * 200, args=emoji * 2000, duration_s=1.0),) * 500,
        interventions=(steer(emoji * 200, emoji * 2000), stop(emoji * 200)) * 20,
        elapsed_s=1e12,
        pending_calls=10**9,
        answer=emoji * 20_000,
        error=emoji * 5000,
    )
    check_feishu(render_feishu(worst), worst, FEISHU)


def test_feishu_neutralizes_at_tags() -> None:
    shown = card(status=CardStatus.ANSWERED, answer="ping <at id=all></at> and @all")
    *_, answer = (e["content"] for e in render_feishu(shown)["body"]["elements"] if "content" in e)
    assert answer == f"ping &#60;{J}at id=all&#62;&#60;/at&#62; and @{J}all"
    assert escape_markdown("<at user_id='ou_1'>") == f"&#60;{J}at user_id='ou_1'&#62;"


def test_feishu_header_colour_is_defined_for_every_status() -> None:
    assert set(HEADER_TEMPLATES) == set(CardStatus)


def test_feishu_refuses_ids_it_would_have_to_cut() -> None:
    with pytest.raises(LimitExceeded):
        render_feishu(card(turn_id="t" * FEISHU.button_value_bytes))


def test_feishu_limits_check_their_byte_plan() -> None:
    with pytest.raises(ValueError, match="card_bytes"):
        FeishuLimits(answer_bytes=FEISHU.card_bytes)


# --- Both: what people read --------------------------------------------------------------------


def status_lines(shown: ProgressCard) -> tuple[str, str]:
    return (
        render_slack(shown)[1]["text"]["text"],
        render_feishu(shown)["body"]["elements"][0]["content"],
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"status": CardStatus.WORKING, "elapsed_s": 42.9}, "Investigating…"),
        ({"status": CardStatus.QUEUED}, "Queued"),
        (
            {"status": CardStatus.STOPPING, "pending_calls": 2, "interventions": (stop("alice"),)},
            "Stopping — by alice, waiting for 2 in-flight calls…",
        ),
        ({"status": CardStatus.STOPPING, "pending_calls": 1}, "Stopping — waiting for 1 in-flight"),
        ({"status": CardStatus.ANSWERED}, "Answered"),
        (
            {"status": CardStatus.ANSWERED, "interventions": (steer("alice", "the gateway"),)},
            "Answered (redirected by alice)",
        ),
        ({"status": CardStatus.STOPPED, "interventions": (stop("bob"),)}, "Stopped by bob"),
        ({"status": CardStatus.FAILED, "error": "model timed out"}, "Failed: model timed out"),
        ({"status": CardStatus.INTERRUPTED}, "mention me to start again"),
        ({"status": CardStatus.CANCELLED}, "Cancelled before it started"),
    ],
)
def test_status_line_says_how_things_stand(fields: dict[str, Any], expected: str) -> None:
    for line in status_lines(card(**fields)):
        assert expected in line


@pytest.mark.parametrize(
    ("elapsed_s", "shown"),
    [(42.9, "42s"), (185, "3m 05s"), (3725, "1h 02m 05s"), (float("nan"), "0s"), (-3, "0s")],
)
def test_elapsed_time_is_shown(elapsed_s: float, shown: str) -> None:
    for line in status_lines(card(elapsed_s=elapsed_s)):
        assert line.endswith(f"·  {shown}")


def test_steps_show_the_newest_under_a_count_of_the_earlier_ones() -> None:
    steps = tuple(
        CardStep(tool="http_get", args=f"url=https://s.example/{i}", state=StepState.DONE)
        for i in range(32)
    )
    running = CardStep(tool="http_get", args="url=https://s.example/last", duration_s=None)
    shown = card(
        steps=(
            *steps,
            CardStep(tool="x", args="y", state=StepState.FAILED, duration_s=0.42),
            running,
        )
    )
    slack = render_slack(shown)[2]["text"]["text"].splitlines()
    feishu = render_feishu(shown)["body"]["elements"][1]["content"].splitlines()
    # Each step keeps its number on the card (the one the answer cites), in bold.
    for lines, (bold, end) in ((slack, ("*", "*")), (feishu, ("**", "**"))):
        assert lines[0] == "… 14 earlier steps"
        assert len(lines) == 1 + SLACK.step_lines
        assert lines[1].startswith(f"{bold}15.{end} ✅ `http_get`")
        assert lines[-2] == f"{bold}33.{end} ❌ `x` y · failed, 0.4s"
        assert lines[-1] == f"{bold}34.{end} ⏳ `http_get` url=https://s.example/last · running"


def test_steps_fit_small_limits_too() -> None:
    limits = SlackLimits(section_text=200, step_lines=50)
    steps = (CardStep(tool="http_get", args="a" * 60),) * 12
    text = render_slack(card(steps=steps), limits)[2]["text"]["text"]
    assert len(text) <= 200 and text.startswith("… 10 earlier steps\n")


def test_interventions_are_listed() -> None:
    shown = card(interventions=(steer("alice", "it's the gateway, not the db"), stop("bob")))
    slack = render_slack(shown)[2]["elements"][0]["text"]
    feishu = render_feishu(shown)["body"]["elements"][1]["content"]
    for text in (slack, feishu):
        assert text == "↪ alice: it's the gateway, not the db\n■ stopped by bob"


# --- Truncation ------------------------------------------------------------------------------


def test_truncate_marks_a_cut() -> None:
    assert truncate("abcdef", 4) == "abc…"
    assert truncate("abcd", 4) == "abcd"
    assert truncate("abcd", 0) == ""
    assert truncate("a < b", 6, escape=escape_mrkdwn) == "a …"  # `&lt;` is never split
    assert truncate("ab👩‍👩‍👧cd", 6) == "ab…"  # nor is a family emoji


@FAST
@given(st.text() | nasty_texts, st.integers(0, 60))
def test_truncate_never_exceeds_and_keeps_a_prefix(text: str, limit: int) -> None:
    for escape in (lambda s: s, escape_mrkdwn):
        cut = truncate(text, limit, escape=escape)
        assert len(cut) <= limit
        if len(escape(text)) <= limit:
            assert cut == escape(text)
        elif cut:
            assert cut.endswith("…") and escape(text).startswith(cut[:-1])


def test_public_surface_is_pinned() -> None:
    expected = """CardApproval CardChild CardStatus CardStep ELLIPSIS FEISHU FeishuLimits
        Intervention InterventionKind LimitExceeded Notice ProgressCard SLACK SlackLimits StepState
        render_console render_console_notice render_feishu render_feishu_notice render_slack
        render_slack_notice safe_url slack_text truncate"""
    assert sorted(cards.__all__) == sorted(expected.split())


def test_a_redirect_waiting_for_its_cut_says_what_it_waits_for() -> None:
    running = CardStep(tool="http_get", args="url=https://s.example/logs")
    done = CardStep(tool="http_get", args="url=https://s.example/health", state=StepState.DONE)
    card = ProgressCard(title="t", turn_id="t1", steps=(done, running), redirect_pending=True)
    assert "Redirected — finishing 1 in-flight call first" in slack_text(card)
    assert "Redirected — taking it at the next step" in slack_text(
        ProgressCard(title="t", turn_id="t1", steps=(done,), redirect_pending=True)
    )
    answered = card.ended(CardStatus.ANSWERED, answer="ok")
    assert "Redirected —" not in slack_text(answered)
