"""Slack's form-encoded interactivity bodies: the fast decoding agrees with `parse_qs` on each.

Why this way: `parse_slack` decodes a body that is `payload=<value>` and nothing else (every body
Slack sends) without `parse_qs`, and takes `parse_qs` for any other. Appending `&other=1` to a body
leaves its payload as it was and sends it down the `parse_qs` path, so the two paths are compared
on the same payload through the adapter's public function: the same event, or a 400
(`MalformedRequest`) for both. Bodies are well-formed presses whose texts hypothesis draws from
all of Unicode, and raw bodies made of what the escape decoding could trip on (`%`, hex digits,
backslashes, `x`, `u`, `N`, `+`, quotes, non-ASCII bytes).
"""

from __future__ import annotations

import json
from urllib.parse import quote_plus

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.adapters.slack.inbound import SlackIdentity, SlackInbound, parse_slack
from bot.errors import MalformedRequest
from tests.fakes import signing as sg

FORM = "application/x-www-form-urlencoded"
HOSTILE = "%0aF9g\\xuN+{}\"'é&="
"""What the escape decoding could trip on."""
IDENTITY = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)


def parsed(body: bytes) -> SlackInbound | str:
    """What the adapter makes of a body: the parse, or the refusal's class."""
    try:
        return parse_slack(body, FORM, IDENTITY)
    except MalformedRequest as exc:
        return type(exc).__name__


def agrees(body: bytes) -> None:
    fast, reference = parsed(body), parsed(body + b"&other=1")
    assert fast == reference, (body, fast, reference)


def press_body(value: str, username: str) -> bytes:
    press = sg.slack_block_actions(
        action_id="stop", value=value, message_ts="1700000000.000100", username=username
    )
    return b"payload=" + quote_plus(json.dumps(press, ensure_ascii=False)).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.text(max_size=40), username=st.text(max_size=20))
def test_a_well_formed_press_decodes_as_parse_qs_decodes_it(value: str, username: str) -> None:
    body = press_body(value or "turn-1", username or "alice")
    agrees(body)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=60) | st.text(alphabet=HOSTILE, max_size=60).map(str.encode))
def test_a_hostile_body_gets_what_parse_qs_gives_it(tail: bytes) -> None:
    agrees(b"payload=" + tail)


def test_a_press_is_read_from_the_payload() -> None:
    """The fast path decodes a real press: `+` a space, `%2B` a plus, `%5C` a backslash."""
    inbound = parsed(press_body("turn-1", "a+b \\c"))
    assert isinstance(inbound, SlackInbound) and inbound.event is not None
    assert inbound.event.author_name == "a+b \\c"


def test_a_dangling_escape_is_decoded_by_parse_qs_rules() -> None:
    """`%` without two hex digits is left as it is, as `parse_qs` leaves it: here, bad JSON."""
    assert parsed(b"payload=%7B%") == "MalformedRequest"
    assert parsed(b"payload=%7B%") == parsed(b"payload=%7B%&other=1")
