"""Tests for the `ChannelPoster`s: a notice posted top-level, then in its thread, on every platform.

Why this way: a poster promises where a message lands (top-level or in the root's thread), what
the thread is keyed by (Slack's team and `ts`, Feishu's tenant and root `message_id`, the
console's key), that a retried key posts once where the platform dedupes (Feishu's `uuid`), and
that failures leave as the `PlatformError` tree. All of it depends on how slack_sdk and lark-oapi
really send and parse, so the posters run through the real SDKs against the protocol-faithful
loopback fakes (`slack_api`, `feishu_api`), and the console's against a real Redis read back by
the real `ConsoleChannel`. Failures come from the fakes' own simulation where they have it
(unknown channel, recalled root, wrong token) and from scripted faults otherwise; "connection
refused" is a closed loopback port. The expected content comes from the pure renderers.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from bot.adapters.console.channel import ConsoleChannel, NoticeView, Screen
from bot.adapters.console.inbound import CONSOLE_WORKSPACE
from bot.adapters.console.posts import ConsolePoster
from bot.adapters.feishu.posts import FeishuPoster
from bot.adapters.slack.posts import SlackPoster
from bot.errors import BotConfigError
from bot.events import Platform
from bot.keys import BotKeys
from bot.publishing.channel_posts import ChannelPoster, PostedRoot, bounded_key
from bot.publishing.platform import (
    CardGone,
    PlatformRateLimited,
    PlatformRejected,
    PlatformUnavailable,
)
from bot.settings import Settings
from bot.worker.clients import channel_posters
from cards import Notice, render_console_notice, render_feishu_notice, render_slack_notice
from tests.conftest import free_port
from tests.fakes.feishu_api import FakeFeishuAPI, feishu_error, frequency_limited
from tests.fakes.signing import (
    FEISHU_APP_ID,
    FEISHU_APP_SECRET,
    FEISHU_CHAT_ID,
    FEISHU_TENANT_KEY,
    SLACK_CHANNEL_ID,
    SLACK_TEAM_ID,
)
from tests.fakes.slack_api import FakeSlackAPI, Fault, ratelimited, slack_error

ROOT = Notice(
    title="Firing: CheckoutLatencyHigh",
    severity="critical",
    lines=("p99 above 2s for 5m",),
    fields=(("service", "checkout"),),
    links=(("Source", "https://prometheus.example/graph?g0.expr=up"),),
)
JOINED = Notice(title="1 more alert in this incident", lines=("CheckoutErrors since 10:02",))
LONG_KEY = "alertmanager-" + "g" * 80 + "-firing"


# --- Slack -------------------------------------------------------------------------------------


def slack_poster(api: FakeSlackAPI, **overrides: str) -> SlackPoster:
    values: dict[str, Any] = {"SLACK_BOT_TOKEN": api.token, "SLACK_API_URL": api.base_url}
    values.update(overrides)
    return SlackPoster(Settings(_env_file=None, **values), timeout_s=2.0)


async def test_slack_a_root_lands_top_level_and_a_notice_in_its_thread(
    slack_api: FakeSlackAPI,
) -> None:
    poster: ChannelPoster = slack_poster(slack_api)
    root = await poster.post_root(SLACK_CHANNEL_ID, ROOT, key="incident-1")
    await poster.post_in_thread(SLACK_CHANNEL_ID, root.thread, JOINED, key="incident-1-joined")
    second = await poster.post_root(SLACK_CHANNEL_ID, JOINED, key="incident-2")

    ts = root.thread.replace(".", "")
    assert root == PostedRoot(
        workspace=SLACK_TEAM_ID,
        thread=root.thread,
        link=f"https://fake-workspace.slack.com/archives/{SLACK_CHANNEL_ID}/p{ts}",
    )
    posted = slack_api.message(SLACK_CHANNEL_ID, root.thread)
    assert posted is not None and "thread_ts" not in posted
    text, blocks = render_slack_notice(ROOT)
    assert (posted["text"], posted["blocks"]) == (text, json.loads(json.dumps(blocks)))
    first, reply, _ = slack_api.calls_to("chat.postMessage")
    assert "thread_ts" not in first.params
    assert (first.params["unfurl_links"], first.params["unfurl_media"]) == (False, False)
    assert (reply.params["thread_ts"], reply.params["reply_broadcast"]) == (root.thread, False)
    in_thread = slack_api.message(SLACK_CHANNEL_ID, reply.response["ts"])
    assert in_thread is not None and in_thread["thread_ts"] == root.thread
    assert in_thread["text"] == render_slack_notice(JOINED)[0]
    assert second.thread != root.thread and second.workspace == SLACK_TEAM_ID
    assert len(slack_api.calls_to("auth.test")) == 1  # the team id is asked once


async def test_slack_a_root_without_a_permalink_is_still_posted(slack_api: FakeSlackAPI) -> None:
    slack_api.script("chat.getPermalink", slack_error("internal_error"))
    root = await slack_poster(slack_api).post_root(SLACK_CHANNEL_ID, ROOT, key="k")
    assert root.link == "" and slack_api.message(SLACK_CHANNEL_ID, root.thread) is not None


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (ratelimited(7), PlatformRateLimited),
        (slack_error("not_in_channel"), PlatformRejected),
        (slack_error("service_unavailable"), PlatformUnavailable),
        (Fault(status=500, body={"ok": False, "error": "fatal_error"}), PlatformUnavailable),
    ],
)
async def test_slack_failures_are_platform_errors(
    slack_api: FakeSlackAPI, fault: Fault, error: type[Exception]
) -> None:
    poster = slack_poster(slack_api)
    slack_api.script("chat.postMessage", fault, fault)
    with pytest.raises(error) as raised:
        await poster.post_root(SLACK_CHANNEL_ID, ROOT, key="k")
    if isinstance(raised.value, PlatformRateLimited):
        assert raised.value.retry_after_s == 7
    with pytest.raises(error):
        await poster.post_in_thread(SLACK_CHANNEL_ID, "1700000000.000100", JOINED, key="k2")
    assert len(slack_api.calls_to("chat.postMessage")) == 2  # the SDK never retried


async def test_slack_an_unknown_channel_a_bad_token_and_a_dead_host_are_platform_errors(
    slack_api: FakeSlackAPI,
) -> None:
    with pytest.raises(PlatformRejected, match="channel_not_found"):
        await slack_poster(slack_api).post_root("not-a-channel", ROOT, key="k")
    with pytest.raises(PlatformRejected, match="auth.test"):
        await slack_poster(slack_api, SLACK_BOT_TOKEN="xoxb-wrong").post_root(
            SLACK_CHANNEL_ID, ROOT, key="k"
        )
    dead = slack_poster(slack_api, SLACK_API_URL=f"http://127.0.0.1:{free_port()}/api/")
    with pytest.raises(PlatformUnavailable):
        await dead.post_root(SLACK_CHANNEL_ID, ROOT, key="k")


# --- Feishu ------------------------------------------------------------------------------------


def feishu_poster(api: FakeFeishuAPI, **overrides: str) -> FeishuPoster:
    values: dict[str, Any] = {
        "FEISHU_APP_ID": FEISHU_APP_ID,
        "FEISHU_APP_SECRET": FEISHU_APP_SECRET,
        "FEISHU_DOMAIN": api.base_url,
        **overrides,
    }
    return FeishuPoster.from_settings(Settings(_env_file=None, **values), timeout_s=5.0)


def content(message: dict[str, Any]) -> str:
    text = message["body"]["content"]
    assert isinstance(text, str)
    return text


async def test_feishu_a_root_lands_top_level_in_the_chat_and_a_notice_in_its_topic(
    feishu_api: FakeFeishuAPI,
) -> None:
    poster: ChannelPoster = feishu_poster(feishu_api)
    root = await poster.post_root(FEISHU_CHAT_ID, ROOT, key="incident-1")
    await poster.post_in_thread(FEISHU_CHAT_ID, root.thread, JOINED, key="incident-1-joined")

    # The tenant key events carry: learnt from the answer's sender (FEISHU_TENANT_KEY unset).
    assert root == PostedRoot(workspace=FEISHU_TENANT_KEY, thread=root.thread, link="")
    (create,) = feishu_api.calls_to("im.v1.message.create")
    assert create.query == {"receive_id_type": "chat_id"}
    assert create.params == {
        "receive_id": FEISHU_CHAT_ID,
        "msg_type": "interactive",
        "content": render_feishu_notice(ROOT)[1],
        "uuid": "incident-1",
    }
    posted = feishu_api.message(root.thread)
    assert posted is not None and not posted.get("root_id") and posted["chat_id"] == FEISHU_CHAT_ID
    (reply,) = feishu_api.calls_to("im.v1.message.reply")
    assert reply.path_params == {"message_id": root.thread}
    assert reply.params["reply_in_thread"] is True and reply.params["uuid"] == "incident-1-joined"
    in_topic = feishu_api.message(reply.response["data"]["message_id"])
    assert in_topic is not None and in_topic["root_id"] == root.thread
    assert content(in_topic) == render_feishu_notice(JOINED)[1]
    topic = feishu_api.message(root.thread)
    assert topic is not None and in_topic["thread_id"] == topic["thread_id"]


async def test_feishu_the_configured_tenant_key_names_the_workspace(
    feishu_api: FakeFeishuAPI,
) -> None:
    poster = feishu_poster(feishu_api, FEISHU_TENANT_KEY="tenant-from-settings")
    assert (await poster.post_root(FEISHU_CHAT_ID, ROOT, key="k")).workspace == (
        "tenant-from-settings"
    )


async def test_feishu_a_retry_with_the_same_key_posts_once(feishu_api: FakeFeishuAPI) -> None:
    poster = feishu_poster(feishu_api)
    first = await poster.post_root(FEISHU_CHAT_ID, ROOT, key=LONG_KEY)
    again = await feishu_poster(feishu_api).post_root(FEISHU_CHAT_ID, ROOT, key=LONG_KEY)
    other = await poster.post_root(FEISHU_CHAT_ID, ROOT, key=LONG_KEY + "-2")
    for _ in range(2):
        await poster.post_in_thread(FEISHU_CHAT_ID, first.thread, JOINED, key=LONG_KEY + "-j")

    assert again == first and other.thread != first.thread
    uuids = [c.params["uuid"] for c in feishu_api.calls_to("im.v1.message.create")]
    assert uuids[0] == uuids[1] == bounded_key(LONG_KEY) and len(uuids[0]) <= 50
    assert len(feishu_api.calls_to("im.v1.message.reply")) == 2
    assert len(feishu_api.bot_messages(FEISHU_CHAT_ID)) == 3  # two roots, one notice


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        (frequency_limited(3), PlatformRateLimited),
        (feishu_error(230002, "The bot can not be outside the group."), PlatformRejected),
        (feishu_error(99991663, "Invalid access token for authorization."), PlatformRejected),
        (feishu_error(1000, "internal error", status=500), PlatformUnavailable),
    ],
)
async def test_feishu_failures_are_platform_errors(
    feishu_api: FakeFeishuAPI, fault: Fault, error: type[Exception]
) -> None:
    poster = feishu_poster(feishu_api)
    feishu_api.script("im.v1.message.create", fault)
    feishu_api.script("im.v1.message.reply", fault)
    with pytest.raises(error) as raised:
        await poster.post_root(FEISHU_CHAT_ID, ROOT, key="k")
    if isinstance(raised.value, PlatformRateLimited):
        assert raised.value.retry_after_s == 3
    with pytest.raises(error):
        await poster.post_in_thread(FEISHU_CHAT_ID, "om_root", JOINED, key="k2")
    assert feishu_api.bot_messages() == []


async def test_feishu_a_recalled_root_a_bad_chat_and_a_dead_host_are_platform_errors(
    feishu_api: FakeFeishuAPI,
) -> None:
    poster = feishu_poster(feishu_api)
    root = await poster.post_root(FEISHU_CHAT_ID, ROOT, key="k")
    feishu_api.recall(root.thread)
    with pytest.raises(CardGone):
        await poster.post_in_thread(FEISHU_CHAT_ID, root.thread, JOINED, key="k2")
    with pytest.raises(PlatformRejected, match="230001"):
        await poster.post_root("C0123", ROOT, key="k3")  # a Slack id is no chat id
    dead = feishu_poster(feishu_api, FEISHU_DOMAIN=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(PlatformUnavailable):
        await dead.post_root(FEISHU_CHAT_ID, ROOT, key="k4")


# --- console -----------------------------------------------------------------------------------


async def test_console_notices_are_printed_as_messages_of_their_thread(
    redis_client: aioredis.Redis,
) -> None:
    channel = ConsoleChannel("http://127.0.0.1:9", "token", redis_client, channel="ops")
    try:
        await channel.start_reading()
        poster: ChannelPoster = ConsolePoster(redis_client)
        root = await poster.post_root("ops", ROOT, key="incident-1")
        await poster.post_in_thread("ops", root.thread, JOINED, key="incident-1-joined")
        await poster.post_root("elsewhere", ROOT, key="incident-2")
        first, second, third = [await channel.next_entry() for _ in range(3)]
        await poster.post_in_thread("ops", root.thread, JOINED, key="incident-1-later")
        skipped = await channel.next_update()  # a reader of cards only passes over a notice
    finally:
        await channel.aclose()

    assert root == PostedRoot(workspace=CONSOLE_WORKSPACE, thread="incident-1", link="")
    assert first == NoticeView("incident-1", "incident-1", render_console_notice(ROOT))
    assert second == NoticeView("incident-1-joined", "incident-1", render_console_notice(JOINED))
    assert third is None and skipped is None  # another channel's notice; a notice
    assert channel.cards == {}
    out = io.StringIO()
    assert isinstance(first, NoticeView)
    Screen(out).notice(first)
    assert out.getvalue() == f"\n{render_console_notice(ROOT)}\n"
    raw: Any = await redis_client.xrange(BotKeys().console_cards)
    assert all(b"card" not in fields and fields[b"op"] == b"notice" for _, fields in raw)


async def test_console_a_long_key_names_a_thread_the_console_accepts(
    redis_client: aioredis.Redis,
) -> None:
    key = "x" * 500
    root = await ConsolePoster(redis_client).post_root("ops", ROOT, key=key)
    assert root.thread == bounded_key(key, 200) and len(root.thread) <= 200
    assert (await ConsolePoster(redis_client).post_root("ops", ROOT, key=key)) == root


async def test_console_an_unreachable_redis_is_platform_unavailable() -> None:
    gone = aioredis.Redis(port=free_port(), socket_connect_timeout=1)
    try:
        with pytest.raises(PlatformUnavailable):
            await ConsolePoster(gone, timeout_s=2).post_root("ops", ROOT, key="k")
    finally:
        await gone.aclose()


# --- the worker's posters ------------------------------------------------------------------------


def test_channel_posters_builds_one_per_platform_asked_for(slack_api, feishu_api) -> None:
    settings = Settings(
        _env_file=None,
        SLACK_BOT_TOKEN=slack_api.token,
        FEISHU_APP_ID=FEISHU_APP_ID,
        FEISHU_APP_SECRET=FEISHU_APP_SECRET,
    )
    redis = aioredis.Redis()
    posters = channel_posters(settings, list(Platform), redis=redis)
    assert {p: type(poster) for p, poster in posters.items()} == {
        Platform.SLACK: SlackPoster,
        Platform.FEISHU: FeishuPoster,
        Platform.CONSOLE: ConsolePoster,
    }
    assert list(channel_posters(settings, [Platform.FEISHU])) == [Platform.FEISHU]
    # The Redis client may be passed positionally too, as `channel_posters(settings, ps, redis)`.
    assert list(channel_posters(settings, [Platform.CONSOLE], redis)) == [Platform.CONSOLE]
    with pytest.raises(BotConfigError, match="need Redis"):
        channel_posters(settings, [Platform.CONSOLE])
    with pytest.raises(BotConfigError, match="SLACK_BOT_TOKEN"):
        channel_posters(Settings(_env_file=None), [Platform.SLACK])


def test_a_key_is_bounded_by_hashing_only_when_it_must_be() -> None:
    assert bounded_key("incident-1") == "incident-1"
    assert bounded_key("a" * 50) == "a" * 50
    hashed = {bounded_key(k) for k in ("a" * 51, "a" * 52, "é", "tab\there", "")}
    assert len(hashed) == 5 and all(len(k) == 50 and k.startswith("k-") for k in hashed)
    assert bounded_key("a" * 51) == bounded_key("a" * 51)
    assert len(bounded_key("x" * 500, 200)) <= 200
    with pytest.raises(ValueError, match="cannot hold a digest"):
        bounded_key("k", 10)
