"""The replay page (issue 9): its picture, its escaping, the route that serves it, the card link.

Why this way: the page is pure markup from a list of audit events, so most tests build one
steered-then-stopped analysis by hand and read the page back with the standard library's HTML
parser (elements, classes, attributes: what a browser would build), not with string searches.
Escaping gets a Hypothesis property, since any text the model, a tool or a person wrote lands
in the page. The route is tested in process against a real Redis, and once for real: the
`chatops serve` process serves the page and headless Chromium (Debian's `chromium`, installed by
`make test`) takes a screenshot, whose pixels must show the cut markers and the balance curve
in their exact colours, against a control page without cuts that must show none of the first.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from bot.cli.main import app
from bot.events import AuthorKind, ChatEvent, EventKind, Platform
from bot.ingress.app import create_app
from bot.intake.routing import routes_for
from bot.ops.replay_html import BALANCE_COLOUR, CUT_COLOURS, render_html
from bot.settings import Settings
from bot.state.audit import AuditEvent, AuditLog
from bot.state.runs import RunIndex
from cards import CardStatus, ProgressCard, render_console, render_feishu, render_slack
from cards._console import STOP_HINT
from cards._limits import FEISHU
from cards._model import LINK_CHARS, CardStep
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import open_bot
from tests.processes import Chatops
from tests.slack_view import blocks, final_card

T0 = 1_700_000_000.0
SESSION = "slack-0123456789abcdef0123"
TURN = "turn-slack-Ev0001"
SCRIPT = "<script>alert('tool')</script>"


def ev(dt: float, kind: str, who: str = "", turn: str = TURN, **data: Any) -> AuditEvent:
    return AuditEvent(ts=T0 + dt, session=SESSION, turn=turn, kind=kind, who=who, data=data)


def steered_then_stopped(*, cuts: bool = True) -> list[AuditEvent]:
    """Two calls, a steer (cut when both answered), a second turn, a stop (cut), the settle."""
    events = [
        ev(0.0, "turn_start", inputs=["why is checkout slow?"]),
        ev(0.1, "model_request", n=1, messages=[{"role": "user"}]),
        ev(1.5, "model_response", text="", prompt_tokens=90, completion_tokens=12,
           calls=[{"id": "c1", "name": "http_get", "arguments": "{}"},
                  {"id": "c2", "name": "shell", "arguments": "{}"}]),
        ev(1.6, "tool_call", id="c1", name="http_get", arguments={"url": "http://checkout"}),
        ev(1.6, "balance", balance=1),
        ev(1.65, "tool_call", id="c2", name="shell", arguments={"cmd": "df -h"}),
        ev(1.65, "balance", balance=2),
        ev(2.5, "steer", who="alice", turn="", text="look at the database instead"),
        ev(3.0, "tool_result", id="c1", name="http_get", status="ok", content=SCRIPT,
           duration_s=1.4),
        ev(3.0, "balance", balance=1),
        ev(3.2, "tool_result", id="c2", name="shell", status="interrupted", content="",
           duration_s=1.55),
        ev(3.2, "balance", balance=0),
        ev(3.25, "cut", site="boundary", signal="steer", balance=0),
        ev(3.3, "model_request", turn=f"{TURN}.1", n=1, messages=[]),
        ev(4.0, "model_response", turn=f"{TURN}.1", text="", prompt_tokens=120,
           completion_tokens=9, calls=[{"id": "c3", "name": "shell", "arguments": "{}"}]),
        ev(4.1, "tool_call", turn=f"{TURN}.1", id="c3", name="shell", arguments={"cmd": "ps"}),
        ev(4.1, "balance", turn=f"{TURN}.1", balance=1),
        ev(5.0, "stop", who="bob", turn=""),
        ev(5.3, "tool_result", turn=f"{TURN}.1", id="c3", name="shell", status="interrupted",
           content="", duration_s=1.2),
        ev(5.3, "balance", turn=f"{TURN}.1", balance=0),
        ev(5.35, "cut", turn=f"{TURN}.1", site="stop", signal="stop", balance=0),
        ev(5.4, "card", turn=f"{TURN}.1", status="stopped"),
        ev(5.5, "settle", turn=f"{TURN}.1", reason="stopped", final_event_id="Ev0001",
           prompt_tokens=210, completion_tokens=21),
    ]  # fmt: skip
    return events if cuts else [e for e in events if e.kind != "cut"]


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parents: tuple[Element, ...]
    text: list[str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())


class Page(HTMLParser):
    """Every element of a page with its attributes, ancestors and direct text."""

    VOID = frozenset({"meta", "br", "img", "input", "link", "hr"})

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, tuple(self._open))
        self.elements.append(element)
        if tag not in self.VOID:
            self._open.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append(Element(tag, {k: v or "" for k, v in attrs}, tuple(self._open)))

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        if self._open:
            self._open[-1].text.append(data)

    def having(self, cls: str, tag: str | None = None) -> list[Element]:
        return [e for e in self.elements if cls in e.classes and tag in (None, e.tag)]

    def by_id(self, element_id: str) -> Element:
        [found] = [e for e in self.elements if e.attrs.get("id") == element_id]
        return found

    def text(self) -> str:
        return "".join(t for e in self.elements for t in e.text)


def centre_x(mark: Element) -> float:
    """The x of a mark: a polygon's mean x, a rect's left, a circle's centre, a line's x1."""
    if "points" in mark.attrs:
        xs = [float(p.split(",")[0]) for p in mark.attrs["points"].split()]
        return sum(xs) / len(xs)
    return float(mark.attrs.get("x") or mark.attrs.get("cx") or mark.attrs["x1"])


# --- The page, pure -------------------------------------------------------------------------


def test_the_picture_has_the_four_lanes_and_a_mark_per_event() -> None:
    page = Page(render_html(steered_then_stopped()))
    lanes = [e.attrs["data-lane"] for e in page.having("lane", "g")]
    assert lanes == ["model", "tools", "people", "system"]

    def lane_of(mark: Element) -> str:
        [lane] = [p.attrs["data-lane"] for p in mark.parents if "lane" in p.classes]
        return lane

    marks = {(m.attrs["data-kind"], lane_of(m)) for m in page.having("mark")}
    assert marks == {
        ("model_request", "model"),
        ("model_response", "model"),
        ("tool_call", "tools"),  # one bar per call, up to its result
        ("steer", "people"),
        ("stop", "people"),
        ("turn_start", "system"),
        ("card", "system"),
        ("settle", "system"),
    }
    calls = page.having("mark", "rect")
    statuses = sorted(m.attrs["data-status"] for m in calls if m.attrs["data-kind"] == "tool_call")
    assert statuses == ["interrupted", "interrupted", "ok"]
    assert page.by_id("events").parents[-1].tag == "body" and len(page.having("row")) == 23


def test_cuts_are_marked_with_their_signal_and_people_where_they_arrived() -> None:
    page = Page(render_html(steered_then_stopped()))
    cuts = page.having("cut-marker", "g")
    assert [c.attrs["data-signal"] for c in cuts] == ["steer", "stop"]
    lines = [e for e in page.elements if e.tag == "line" and e.parents[-1] in cuts]
    assert [e.attrs["stroke"] for e in lines] == [CUT_COLOURS["steer"], CUT_COLOURS["stop"]]
    labels = ["".join(e.text) for e in page.having("cut-label")]
    assert labels == ["steer", "stop"]
    [steer] = [m for m in page.having("mark") if m.attrs["data-kind"] == "steer"]
    [stop] = [m for m in page.having("mark") if m.attrs["data-kind"] == "stop"]
    steer_cut, stop_cut = (centre_x(line) for line in lines)
    # Time runs left to right: the steer arrives, then its cut; the stop, then its cut.
    assert centre_x(steer) < steer_cut < centre_x(stop) < stop_cut
    assert "steer · alice" in page.text() and "stop · bob" in page.text()


def test_a_cut_without_signal_is_labelled_with_its_site() -> None:
    events = [ev(0, "turn_start"), ev(1, "cut", site="after_batch", signal="", balance=0)]
    page = Page(render_html(events))
    [cut] = page.having("cut-marker")
    assert cut.attrs["data-signal"] == "" and cut.attrs["data-site"] == "after_batch"
    assert ["".join(e.text) for e in page.having("cut-label")] == ["after_batch"]


def test_the_balance_curve_steps_through_every_sample() -> None:
    events = steered_then_stopped()
    samples = [e.data["balance"] for e in events if e.kind == "balance"]
    page = Page(render_html(events))
    curve = page.by_id("balance-curve")
    assert curve.attrs["stroke"] == BALANCE_COLOUR
    assert int(curve.attrs["data-samples"]) == len(samples) == 6
    points = [tuple(map(float, p.split(","))) for p in curve.attrs["points"].split()]
    assert len(points) == 2 * len(samples)  # a rise or fall per sample, then on to the end
    ys = [y for _, y in points]
    assert all(a[0] <= b[0] for a, b in zip(points, points[1:], strict=False))
    # Higher balance, higher on the page (smaller y): 1, 2, 1, 0, 1, 0.
    at = {value: ys[1 + 2 * i] for i, value in enumerate(samples) if i}
    assert at[2] < at[1] < at[0]
    assert len(page.having("balance-point")) == len(samples)


def test_tool_output_and_people_text_show_as_text_never_as_markup() -> None:
    events = [
        *steered_then_stopped(),
        ev(6, "steer", who='"><img src=x onerror=alert(1)>', text="</title><script>x</script>"),
        ev(7, "cut", site="<b>", signal='steer" onmouseover="alert(1)', balance=0),
    ]
    html = render_html(events)
    page = Page(html)
    assert not [e for e in page.elements if e.tag in ("script", "img", "b")]
    assert not [k for e in page.elements for k in e.attrs if k.startswith("on")]
    assert "&lt;script&gt;alert(&#x27;tool&#x27;)&lt;/script&gt;" in html
    assert SCRIPT in page.text()  # shown as it was written
    assert page.having("cut-marker")[-1].attrs["data-signal"] == 'steer" onmouseover="alert(1)'


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "p", "svg", "g", "rect", "text",
    "line", "polyline", "polygon", "circle", "table", "tr", "td",
}  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(st.text(), st.text(), st.text())
def test_no_text_in_any_event_field_adds_markup(text: str, who: str, kind: str) -> None:
    events = [
        ev(0, "turn_start", inputs=[text]),
        ev(1, "tool_result", id=text, name=text, status=text, content=text, duration_s=text),
        ev(2, "steer", who=who, text=text),
        ev(3, "cut", site=text, signal=text, balance=text),
        ev(4, kind, who=who, **{"x": text}),
        ev(5, "settle", reason=text),
    ]
    page = Page(render_html(events))
    assert {e.tag for e in page.elements} <= ALLOWED_TAGS
    assert not [k for e in page.elements for k in e.attrs if k.startswith("on")]
    assert len(page.having("cut-marker")) == 1


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
FIELDS = {
    "turn_start": ("inputs",),
    "model_request": ("n", "messages"),
    "model_response": ("text", "calls", "prompt_tokens", "completion_tokens"),
    "tool_call": ("id", "name", "arguments"),
    "tool_result": ("id", "name", "status", "content", "duration_s"),
    "balance": ("balance",),
    "cut": ("site", "signal", "balance"),
    "steer": ("text",),
    "approval": ("call_id", "tool", "verdict"),
    "killswitch": ("on",),
    "card": ("status",),
    "settle": ("reason", "final_event_id", "prompt_tokens", "completion_tokens"),
}


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_any_shape_of_recorded_data_renders(data: st.DataObject) -> None:
    # The page is read back from Redis long after it was written: a field of another shape
    # (a count for a list, a number as text) must not cost the whole page.
    events = [
        AuditEvent(
            ts=T0 + i,
            session=SESSION,
            turn=TURN,
            kind=kind,
            data={name: data.draw(json_values) for name in names},
        )
        for i, (kind, names) in enumerate(FIELDS.items())
    ]
    page = Page(render_html(events))
    assert {e.tag for e in page.elements} <= ALLOWED_TAGS
    assert len(page.having("row")) == len(FIELDS)


def test_an_empty_audit_renders_a_page_without_a_picture() -> None:
    page = Page(render_html([]))
    assert [e.attrs.get("id") for e in page.elements if e.tag == "p"][-1] == "empty"
    assert not [e for e in page.elements if e.tag == "svg"]


def test_the_page_loads_nothing_and_runs_nothing() -> None:
    html = render_html(steered_then_stopped())
    page = Page(html)
    [csp] = [e for e in page.elements if e.attrs.get("http-equiv") == "Content-Security-Policy"]
    assert csp.attrs["content"].startswith("default-src 'none'")
    attrs = [(k, v) for e in page.elements for k, v in e.attrs.items()]
    assert not [k for k, _ in attrs if k in ("src", "href", "xlink:href", "action")]
    assert [v for _, v in attrs if "://" in v] == ["http://www.w3.org/2000/svg"]
    assert "@import" not in html and "url(" not in html


# --- The card's link ------------------------------------------------------------------------

LINK = f"https://chatops.example.com/runs/{TURN}"


def test_a_card_with_a_link_offers_replay_on_every_platform() -> None:
    live = ProgressCard(title="t", turn_id=TURN, link=LINK)
    done = live.ended(CardStatus.STOPPED)
    for shown, labels in ((live, ["Stop", "Replay"]), (done, ["Replay"])):
        buttons = [b for block in render_slack(shown) for b in block.get("elements", ())]
        buttons = [b for b in buttons if b.get("type") == "button"]
        assert [b["text"]["text"] for b in buttons] == labels
        assert buttons[-1]["url"] == LINK and "value" not in buttons[-1]
        elements = render_feishu(shown)["body"]["elements"]
        feishu = [e for e in elements if e["tag"] == "button"]
        assert [b["text"]["content"] for b in feishu] == labels
        assert feishu[-1]["behaviors"] == [{"type": "open_url", "default_url": LINK}]
        console = render_console(shown, width=60)
        assert "Replay: https://chatops.example.com/runs/turn-slack-Ev0001" in console
        assert console.endswith(STOP_HINT) is (shown is live)
    assert ProgressCard.from_json(done.to_json()) == done


@pytest.mark.parametrize(
    "link",
    [
        "javascript:alert(1)",
        "https://x.example/<!channel>",
        "https://x.example/a b",
        'https://x.example/"',
        "https://x.example/" + "a" * LINK_CHARS,
    ],
)
def test_a_link_that_is_not_a_plain_url_is_not_shown(link: str) -> None:
    shown = ProgressCard(title="t", turn_id=TURN, link=link, status=CardStatus.ANSWERED)
    assert shown.shown_link == ""
    assert not [b for b in render_slack(shown) if b["type"] == "actions"]
    assert not [e for e in render_feishu(shown)["body"]["elements"] if e["tag"] == "button"]
    assert "Replay" not in render_console(shown)


def test_the_longest_link_keeps_the_feishu_card_within_its_bytes() -> None:
    emoji = "😀"
    link = "https://x.example/" + "a" * (LINK_CHARS - len("https://x.example/"))
    worst = ProgressCard(
        title=emoji * 1000,
        turn_id="t" * 450,
        thread="h" * 450,
        status=CardStatus.WORKING,
        steps=(CardStep(tool=emoji * 200, args=emoji * 2000, duration_s=1.0),) * 500,
        answer=emoji * 20_000,
        link=link,
    )
    assert worst.shown_link == link
    rendered = render_feishu(worst)
    assert len(json.dumps(rendered, ensure_ascii=False).encode()) <= FEISHU.card_bytes


def test_a_replay_press_on_slack_is_ignored() -> None:
    # Slack sends a `block_actions` payload for a link button too.
    press = ChatEvent(
        platform=Platform.SLACK,
        event_id="action-1-replay-U1-1",
        kind=EventKind.ACTION,
        workspace="T1",
        channel="C1",
        thread="1.0",
        message_id="",
        author="U1",
        author_name="u",
        author_kind=AuthorKind.HUMAN,
        action="replay",
    )
    assert not any(routes_for(press))


# --- The route ------------------------------------------------------------------------------


async def record(redis: aioredis.Redis, events: list[AuditEvent]) -> None:
    await AuditLog(redis).record_many(events)
    await RunIndex(redis).remember(TURN, SESSION)


async def get(app_settings: Settings, redis: aioredis.Redis, path: str) -> httpx.Response:
    app = create_app(app_settings, redis=redis)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.get(path)


PUBLIC = Settings(_env_file=None, CHATOPS_PUBLIC_URL="https://chatops.example.com")


async def test_the_ingress_serves_a_run_by_its_turn_id(redis_client: aioredis.Redis) -> None:
    await record(redis_client, steered_then_stopped())
    response = await get(PUBLIC, redis_client, f"/runs/{TURN}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    page = Page(response.text)
    assert [c.attrs["data-signal"] for c in page.having("cut-marker")] == ["steer", "stop"]
    assert len(page.having("row")) == 23  # the steer and stop name no turn, and are in


async def test_unknown_runs_and_a_missing_public_url_are_404(redis_client: aioredis.Redis) -> None:
    await record(redis_client, steered_then_stopped())
    assert (await get(PUBLIC, redis_client, "/runs/turn-unknown")).status_code == 404
    await RunIndex(redis_client).remember("turn-no-audit", SESSION)
    assert (await get(PUBLIC, redis_client, "/runs/turn-no-audit")).status_code == 404
    off = Settings(_env_file=None)
    assert (await get(off, redis_client, f"/runs/{TURN}")).status_code == 404


def test_chatops_replay_html_writes_the_page(
    redis_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def seed() -> None:
        client = aioredis.Redis.from_url(redis_server)
        try:
            await client.flushall()
            await AuditLog(client).record_many(steered_then_stopped())
        finally:
            await client.aclose()

    asyncio.run(seed())
    monkeypatch.setenv("REDIS_URL", redis_server)
    out = tmp_path / "run.html"
    result = CliRunner().invoke(app, ["replay", SESSION, "--turn", TURN, "--html", str(out)])
    assert result.exit_code == 0, result.output
    page = Page(out.read_text(encoding="utf-8"))
    assert [c.attrs["data-signal"] for c in page.having("cut-marker")] == ["steer", "stop"]
    assert page.by_id("balance-curve").attrs["data-samples"] == "6"


async def test_a_worker_links_its_card_to_the_page_the_ingress_serves(
    bot_settings: Settings, redis_client: aioredis.Redis, fake_llm, slack_api, slow_service
) -> None:
    public = bot_settings.model_copy(update={"public_url": "https://chatops.example.com/"})
    hold = fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})
    fake_llm.script(fp.ToolCallsReply([hold]), fp.TextReply("The gateway drops connections."))
    thread = sg.slack_ts()
    async with open_bot(public, redis_client) as running:
        worker = await running.start_worker()
        await running.post(sg.slack_app_mention(ts=thread))
        await slow_service.wait_for_hits(1)
        await running.post(sg.slack_message(text="check the gateway", thread_ts=thread))
        await worker.wait_finished(1)
        replay = [
            button
            for block in blocks(final_card(slack_api, thread))
            for button in block.get("elements", ())
            if button.get("action_id") == "replay"
        ]
        [url] = [button["url"] for button in replay]
        assert re.fullmatch(r"https://chatops\.example\.com/runs/turn-slack-[\w.-]+", url)
        response = await running.http.get(url.removeprefix("https://chatops.example.com"))
    assert response.status_code == 200
    page = Page(response.text)
    assert "steer" in [m.attrs["data-kind"] for m in page.having("mark")]
    assert "check the gateway" in page.text()


# --- Headless Chromium ----------------------------------------------------------------------

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--force-device-scale-factor=1",
    "--window-size=1200,700",
]


@pytest.fixture
def chromium() -> Iterator[str]:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("chromium is not installed: `make test` installs it (apt-get install chromium)")
    yield path


def screenshot(chromium: str, url: str, shot: Path) -> dict[tuple[int, int, int], int]:
    """Chromium's screenshot of `url` into `shot`: how many pixels of each colour."""
    from PIL import Image

    profile = shot.with_suffix(".profile")
    done = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert shot.exists(), done.stderr.decode(errors="replace")
    with Image.open(shot) as image:
        assert image.size == (1200, 700)
        counts = image.convert("RGB").getcolors(maxcolors=1200 * 700)
    assert counts is not None
    return {(int(c[0]), int(c[1]), int(c[2])): n for n, c in counts}  # type: ignore[index]


def rgb(hex_colour: str) -> tuple[int, int, int]:
    value = int(hex_colour.removeprefix("#"), 16)
    return (value >> 16, (value >> 8) & 0xFF, value & 0xFF)


@pytest.mark.slow
async def test_chromium_draws_the_served_page_with_its_cut_markers(
    redis_server: str, redis_client: aioredis.Redis, chromium: str, tmp_path: Path
) -> None:
    await record(redis_client, steered_then_stopped())
    env = {"REDIS_URL": redis_server, "CHATOPS_PUBLIC_URL": "https://chatops.example.com"}
    server, base = await Chatops.serve(env)
    try:
        url = f"{base}/runs/{TURN}"
        served = await asyncio.to_thread(screenshot, chromium, url, tmp_path / "served.png")
    finally:
        await server.stop()
    control = tmp_path / "no-cuts.html"
    control.write_text(render_html(steered_then_stopped(cuts=False)))
    uncut = await asyncio.to_thread(screenshot, chromium, control.as_uri(), tmp_path / "uncut.png")

    assert len(served) > 50, "a drawn page has many colours (text is anti-aliased)"
    # Each marker is a 3 px line through four lanes and the balance panel (~370 px tall).
    for signal in ("steer", "stop"):
        colour = rgb(CUT_COLOURS[signal])
        assert served.get(colour, 0) > 600, (signal, served.get(colour, 0))
        assert uncut.get(colour, 0) == 0, signal
    # The balance curve: six steps of a 3 px line across the panel.
    assert served.get(rgb(BALANCE_COLOUR), 0) > 1500
    assert uncut.get(rgb(BALANCE_COLOUR), 0) > 1500
