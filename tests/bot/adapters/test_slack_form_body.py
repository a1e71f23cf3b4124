"""Slack's form-encoded interactivity bodies: `form_value` decodes every body as `parse_qs` does.

Why this way: `form_value` replaces `parse_qs` on the press path (it decodes in C, in linear
time), so it is compared with `parse_qs` itself on the same bodies: the same value, or the same
refusal (`ValueError`, `KeyError`). A body with a `%` that starts no escape may be refused where
`parse_qs` keeps the `%`, never given another value. Bodies are well-formed presses whose texts
hypothesis draws from all of Unicode, and raw bodies made of what the decoding could trip on
(`%`, hex digits, backslashes, `x`, `u`, `N`, `+`, `&`, `=`, quotes, non-ASCII and non-UTF-8
bytes). A press is then read through the adapter's public `parse_slack`, and a hostile 1 MB
body of bare `%` is refused with a 400 (`MalformedRequest`).
"""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs, quote_plus

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.adapters.slack.form_body import MAX_FIELDS, form_value
from bot.adapters.slack.inbound import SlackIdentity, SlackInbound, parse_slack
from bot.errors import MalformedRequest
from tests.fakes import signing as sg

FORM = "application/x-www-form-urlencoded"
HOSTILE = "%0aF9g\\xuN+{}\"'é&=payload"
"""What the escape decoding and the field splitting could trip on."""
BARE_PERCENT = re.compile(rb"%(?![0-9A-Fa-f]{2})")
IDENTITY = SlackIdentity(sg.SLACK_BOT_USER_ID, sg.SLACK_BOT_ID, sg.SLACK_TEAM_ID)


def outcome(decode: object, body: bytes) -> str:
    """The value `decode` gives for the payload field, or the class of its refusal."""
    try:
        return repr(decode(body))  # type: ignore[operator]
    except (ValueError, KeyError) as exc:
        return "ValueError" if isinstance(exc, ValueError) else "KeyError"


def by_parse_qs(body: bytes) -> str:
    return parse_qs(body.decode(), strict_parsing=True)["payload"][0]


def agrees(body: bytes) -> None:
    """The same value or refusal; a `%` that starts no escape may only turn a value into one."""
    fast = outcome(lambda b: form_value(b, "payload"), body)
    reference = outcome(by_parse_qs, body)
    if BARE_PERCENT.search(body):
        assert fast in (reference, "ValueError"), body
    else:
        assert fast == reference, body


def press_body(value: str, username: str) -> bytes:
    press = sg.slack_block_actions(
        action_id="stop", value=value, message_ts="1700000000.000100", username=username
    )
    return b"payload=" + quote_plus(json.dumps(press, ensure_ascii=False)).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=st.text(max_size=40), username=st.text(max_size=20))
def test_a_well_formed_press_decodes_as_parse_qs_decodes_it(value: str, username: str) -> None:
    agrees(press_body(value or "turn-1", username or "alice"))


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=60) | st.text(alphabet=HOSTILE, max_size=60).map(str.encode))
def test_a_hostile_body_gets_what_parse_qs_gives_it(tail: bytes) -> None:
    agrees(b"payload=" + tail)
    agrees(tail)


def test_a_press_is_read_from_the_payload() -> None:
    """Through the adapter: `+` a space, `%2B` a plus, `%5C` a backslash."""
    inbound = parse_slack(press_body("turn-1", "a+b \\c"), FORM, IDENTITY)
    assert isinstance(inbound, SlackInbound) and inbound.event is not None
    assert inbound.event.author_name == "a+b \\c"


def test_fields_blank_values_and_dangling_escapes_follow_parse_qs() -> None:
    for body in (
        b"payload=%7B%",
        b"payload=&payload=%7B%7D",
        b"pay%6Coad=%7B%7D",
        b"other=1&payload=%7B%7D",
        b"payload=%7B%7D&",
        b"",
        b"payload",
        b"payload=%ED%A0%80",
    ):
        agrees(body)


def test_a_megabyte_of_bare_percent_signs_is_a_400() -> None:
    """The body `parse_qs` took half a second over: a plain malformed request, at its first `%`."""
    try:
        parse_slack(b"payload=" + b"%" * 999_000, FORM, IDENTITY)
    except MalformedRequest:
        return
    raise AssertionError("a payload of bare % signs was accepted")


def test_more_fields_than_the_limit_is_a_400() -> None:
    body = b"payload=%7B%7D" + b"&a=1" * MAX_FIELDS
    assert outcome(lambda b: form_value(b, "payload"), body) == "ValueError"
    assert outcome(lambda b: form_value(b, "payload"), body[: -len(b"&a=1")]) == "'{}'"
