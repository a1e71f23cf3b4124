"""Notices (an alert's root message, what follows in its thread) on every platform, hostile input.

Why this way: a notice carries an alert sender's texts (titles, labels, annotations, URLs) to a
channel, so the promises are about the bytes sent. Each renderer gets adversarial text in every
place text reaches it, and the output is scanned for every token that pings or links (the same
scan as the cards' hygiene test) once our own links are taken out; URLs are checked one by one
against what `safe_url` must refuse or encode; and a Hypothesis property renders arbitrary
notices and checks every platform limit the platforms enforce (Slack's block and field sizes,
Feishu's card bytes), since a cut or a fold must neither overflow nor reassemble a token.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cards import (
    FEISHU,
    SLACK,
    Notice,
    render_console_notice,
    render_feishu_notice,
    render_slack_notice,
    safe_url,
)
from tests.cards.test_card_hygiene import ATTACKS, FORBIDDEN

GOOD = "https://grafana.example/d/abc?orgId=1&var-env=prod"


def hostile(text: str, links: tuple[tuple[str, str], ...] = ()) -> Notice:
    return Notice(
        title=text,
        severity=text,
        lines=(text, f"summary: {text}"),
        fields=((text, text), ("service", text)),
        links=links,
    )


def slack_json(notice: Notice) -> str:
    text, blocks = render_slack_notice(notice)
    return json.dumps([text, blocks], ensure_ascii=False)


def feishu_card(notice: Notice) -> dict[str, Any]:
    msg_type, content = render_feishu_notice(notice)
    assert msg_type == "interactive"
    card: dict[str, Any] = json.loads(content)
    return card


def buttons(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in card["body"]["elements"] if e["tag"] == "button"]


@pytest.mark.parametrize("attack", ATTACKS)
def test_no_text_of_a_notice_can_ping_or_disguise_a_link(attack: str) -> None:
    notice = hostile(f"CPU high {attack} on {attack}")
    assert not FORBIDDEN.search(slack_json(notice))
    _, content = render_feishu_notice(notice)
    assert not FORBIDDEN.search(content)
    assert not FORBIDDEN.search(render_console_notice(notice))


@pytest.mark.parametrize("attack", ATTACKS)
def test_a_link_label_cannot_ping_and_only_our_links_are_links(attack: str) -> None:
    notice = hostile("x", links=((attack, GOOD), ("Runbook", "https://wiki.example/r")))
    _, blocks = render_slack_notice(notice)
    (links,) = [b for b in blocks if "<http" in b.get("text", {}).get("text", "")]
    ours = re.compile(r"<https://(?:grafana|wiki)\.example/[^|>]*\|")
    assert len(ours.findall(links["text"]["text"])) == 2
    assert not FORBIDDEN.search(ours.sub("", slack_json(notice)))
    card = feishu_card(notice)
    assert [b["behaviors"][0]["default_url"] for b in buttons(card)] == [
        GOOD,
        "https://wiki.example/r",
    ]
    assert not FORBIDDEN.search(json.dumps(card, ensure_ascii=False))


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "JAVASCRIPT://x.example/%0aalert(1)",
        "data:text/html,<script>",
        "ftp://files.example/a",
        "mailto:a@example.com",
        "//evil.example/x",
        "https:evil.example",
        "https://good.example@evil.example/",
        "https://user:pw@evil.example/",
        "https://evil.example/a b",
        "https://evil.example/\nx",
        "https://evil.example/\x1b[31m",
        "https://evil.example/\u202egnp.exe",
        "https://evil.example/\u200b",
        "https://évil.example/",
        "https://[::1/",
        "https://evil.example/" + "a" * 2000,
        "",
    ],
)
def test_a_url_that_is_not_a_plain_web_link_is_not_shown(url: str) -> None:
    assert safe_url(url) == ""
    notice = Notice(title="t", links=(("Source", url),))
    _, blocks = render_slack_notice(notice)
    assert "<h" not in json.dumps(blocks) and "1 link not shown" in json.dumps(blocks)
    assert buttons(feishu_card(notice)) == []
    assert "1 link not shown" in render_console_notice(notice)


def test_characters_that_could_end_a_links_markup_are_percent_encoded() -> None:
    url = 'https://x.example/p?q=<b>|c"d\\e&f=ü#frag'
    shown = safe_url(url)
    assert shown == "https://x.example/p?q=%3Cb%3E%7Cc%22d%5Ce&f=%C3%BC#frag"
    assert safe_url(shown) == shown  # already safe: unchanged
    assert safe_url("HTTP://X.example:8080/a%20b") == "HTTP://X.example:8080/a%20b"
    _, blocks = render_slack_notice(Notice(title="t", links=(("Dash > board", url),)))
    (section,) = [b for b in blocks if b["type"] == "section"]
    assert section["text"]["text"] == (
        "<https://x.example/p?q=%3Cb%3E%7Cc%22d%5Ce&amp;f=%C3%BC#frag|Dash &gt; board>"
    )


def test_a_notice_shows_its_title_severity_lines_fields_and_links() -> None:
    notice = Notice(
        title="Firing: CheckoutLatencyHigh",
        severity="critical",
        lines=("p99 latency above 2s for 5m", "3 alerts firing"),
        fields=(("service", "checkout"), ("env", "prod & eu")),
        links=(("Source", GOOD), ("Silence", "http://am.example/#/silences/new")),
    )
    text, blocks = render_slack_notice(notice)
    assert text == "[critical] Firing: CheckoutLatencyHigh"
    assert [b["type"] for b in blocks] == ["header", "context", "section", "section", "section"]
    assert blocks[0]["text"] == {
        "type": "plain_text",
        "text": "Firing: CheckoutLatencyHigh",
        "emoji": True,
    }
    assert blocks[2]["text"]["text"] == "p99 latency above 2s for 5m\n3 alerts firing"
    assert [f["text"] for f in blocks[3]["fields"]] == [
        "*service*\ncheckout",
        "*env*\nprod &amp; eu",
    ]
    assert blocks[4]["text"]["text"] == (
        "<https://grafana.example/d/abc?orgId=1&amp;var-env=prod|Source> · "
        "<http://am.example/#/silences/new|Silence>"
    )
    assert all(b["text"]["verbatim"] for b in blocks if b["type"] == "section" and "text" in b)

    card = feishu_card(notice)
    assert card["schema"] == "2.0" and card["header"]["template"] == "red"
    assert card["header"]["title"]["content"] == "Firing: CheckoutLatencyHigh"
    markdown = [e["content"] for e in card["body"]["elements"] if e["tag"] == "markdown"]
    assert markdown == [
        "**Severity:** critical\np99 latency above 2s for 5m\n3 alerts firing",
        "**service:** checkout\n**env:** prod & eu",
    ]
    assert [(b["text"]["content"], b["behaviors"]) for b in buttons(card)] == [
        ("Source", [{"type": "open_url", "default_url": GOOD}]),
        ("Silence", [{"type": "open_url", "default_url": "http://am.example/#/silences/new"}]),
    ]

    shown = render_console_notice(notice)
    assert shown.splitlines() == [
        "== Firing: CheckoutLatencyHigh ".ljust(80, "="),
        "Severity: critical",
        "p99 latency above 2s for 5m",
        "3 alerts firing",
        "  service: checkout",
        "  env: prod & eu",
        f"  Source: {GOOD}",
        "  Silence: http://am.example/#/silences/new",
    ]


def test_the_header_colour_follows_the_severity() -> None:
    severities = ("critical", "warning", "Info")
    colour = {
        s: feishu_card(Notice(title="t", severity=s))["header"]["template"] for s in severities
    }
    assert colour == {"critical": "red", "warning": "orange", "Info": "blue"}
    assert feishu_card(Notice(title="t"))["header"]["template"] == "blue"
    _, blocks = render_slack_notice(Notice(title=""))
    assert blocks == [
        {"type": "header", "text": {"type": "plain_text", "text": "Notice", "emoji": True}}
    ]


def test_markup_is_escaped_for_each_platform() -> None:
    notice = Notice(title="a <b> & c", lines=("x <font color=red>y</font> & z",))
    _, blocks = render_slack_notice(notice)
    assert blocks[1]["text"]["text"] == "x &lt;font color=red&gt;y&lt;/font&gt; &amp; z"
    card = feishu_card(notice)
    assert (
        card["body"]["elements"][0]["content"] == "x &#60;font color=red&#62;y&#60;/font&#62; & z"
    )
    assert card["header"]["title"]["content"] == "a <b> & c"  # plain_text: never parsed


def test_control_characters_never_reach_a_terminal() -> None:
    notice = hostile("red \x1b[31mALERT\x1b[0m\x07 bell\r\x00", links=(("L\x1b]8;;", GOOD),))
    shown = render_console_notice(notice)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", shown)
    assert "ALERT" in shown and GOOD in shown


def test_many_long_links_fit_the_platforms_and_the_rest_are_counted() -> None:
    long = "https://grafana.example/explore?left=" + "x" * 1900
    notice = Notice(title="t", links=tuple((f"link {n}", long) for n in range(15)))
    _, content = render_feishu_notice(notice)
    assert len(content.encode()) <= FEISHU.card_bytes
    card = json.loads(content)
    assert len(buttons(card)) == 10
    assert card["body"]["elements"][-1]["content"] == "*5 links not shown*"
    _, blocks = render_slack_notice(notice)
    (section,) = [b for b in blocks if b["type"] == "section"]
    assert section["text"]["text"].count("<https://") == 1  # one fits Slack's 3000 characters
    assert section["text"]["text"].endswith("_(14 links not shown)_")
    shown = render_console_notice(notice)
    assert shown.count(long) == 10 and "(5 links not shown)" in shown


def test_many_lines_and_fields_are_bounded_and_counted() -> None:
    notice = Notice(
        title="t" * 500,
        lines=tuple(f"line {n} " + "y" * 600 for n in range(40)),
        fields=tuple((f"k{n}", "v" * 900) for n in range(30)),
    )
    _, blocks = render_slack_notice(notice)
    assert len(blocks[0]["text"]["text"]) == SLACK.header_text
    lines = blocks[1]["text"]["text"]
    assert len(lines) <= SLACK.section_text and lines.endswith("more lines_")
    assert len(blocks[2]["fields"]) == 10
    assert all(len(f["text"]) <= 2000 for f in blocks[2]["fields"])
    card = feishu_card(notice)
    assert len(card["header"]["title"]["content"]) == FEISHU.title_chars
    assert card["body"]["elements"][0]["content"].endswith("more lines*")


WORDS = st.sampled_from([*ATTACKS, "&", "<", ">", "|", "*", "_", "\n", "\x1b[2J", "é", "🔥", "所"])
TEXTS = st.lists(st.text(max_size=80) | WORDS, max_size=40).map("".join)
URLS = st.sampled_from([GOOD, "https://x.example/" + "p" * 1500, "javascript:x"]) | st.text(
    max_size=60
).map(lambda t: "https://h.example/" + t)


@settings(max_examples=150, deadline=None)
@given(
    title=TEXTS,
    severity=TEXTS,
    lines=st.lists(TEXTS, max_size=25),
    fields=st.lists(st.tuples(TEXTS, TEXTS), max_size=12),
    links=st.lists(st.tuples(TEXTS, URLS), max_size=12),
)
def test_any_notice_stays_within_every_platform_limit(
    title: str,
    severity: str,
    lines: list[str],
    fields: list[tuple[str, str]],
    links: list[tuple[str, str]],
) -> None:
    notice = Notice(
        title=title,
        severity=severity,
        lines=tuple(lines),
        fields=tuple(fields),
        links=tuple(links),
    )
    text, blocks = render_slack_notice(notice)
    assert 0 < len(text) <= SLACK.fallback_text and len(blocks) <= SLACK.max_blocks
    for block in blocks:
        if block["type"] == "header":
            assert 0 < len(block["text"]["text"]) <= SLACK.header_text
        elif block["type"] == "context":
            assert all(len(e["text"]) <= SLACK.context_text for e in block["elements"])
        elif "fields" in block:
            assert 0 < len(block["fields"]) <= 10
            assert all(len(f["text"]) <= 2000 for f in block["fields"])
        else:
            assert 0 < len(block["text"]["text"]) <= SLACK.section_text
    no_links = Notice(title=title, severity=severity, lines=tuple(lines), fields=tuple(fields))
    assert not FORBIDDEN.search(slack_json(no_links))

    _, content = render_feishu_notice(notice)
    assert len(content.encode()) <= FEISHU.card_bytes
    card = json.loads(content)
    assert 0 < len(card["header"]["title"]["content"]) <= FEISHU.title_chars
    for element in card["body"]["elements"]:
        if element["tag"] == "markdown":
            assert len(element["content"]) <= FEISHU.markdown_chars
        else:
            assert safe_url(element["behaviors"][0]["default_url"])
    assert not FORBIDDEN.search(render_feishu_notice(no_links)[1])

    shown = render_console_notice(notice)
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", shown)
    assert all(len(line) <= 80 for line in shown.splitlines() if "https://" not in line)
