"""The origin line: an alert-started card says which alert started it, near its top.

Pure renderer tests on hand-built cards (no Redis, no platform): the line is shown when set and
absent when not, the root message's link is shown only when it is an http(s) URL, and the
alert's text, which comes from outside, is escaped and defused like every other outside text.
"""

from __future__ import annotations

import json

from cards import CardStatus, ProgressCard, render_console, render_feishu, render_slack
from cards._feishu import ORIGIN_BYTES, json_bytes
from cards._mentions import JOINER
from cards._model import ORIGIN_CHARS

ORIGIN = "Started by alert HighLatency (critical) from alertmanager"
LINK = "https://chat.example.com/archives/C1/p1700000000000100?a=1&b=(2)"


def _card(**changes: object) -> ProgressCard:
    base = ProgressCard(title="HighLatency", turn_id="turn-1", thread="t1")
    return base.evolve(**changes)


def _slack_contexts(card: ProgressCard) -> list[str]:
    return [
        block["elements"][0]["text"] for block in render_slack(card) if block["type"] == "context"
    ]


def _feishu_markdown(card: ProgressCard) -> list[str]:
    return [
        el["content"] for el in render_feishu(card)["body"]["elements"] if el["tag"] == "markdown"
    ]


def test_slack_shows_the_origin_under_the_status_with_its_root_link() -> None:
    blocks = render_slack(_card(origin=ORIGIN, origin_link=LINK))
    assert blocks[2]["type"] == "context"
    text = blocks[2]["elements"][0]["text"]
    assert text.startswith(f"🔔 {ORIGIN}")
    assert text.endswith(
        " · <https://chat.example.com/archives/C1/p1700000000000100?a=1&amp;b=(2)|root message>"
    )


def test_feishu_shows_the_origin_as_a_markdown_line_with_a_link() -> None:
    elements = render_feishu(_card(origin=ORIGIN, origin_link=LINK))["body"]["elements"]
    line = elements[1]["content"]
    assert line.startswith(f"🔔 {ORIGIN}")
    assert line.endswith(
        " · [root message](https://chat.example.com/archives/C1/p1700000000000100?a=1&b=%282%29)"
    )


def test_console_shows_the_origin_as_a_plain_line() -> None:
    text = render_console(_card(origin=ORIGIN, origin_link=LINK), width=400)
    lines = text.split("\n")
    assert lines[2] == f"🔔 {ORIGIN} · root message: {LINK}"


def test_no_origin_no_line() -> None:
    card = _card(origin_link=LINK)
    assert not any("🔔" in text for text in _slack_contexts(card))
    assert not any("🔔" in text for text in _feishu_markdown(card))
    assert "🔔" not in render_console(card)
    assert "root message" not in json.dumps(render_slack(card) + [render_feishu(card)])


def test_only_an_http_link_is_shown() -> None:
    for bad in (
        "javascript:alert(1)",
        "ftp://x.example.com/a",
        "https://x.example.com/a b",
        "https://x.example.com/<b>|c",
        "https://x.example.com/" + "a" * 600,
    ):
        card = _card(origin=ORIGIN, origin_link=bad)
        assert "root message" not in json.dumps(render_slack(card)), bad
        assert "root message" not in json.dumps(render_feishu(card)), bad
        assert "root message" not in render_console(card), bad
        assert ORIGIN in _slack_contexts(card)[0]


def test_outside_text_is_escaped_and_defused() -> None:
    hostile = (
        "Started by alert <!channel> @here [x](https://evil.example) <at id=all></at> from a&b"
    )
    card = _card(origin=hostile)
    slack = _slack_contexts(card)[0]
    assert "<!channel>" not in slack and "&lt;" in slack and "a&amp;b" in slack
    assert f"@{JOINER}here" in slack and f"]{JOINER}(" in slack
    feishu = _feishu_markdown(card)[1]
    assert "<at" not in feishu and "&#60;" in feishu and f"]{JOINER}(" in feishu
    console = render_console(card, width=400)
    assert f"@{JOINER}here" in console and "\x1b" not in console


def test_a_long_origin_is_cut_within_its_bounds() -> None:
    card = _card(
        origin="Started by alert " + "好" * 5_000,
        origin_link=LINK,
        status=CardStatus.ANSWERED,
        answer="x",
    )
    slack = _slack_contexts(card)[0]
    assert "…" in slack and len(slack) <= ORIGIN_CHARS + 200
    feishu = _feishu_markdown(card)[1]
    assert "…" in feishu and json_bytes(feishu) <= ORIGIN_BYTES
    assert feishu.endswith(
        "root message](https://chat.example.com/archives/C1/p1700000000000100?a=1&b=%282%29)"
    )


def test_old_records_without_the_fields_still_load() -> None:
    card = _card(origin=ORIGIN, origin_link=LINK)
    assert ProgressCard.from_json(card.to_json()) == card
    data = json.loads(card.to_json())
    for field in ("origin", "origin_link", "marked_wrong_by"):
        del data[field]
    old = ProgressCard.from_json(json.dumps(data))
    assert old.origin == "" and old.origin_link == "" and old.marked_wrong_by == ""
