"""The "Mark answer wrong" control: only on answered final cards, gone once someone marked it.

Pure renderer tests on hand-built cards in every status: the control (Slack button `wrong`,
Feishu callback `{"action": "wrong", "turn", "thread"}`, the console's `/wrong` hint) carries the
card's turn id, the id the analysis was booked under; a marked card names who marked it, with
the name escaped like any outside text.
"""

from __future__ import annotations

from typing import Any

import pytest

from cards import CardStatus, ProgressCard, render_console, render_feishu, render_slack
from cards._console import WRONG_HINT
from cards._mentions import JOINER

ANSWERED = ProgressCard(
    title="HighLatency",
    turn_id="turn-slack-Ev1",
    thread="t1",
    status=CardStatus.ANSWERED,
    answer="The database pool was exhausted.",
)


def _slack_wrong(card: ProgressCard) -> list[dict[str, Any]]:
    return [
        button
        for block in render_slack(card)
        if block["type"] == "actions"
        for button in block["elements"]
        if button.get("action_id") == "wrong"
    ]


def _feishu_wrong(card: ProgressCard) -> list[dict[str, Any]]:
    return [
        behavior["value"]
        for element in render_feishu(card)["body"]["elements"]
        if element["tag"] == "button"
        for behavior in element["behaviors"]
        if behavior["type"] == "callback" and behavior["value"]["action"] == "wrong"
    ]


def test_an_answered_card_offers_the_control_with_its_turn() -> None:
    [button] = _slack_wrong(ANSWERED)
    assert button["value"] == "turn-slack-Ev1" and button["text"]["text"] == "Mark answer wrong"
    assert _feishu_wrong(ANSWERED) == [
        {"action": "wrong", "turn": "turn-slack-Ev1", "thread": "t1"}
    ]
    assert render_console(ANSWERED).split("\n")[-1] == WRONG_HINT


@pytest.mark.parametrize("status", [s for s in CardStatus if s is not CardStatus.ANSWERED])
def test_no_other_card_offers_it(status: CardStatus) -> None:
    card = ANSWERED.evolve(status=status)
    assert _slack_wrong(card) == [] and _feishu_wrong(card) == []
    assert WRONG_HINT not in render_console(card)


def test_an_answered_card_without_an_answer_offers_nothing() -> None:
    card = ANSWERED.evolve(answer="  ")
    assert _slack_wrong(card) == [] and _feishu_wrong(card) == []
    assert WRONG_HINT not in render_console(card)


def test_a_marked_card_names_who_and_drops_the_control() -> None:
    card = ANSWERED.evolve(marked_wrong_by="<!channel> @here bob")
    assert _slack_wrong(card) == [] and _feishu_wrong(card) == []
    slack = [b["elements"][0]["text"] for b in render_slack(card) if b["type"] == "context"]
    assert f"⚠️ Answer marked wrong by &lt;{JOINER}!channel&gt; @{JOINER}here bob" in slack
    feishu = [e.get("content", "") for e in render_feishu(card)["body"]["elements"]]
    assert f"⚠️ Answer marked wrong by &#60;{JOINER}!channel&#62; @{JOINER}here bob" in feishu
    console = render_console(card, width=200)
    assert WRONG_HINT not in console
    assert f"⚠️ Answer marked wrong by <{JOINER}!channel> @{JOINER}here bob" in console
