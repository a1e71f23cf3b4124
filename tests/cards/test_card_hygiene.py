"""No card can ping anyone or disguise a link (A6), whatever the model or people wrote.

Why this way: the promise is about the bytes sent, so each test renders a card with adversarial
text in every place text reaches it (the task, the answer, tool names and arguments, who stopped
or steered and what they said, the failure) through `render_slack`/`slack_text`,
`render_feishu` and `render_console`, and scans the JSON (or text) for every token that notifies
or links on Slack or Feishu. A table pins the known attacks; a Hypothesis property mixes them
with arbitrary text, since a cut (`truncate`) or a fold (`one_line`) must not reassemble one.
"""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cards
from cards import CardStatus, ProgressCard

ATTACKS = [
    "<!channel>",
    "<!here>",
    "<!everyone>",
    "<!subteam^S0123ABCD|@oncall>",
    "<@U0123ABCD>",
    "<#C0123ABCD>",
    "<https://evil.example|https://good.example>",
    "<mailto:a@evil.example|support>",
    '<at user_id="all"></at>',
    "<at id=all></at>",
    '<AT USER_ID="ou_123">x</AT>',
    "@_all",
    "@channel",
    "@here",
    "@all",
    "@everyone",
    "@所有人",
    "@Channel please",
    "[https://good.example](https://evil.example)",
]

FORBIDDEN = re.compile(
    r"<\s*[!@#]|<\s*at\b|<\s*(?:https?|mailto):|@(?:channel|here|all|everyone|_all|所有人)|\]\(",
    re.IGNORECASE,
)
"""Every token that pings, mentions or links on Slack or Feishu, in its raw form."""


def adversarial_card(text: str, status: CardStatus) -> ProgressCard:
    """A card with `text` in every field people or the model can fill."""
    return ProgressCard(
        title=text,
        turn_id="turn-1",
        thread="thread-1",
        status=status,
        steps=(
            cards.CardStep(tool=text, args=f"url={text}", state=cards.StepState.DONE),
            cards.CardStep(tool="http_get", args=text),
        ),
        interventions=(
            cards.Intervention(kind=cards.InterventionKind.STEER, by=text, text=text),
            cards.Intervention(kind=cards.InterventionKind.STOP, by=text),
        ),
        answer=f"Summary: {text}\n{text}",
        error=text,
    )


def sent(card: ProgressCard) -> dict[str, str]:
    """What each platform is sent for `card`, as text."""
    return {
        # Two separate fields of the request: joined by a newline, so a token can only be
        # found inside one of them (`]` ending the blocks and `(` opening the text is none).
        "slack": json.dumps(cards.render_slack(card), ensure_ascii=False)
        + "\n"
        + cards.slack_text(card),
        "feishu": json.dumps(cards.render_feishu(card), ensure_ascii=False),
        "console": cards.render_console(card, width=60),
    }


def forbidden_in(card: ProgressCard) -> dict[str, list[str]]:
    found = {name: FORBIDDEN.findall(text) for name, text in sent(card).items()}
    return {name: tokens for name, tokens in found.items() if tokens}


@pytest.mark.parametrize("status", [CardStatus.ANSWERED, CardStatus.FAILED, CardStatus.STOPPING])
@pytest.mark.parametrize("attack", ATTACKS)
def test_no_known_attack_survives_on_any_platform(attack: str, status: CardStatus) -> None:
    assert forbidden_in(adversarial_card(attack, status)) == {}


def test_the_text_still_reads_the_same_to_a_person() -> None:
    shown = sent(adversarial_card("@here <!channel> [a](b)", CardStatus.ANSWERED))["console"]
    assert "@\u2060here <\u2060!channel> [a]\u2060(b)" in shown  # invisible joiners only


pieces = st.one_of(st.sampled_from(ATTACKS), st.text(max_size=12))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(pieces, min_size=1, max_size=8).map("".join),
    st.sampled_from([CardStatus.ANSWERED, CardStatus.FAILED, CardStatus.WORKING]),
)
def test_no_mix_of_attacks_and_text_survives(text: str, status: CardStatus) -> None:
    assert forbidden_in(adversarial_card(text, status)) == {}


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=1, max_value=400))
def test_no_cut_reassembles_an_attack(repeat: int) -> None:
    # Long enough to be cut everywhere it is shown; every cut point is tried across examples.
    text = "x" * repeat + "@channel <!here> " * 300
    assert forbidden_in(adversarial_card(text, CardStatus.ANSWERED)) == {}


@pytest.mark.parametrize("text", ["@_all<", "< @U0123", "<\n#C0123", "<\t!here"])
def test_a_bracket_before_whitespace_and_a_mention_is_defused(text: str) -> None:
    """Found by the property test: `<` + newline + `@` (a wrapped summary line) survived."""
    assert forbidden_in(adversarial_card(text, CardStatus.ANSWERED)) == {}
