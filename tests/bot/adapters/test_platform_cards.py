"""Tests for `SlackCards` and `FeishuCards`: cards posted and updated through the real SDKs.

Why this way: what these adapters promise is a translation, of a `ProgressCard` into the
platform's calls and of the platform's failures into `bot.publishing.platform` errors. Both halves
depend on how slack_sdk and lark-oapi really behave (which retry handlers run, what a 429 looks like
once the SDK has parsed it, whether a non-2xx answer raises or returns), so the adapters are
driven through the real `AsyncWebClient` and lark-oapi `Client` against the loopback fakes
never against mocks of the SDKs. Failures come from the fakes' own simulation
where it has them (unknown ts, recalled message, wrong token, unknown channel) and from scripted
faults otherwise (429, 5xx, slow answers); "connection refused" is a closed loopback port. Cards
are built directly, and the expected JSON comes from the pure renderers, so these tests pin the
IO and not the card layout.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from bot.adapters.feishu.cards import FeishuCards
from bot.adapters.slack.cards import SlackCards
from bot.errors import BotConfigError
from bot.events import Platform
from bot.publishing.platform import (
    CardGone,
    CardRef,
    CardTarget,
    ChatPlatform,
    PlatformError,
    PlatformRateLimited,
    PlatformRejected,
    PlatformUnavailable,
)
from bot.settings import Settings
from cards._feishu import render_feishu
from cards._model import CardStatus, CardStep, ProgressCard, StepState
from cards._slack import render_slack, slack_text
from tests.conftest import free_port
from tests.fakes.feishu_api import (
    MESSAGE_RATE_LIMITED,
    TOKEN_INVALID,
    FakeFeishuAPI,
    feishu_error,
    frequency_limited,
)
from tests.fakes.signing import (
    FEISHU_APP_ID,
    FEISHU_APP_SECRET,
    FEISHU_CHAT_ID,
    SLACK_CHANNEL_ID,
    slack_ts,
)
from tests.fakes.slack_api import FakeSlackAPI, Fault, ratelimited, slack_error, slow

LIVE = ProgressCard(
    title="checkout returns 500",
    turn_id="turn-1",
    thread="1700000000.000100",
    status=CardStatus.WORKING,
    steps=(
        CardStep(tool="http_get", args="url=https://status.example.com", state=StepState.DONE),
        CardStep(tool="http_get", args="url=https://api.example.com/healthz"),
    ),
    elapsed_s=4.2,
)
FINAL = LIVE.evolve(
    status=CardStatus.ANSWERED,
    steps=(
        LIVE.steps[0],
        CardStep(tool="http_get", args=LIVE.steps[1].args, state=StepState.DONE, duration_s=0.3),
    ),
    answer="The api pods restart in a loop: OOMKilled since 10:02.",
    elapsed_s=9.8,
)


def _json(value: Any) -> Any:
    """`value` as it looks after a trip through JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def _button_labels(node: Any) -> Iterator[str]:
    """The text of every button anywhere in a block or card tree."""
    if isinstance(node, dict):
        if node.get("type") == "button" or node.get("tag") == "button":
            text = node.get("text")
            yield (
                str(text.get("text") or text.get("content") or "")
                if isinstance(text, dict)
                else str(text or "")
            )
        for child in node.values():
            yield from _button_labels(child)
    elif isinstance(node, list):
        for child in node:
            yield from _button_labels(child)


def _has_stop(node: Any) -> bool:
    return any("Stop" in label for label in _button_labels(node))


# --- Slack -------------------------------------------------------------------------------------


_OPENED: list[SlackCards] = []
"""The clients a test built, closed after it (each holds an HTTP session once it called)."""


@pytest.fixture(autouse=True)
async def _close_slack_clients() -> AsyncIterator[None]:
    yield
    while _OPENED:
        await _OPENED.pop().aclose()


def _slack(api: FakeSlackAPI, *, token: str | None = None, url: str | None = None) -> SlackCards:
    settings = Settings(
        _env_file=None,
        SLACK_BOT_TOKEN=token or api.token,
        SLACK_API_URL=url or api.base_url,
    )
    cards = SlackCards.from_settings(settings, timeout_s=2.0)
    _OPENED.append(cards)
    return cards


def _slack_target(thread: str | None = None) -> CardTarget:
    return CardTarget(
        platform=Platform.SLACK, channel=SLACK_CHANNEL_ID, thread=thread or slack_ts()
    )


async def test_slack_post_then_update(slack_api: FakeSlackAPI) -> None:
    cards = _slack(slack_api)
    target = _slack_target()

    ref = await cards.post_card(target, LIVE, key=uuid.uuid4().hex)
    posted = slack_api.message(SLACK_CHANNEL_ID, ref.message_id)
    await cards.update_card(ref, FINAL)
    updated = slack_api.message(SLACK_CHANNEL_ID, ref.message_id)

    assert ref == CardRef(
        platform=Platform.SLACK, channel=SLACK_CHANNEL_ID, message_id=ref.message_id
    )
    assert posted is not None and updated is not None
    assert posted["thread_ts"] == target.thread
    assert (posted["blocks"], posted["text"]) == (_json(render_slack(LIVE)), slack_text(LIVE))
    assert (updated["blocks"], updated["text"]) == (_json(render_slack(FINAL)), slack_text(FINAL))
    assert _has_stop(posted["blocks"]), "a live card carries a Stop button"
    assert not _has_stop(updated["blocks"]), "a final card has none"
    post, update = slack_api.calls_to("chat.postMessage"), slack_api.calls_to("chat.update")
    assert (len(post), len(update)) == (1, 1)
    assert update[0].params["ts"] == ref.message_id


async def test_slack_finds_a_card_by_its_key_past_a_page_of_replies(
    slack_api: FakeSlackAPI,
) -> None:
    cards = _slack(slack_api)
    target = _slack_target()
    slack_api.add_message(SLACK_CHANNEL_ID, target.thread, "@chatops why?")
    since = time.time() - 1
    other = await cards.post_card(target, LIVE, key="a" * 32)  # an earlier analysis's card
    for _ in range(250):  # a busy thread: the card is on the second page
        slack_api.add_message(SLACK_CHANNEL_ID, slack_ts(), "+1", thread_ts=target.thread)
    mine = await cards.post_card(target, LIVE, key="b" * 32)

    assert await cards.find_card(target, "b" * 32, posted_after=since) == mine
    assert await cards.find_card(target, "a" * 32, posted_after=since) == other
    assert await cards.find_card(target, "c" * 32, posted_after=since) is None
    # Only replies since the post's start are read: the earlier card is not looked at.
    assert await cards.find_card(target, "a" * 32, posted_after=time.time() + 60) is None
    pages = [c.params for c in slack_api.calls_to("conversations.replies")]
    assert [p.get("cursor") is not None for p in pages[:2]] == [False, True]


async def test_slack_calls_share_one_kept_alive_connection(slack_api: FakeSlackAPI) -> None:
    """slack_sdk opens a connection per call unless given a session: the client keeps one."""
    cards = _slack(slack_api)
    ref = await cards.post_card(_slack_target(), LIVE, key=uuid.uuid4().hex)
    for _ in range(3):
        await cards.update_card(ref, LIVE)
    await cards.set_status(_slack_target(), "is looking…")
    calls = slack_api.calls
    assert len(calls) == 5
    assert len({call.client_port for call in calls}) == 1
    await cards.aclose()
    await cards.aclose()  # idempotent
    await cards.update_card(ref, FINAL)  # a closed client opens a session again
    assert slack_api.calls[-1].client_port != calls[0].client_port


async def test_slack_status_set_and_cleared(slack_api: FakeSlackAPI) -> None:
    cards = _slack(slack_api)
    target = _slack_target()

    await cards.set_status(target, "is checking the api pods…")
    shown = slack_api.thread_status(SLACK_CHANNEL_ID, target.thread)
    await cards.set_status(target, "")

    assert shown == "is checking the api pods…"
    assert slack_api.thread_status(SLACK_CHANNEL_ID, target.thread) == ""
    assert cards.platform is Platform.SLACK


async def test_slack_429_is_surfaced_not_slept_on(slack_api: FakeSlackAPI) -> None:
    cards = _slack(slack_api)
    ref = await cards.post_card(_slack_target(), LIVE, key=uuid.uuid4().hex)
    slack_api.script("chat.update", ratelimited(retry_after=7))
    started = time.monotonic()

    with pytest.raises(PlatformRateLimited) as limited:
        await cards.update_card(ref, FINAL)

    assert limited.value.retry_after_s == 7.0
    assert time.monotonic() - started < 2, "the SDK did not wait out Retry-After"
    assert [c.status for c in slack_api.calls_to("chat.update")] == [429], "and did not retry"
    assert isinstance(limited.value.__cause__, SlackApiError)


def test_slack_refuses_a_client_that_sleeps_on_429(slack_api: FakeSlackAPI) -> None:
    client = AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url)
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler())

    with pytest.raises(BotConfigError, match="429"):
        SlackCards(client)


@pytest.mark.parametrize(
    ("fault", "expected", "retry_after"),
    [
        (Fault(status=429, body={"ok": False, "error": "ratelimited"}), PlatformRateLimited, 1.0),
        (slack_error("message_not_found"), CardGone, None),
        (slack_error("internal_error", status=500), PlatformUnavailable, None),
        (Fault(status=503, body={"ok": False}), PlatformUnavailable, None),
        (slack_error("service_unavailable"), PlatformUnavailable, None),
        (slack_error("invalid_blocks"), PlatformRejected, None),
    ],
    ids=["429-no-header", "not-found", "500", "503-no-error", "service-unavailable", "rejected"],
)
async def test_slack_scripted_errors(
    slack_api: FakeSlackAPI, fault: Fault, expected: type[PlatformError], retry_after: float | None
) -> None:
    cards = _slack(slack_api)
    ref = await cards.post_card(_slack_target(), LIVE, key=uuid.uuid4().hex)
    slack_api.script("chat.update", fault)

    with pytest.raises(expected) as raised:
        await cards.update_card(ref, FINAL)

    if retry_after is not None:
        assert isinstance(raised.value, PlatformRateLimited)
        assert raised.value.retry_after_s == retry_after
    assert len(slack_api.calls_to("chat.update")) == 1


async def test_slack_gone_and_rejected_by_the_simulation(slack_api: FakeSlackAPI) -> None:
    cards = _slack(slack_api)
    human_ts = slack_ts()
    slack_api.add_message(SLACK_CHANNEL_ID, human_ts, "a person's message")

    with pytest.raises(CardGone, match="message_not_found"):
        await cards.update_card(
            CardRef(platform=Platform.SLACK, channel=SLACK_CHANNEL_ID, message_id=slack_ts()), LIVE
        )
    with pytest.raises(CardGone, match="cant_update_message"):
        await cards.update_card(
            CardRef(platform=Platform.SLACK, channel=SLACK_CHANNEL_ID, message_id=human_ts), LIVE
        )
    with pytest.raises(PlatformRejected, match="channel_not_found"):
        await cards.post_card(
            CardTarget(Platform.SLACK, "not-a-channel", slack_ts()), LIVE, key="k"
        )
    with pytest.raises(PlatformRejected, match="invalid_auth"):
        await _slack(slack_api, token="xoxb-revoked").post_card(
            _slack_target(), LIVE, key=uuid.uuid4().hex
        )


async def test_slack_unreachable_and_slow(slack_api: FakeSlackAPI) -> None:
    refused = _slack(slack_api, url=f"http://127.0.0.1:{free_port()}/api/")
    settings = Settings(
        _env_file=None, SLACK_BOT_TOKEN=slack_api.token, SLACK_API_URL=slack_api.base_url
    )
    impatient = SlackCards.from_settings(settings, timeout_s=0.2)
    _OPENED.append(impatient)
    slack_api.script("chat.postMessage", slow(5))

    with pytest.raises(PlatformUnavailable, match="ClientConnectorError"):
        await refused.post_card(_slack_target(), LIVE, key=uuid.uuid4().hex)
    with pytest.raises(PlatformUnavailable, match="TimeoutError"):
        await impatient.post_card(_slack_target(), LIVE, key=uuid.uuid4().hex)


# --- Feishu ------------------------------------------------------------------------------------

ROOT = "om_" + "a" * 32
"""The mention the thread hangs off."""


def _feishu(api: FakeFeishuAPI, *, timeout_s: float = 5.0, **overrides: str) -> FeishuCards:
    values: dict[str, Any] = {
        "FEISHU_APP_ID": FEISHU_APP_ID,
        "FEISHU_APP_SECRET": FEISHU_APP_SECRET,
        "FEISHU_DOMAIN": api.base_url,
        **overrides,
    }
    return FeishuCards.from_settings(Settings(_env_file=None, **values), timeout_s=timeout_s)


def _feishu_target() -> CardTarget:
    return CardTarget(platform=Platform.FEISHU, channel=FEISHU_CHAT_ID, thread=ROOT)


async def test_feishu_post_then_update(feishu_api: FakeFeishuAPI) -> None:
    feishu_api.add_message(ROOT, text="@chatops checkout returns 500")
    cards = _feishu(feishu_api)

    ref = await cards.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)
    posted = feishu_api.message(ref.message_id)
    await cards.update_card(ref, FINAL)
    updated = feishu_api.message(ref.message_id)

    assert (ref.platform, ref.channel) == (Platform.FEISHU, FEISHU_CHAT_ID)
    assert posted is not None and updated is not None
    assert (posted["root_id"], posted["msg_type"]) == (ROOT, "interactive")
    assert posted["thread_id"], "the card opens the root's thread"
    assert json.loads(posted["body"]["content"]) == _json(render_feishu(LIVE))
    assert json.loads(updated["body"]["content"]) == _json(render_feishu(FINAL))
    reply = feishu_api.calls_to("im.v1.message.reply")[0]
    assert reply.path_params == {"message_id": ROOT}
    assert reply.params["reply_in_thread"] is True
    patch = feishu_api.calls_to("im.v1.message.patch")[0]
    assert patch.path_params == {"message_id": ref.message_id}
    assert patch.token == feishu_api.tenant_access_token


async def test_feishu_status_is_a_no_op(feishu_api: FakeFeishuAPI) -> None:
    cards = _feishu(feishu_api)

    await cards.set_status(_feishu_target(), "is checking the api pods…")
    await cards.set_status(_feishu_target(), "")

    assert feishu_api.calls == []
    assert cards.platform is Platform.FEISHU


@pytest.mark.parametrize(
    ("fault", "expected", "retry_after"),
    [
        (frequency_limited(reset_s=3), PlatformRateLimited, 3.0),
        (frequency_limited(reset_s=2, status=400), PlatformRateLimited, 2.0),
        (
            feishu_error(MESSAGE_RATE_LIMITED, "This operation triggers the frequency limit."),
            PlatformRateLimited,
            1.0,
        ),
        (feishu_error(1500, "internal error", status=500), PlatformUnavailable, None),
        (feishu_error(1500, "gateway", status=503), PlatformUnavailable, None),
        (
            feishu_error(TOKEN_INVALID, "Invalid access token for authorization."),
            PlatformRejected,
            None,
        ),
    ],
    ids=["429", "99991400-as-400", "230020", "500", "503", "bad-token"],
)
async def test_feishu_scripted_errors(
    feishu_api: FakeFeishuAPI,
    fault: Fault,
    expected: type[PlatformError],
    retry_after: float | None,
) -> None:
    cards = _feishu(feishu_api)
    ref = await cards.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)
    feishu_api.script("im.v1.message.patch", fault)

    with pytest.raises(expected) as raised:
        await cards.update_card(ref, FINAL)

    if retry_after is not None:
        assert isinstance(raised.value, PlatformRateLimited)
        assert raised.value.retry_after_s == retry_after
    assert len(feishu_api.calls_to("im.v1.message.patch")) == 1, "lark-oapi does not retry"


async def test_feishu_recalled_card_is_gone(feishu_api: FakeFeishuAPI) -> None:
    cards = _feishu(feishu_api)
    ref = await cards.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)
    feishu_api.recall(ref.message_id)

    with pytest.raises(CardGone, match="230011"):
        await cards.update_card(ref, FINAL)
    feishu_api.recall(ROOT)
    with pytest.raises(CardGone, match="230011"):
        await cards.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)


async def test_feishu_too_fast_patches_are_rate_limited(feishu_api: FakeFeishuAPI) -> None:
    cards = _feishu(feishu_api)
    ref = await cards.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)

    for _ in range(feishu_api.patch_qps_limit or 0):
        await cards.update_card(ref, LIVE)
    with pytest.raises(PlatformRateLimited) as limited:
        await cards.update_card(ref, FINAL)

    assert limited.value.retry_after_s == 1.0


async def test_feishu_wrong_app_credentials_are_rejected(feishu_api: FakeFeishuAPI) -> None:
    # Another app id: lark-oapi caches tenant tokens process-wide by app id, so a wrong secret
    # for the real app id would still find the cached token.
    cards = _feishu(feishu_api, FEISHU_APP_ID="cli_not_this_app")

    with pytest.raises(PlatformRejected, match="10003"):
        await cards.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)

    assert feishu_api.calls_to("im.v1.message.reply") == []


async def test_feishu_unreachable_and_slow(feishu_api: FakeFeishuAPI) -> None:
    refused = _feishu(feishu_api, FEISHU_DOMAIN=f"http://127.0.0.1:{free_port()}")
    impatient = _feishu(feishu_api, timeout_s=0.2)
    feishu_api.script("im.v1.message.reply", slow(5))

    with pytest.raises(PlatformUnavailable, match="ConnectionError"):
        await refused.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)
    with pytest.raises(PlatformUnavailable, match="Timeout"):
        await impatient.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)


# --- Both --------------------------------------------------------------------------------------


async def test_both_are_chat_platforms(slack_api: FakeSlackAPI, feishu_api: FakeFeishuAPI) -> None:
    # mypy checks the Protocol here; the assertions check the runtime side.
    platforms: list[ChatPlatform] = [_slack(slack_api), _feishu(feishu_api)]

    for platform in platforms:
        await platform.aclose()

    assert [p.platform for p in platforms] == [Platform.SLACK, Platform.FEISHU]


async def test_cancellation_is_never_mapped(
    slack_api: FakeSlackAPI, feishu_api: FakeFeishuAPI
) -> None:
    slack, feishu = _slack(slack_api), _feishu(feishu_api)
    slack_ref = await slack.post_card(_slack_target(), LIVE, key=uuid.uuid4().hex)
    feishu_ref = await feishu.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)
    slack_api.script("chat.update", slow(30))
    feishu_api.script("im.v1.message.patch", slow(30))

    for api, operation, update in (
        (slack_api, "chat.update", lambda: slack.update_card(slack_ref, FINAL)),
        (feishu_api, "im.v1.message.patch", lambda: feishu.update_card(feishu_ref, FINAL)),
    ):
        pending = asyncio.create_task(update())
        await api.wait_for_calls(1, operation)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        # lark-oapi's worker thread is still waiting; release it rather than its timeout.
        api.reset()


# --- rendering off the event loop ----------------------------------------------------------------

HOSTILE_FINAL = FINAL.evolve(answer="[1," * 14_000)
"""A 42 KB answer of citation openings: tens of milliseconds to render, which the loop never
waits out."""


@pytest.mark.parametrize("platform", ["slack", "feishu"])
async def test_a_card_renders_off_the_event_loop(
    platform: str,
    slack_api: FakeSlackAPI,
    feishu_api: FakeFeishuAPI,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop_thread = threading.get_ident()
    threads: list[int] = []
    module = f"bot.adapters.{platform}.cards"
    real = render_slack if platform == "slack" else render_feishu

    def spy(card: ProgressCard) -> Any:
        threads.append(threading.get_ident())
        return real(card)

    monkeypatch.setattr(f"{module}.render_{platform}", spy)
    if platform == "slack":
        slack = _slack(slack_api)
        ref = await slack.post_card(_slack_target(), LIVE, key=uuid.uuid4().hex)
        await slack.update_card(ref, HOSTILE_FINAL)
        shown = json.dumps(slack_api.message(SLACK_CHANNEL_ID, ref.message_id))
    else:
        feishu_api.add_message(ROOT, text="@chatops checkout returns 500")
        feishu = _feishu(feishu_api)
        ref = await feishu.post_card(_feishu_target(), LIVE, key=uuid.uuid4().hex)
        await feishu.update_card(ref, HOSTILE_FINAL)
        shown = json.dumps(feishu_api.message(ref.message_id))

    assert len(threads) == 2, "the post and the update each render once"
    assert loop_thread not in threads, "no card is rendered on the event loop's thread"
    assert "[1," in shown, "the hostile answer is still shown (cut), as text"
