"""The thread readers against the fake Slack and Feishu APIs, through the real SDKs.

Why this way: paging (`conversations.replies`' cursor, Feishu's `page_token`), the page bound,
who the bot is and what a refusal becomes are protocol behaviour, so each reader talks to the
loopback fakes (`tests/fakes/slack_api.py`, `tests/fakes/feishu_api.py`) with slack_sdk and
lark-oapi, and the assertions read what came back and what the fakes recorded.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from pydantic import SecretStr
from slack_sdk.web.async_client import AsyncWebClient

from bot.adapters.slack.thread import SlackThreads
from bot.analysis.thread_context import ThreadContext
from bot.errors import PlatformRejected
from bot.events import ChatEvent, Platform
from bot.settings import Settings
from tests.fakes import signing as sg
from tests.fakes.feishu_api import SCOPE_MISSING, FakeFeishuAPI, feishu_error, slow
from tests.fakes.slack_api import FakeSlackAPI, slack_error

CHANNEL = sg.SLACK_CHANNEL_ID


def slack_mention(root: str, ts: str) -> ChatEvent:
    return ChatEvent(
        platform=Platform.SLACK,
        event_id="Ev1",
        workspace=sg.SLACK_TEAM_ID,
        channel=CHANNEL,
        thread=root,
        message_id=ts,
        author=sg.SLACK_USER_ID,
    )


def slack_reader(api: FakeSlackAPI, **bounds: int) -> SlackThreads:
    return SlackThreads(AsyncWebClient(token=api.token, base_url=api.base_url), **bounds)


async def test_slack_pages_through_the_thread_and_names_people_once(
    slack_api: FakeSlackAPI,
) -> None:
    root = sg.slack_ts()
    slack_api.add_app_message(CHANNEL, root, bot_id="B0ALERT", name="Alertmanager", text="alert")
    for i in range(7):
        slack_api.add_message(CHANNEL, sg.slack_ts(), f"reply {i}", thread_ts=root)
    await AsyncWebClient(token=slack_api.token, base_url=slack_api.base_url).chat_postMessage(
        channel=CHANNEL, thread_ts=root, text="the bot's card"
    )
    mention = sg.slack_ts()
    slack_api.add_message(CHANNEL, mention, "<@U> why?", thread_ts=root)
    slack_api.add_message(CHANNEL, sg.slack_ts(), "after the mention", thread_ts=root)
    reader = slack_reader(slack_api, page_size=3)

    thread = await reader.read(slack_mention(root, mention))
    again = await reader.read(slack_mention(root, mention))

    assert [m.text for m in thread.messages] == ["alert", *(f"reply {i}" for i in range(7))]
    assert thread.messages[0].root and thread.messages[0].bot
    assert {m.author for m in thread.messages[1:]} == {"alice"}
    assert thread.not_read == "" and again == thread
    pages = slack_api.calls_to("conversations.replies")
    assert len(pages) == 2 * 3  # the parent and 8 replies before the mention, 3 a page, twice
    assert {p.params["limit"] for p in pages} == {"3"} and pages[0].params["latest"] == mention
    assert len(slack_api.calls_to("auth.test")) == 1
    assert len(slack_api.calls_to("users.info")) == 1


async def test_slack_page_bound_says_what_it_did_not_read(slack_api: FakeSlackAPI) -> None:
    root = sg.slack_ts()
    slack_api.add_message(CHANNEL, root, "root")
    for i in range(10):
        slack_api.add_message(CHANNEL, sg.slack_ts(), f"reply {i}", thread_ts=root)
    mention = sg.slack_ts()

    thread = await slack_reader(slack_api, page_size=2, max_pages=2).read(
        slack_mention(root, mention)
    )

    assert [m.text for m in thread.messages] == ["root", "reply 0", "reply 1", "reply 2"]
    assert thread.not_read == "replies after the first 4"


async def test_slack_refusals_are_platform_errors_naming_the_scope(slack_api: FakeSlackAPI) -> None:
    root, mention = sg.slack_ts(), sg.slack_ts()
    slack_api.add_message(CHANNEL, root, "root")
    slack_api.script("conversations.replies", slack_error("missing_scope", needed="groups:history"))
    reader = slack_reader(slack_api)

    with pytest.raises(PlatformRejected, match="groups:history"):
        await reader.read(slack_mention(root, mention))
    with pytest.raises(PlatformRejected, match="thread_not_found"):
        await reader.read(slack_mention(sg.slack_ts(), mention))


async def test_slack_without_users_read_keeps_ids_and_stops_asking(slack_api: FakeSlackAPI) -> None:
    root, mention = sg.slack_ts(), sg.slack_ts()
    slack_api.add_message(CHANNEL, root, "root", user="U0NONAME1")
    slack_api.script("users.info", slack_error("missing_scope", needed="users:read"))
    reader = slack_reader(slack_api)

    first = await reader.read(slack_mention(root, mention))
    await reader.read(slack_mention(root, mention))

    assert first.messages[0].author == "U0NONAME1"
    assert len(slack_api.calls_to("users.info")) == 1


# --- Feishu ------------------------------------------------------------------------------------

ROOT = "om_root_reader_000000000000000001"


def feishu_reader(api: FakeFeishuAPI, **bounds: int) -> Any:
    from bot.adapters.feishu.thread import FeishuThreads

    settings = Settings(
        _env_file=None,
        FEISHU_APP_ID=sg.FEISHU_APP_ID,
        FEISHU_APP_SECRET=SecretStr(sg.FEISHU_APP_SECRET),
        FEISHU_DOMAIN=api.base_url,
    )
    reader = FeishuThreads.from_settings(settings)
    if bounds:
        reader = FeishuThreads(reader._client, app_id=sg.FEISHU_APP_ID, **bounds)
    return reader


def feishu_mention(message_id: str = "om_mention_reader_00000000000001") -> ChatEvent:
    return ChatEvent(
        platform=Platform.FEISHU,
        event_id="e1",
        workspace=sg.FEISHU_TENANT_KEY,
        channel=sg.FEISHU_CHAT_ID,
        thread=ROOT,
        message_id=message_id,
        author=sg.FEISHU_USER_OPEN_ID,
    )


def seed(api: FakeFeishuAPI, replies: int) -> None:
    api.add_message(ROOT, text="root", sender_name="Alice", create_time_ms=1_000)
    for i in range(replies):
        api.add_message(
            f"om_reply_{i:04d}", root_id=ROOT, text=f"reply {i}", create_time_ms=2_000 + i
        )


async def test_feishu_reads_the_newest_pages_and_says_what_it_left(
    feishu_api: FakeFeishuAPI,
) -> None:
    seed(feishu_api, 7)

    whole = await feishu_reader(feishu_api).read(feishu_mention())
    bounded = await feishu_reader(feishu_api, page_size=2, max_pages=2).read(feishu_mention())

    assert [m.text for m in whole.messages] == ["root", *(f"reply {i}" for i in range(7))]
    assert whole.messages[0].root and whole.messages[0].author == "Alice"
    assert whole.not_read == ""
    # Newest first, two pages of two: the root page is never reached, the root is read first.
    assert [m.text for m in bounded.messages] == [
        "root",
        "reply 3",
        "reply 4",
        "reply 5",
        "reply 6",
    ]
    assert bounded.not_read == "replies before the newest 4"
    listed = feishu_api.calls_to("im.v1.message.list")
    assert {c.query["sort_type"] for c in listed} == {"ByCreateTimeDesc"}
    assert {c.query["with_sender_name"] for c in listed} == {"true"}


async def test_feishu_root_without_a_thread_is_the_whole_context(
    feishu_api: FakeFeishuAPI,
) -> None:
    seed(feishu_api, 0)

    thread = await feishu_reader(feishu_api).read(feishu_mention())

    assert [m.text for m in thread.messages] == ["root"]
    assert feishu_api.calls_to("im.v1.message.list") == []


async def test_feishu_refusals_are_platform_errors(feishu_api: FakeFeishuAPI) -> None:
    seed(feishu_api, 2)
    feishu_api.script("im.v1.message.list", feishu_error(SCOPE_MISSING, "Access denied."))

    with pytest.raises(PlatformRejected, match=str(SCOPE_MISSING)):
        await feishu_reader(feishu_api).read(feishu_mention())


async def test_feishu_read_past_its_timeout_sends_no_further_page(
    feishu_api: FakeFeishuAPI,
) -> None:
    seed(feishu_api, 6)
    feishu_api.script("im.v1.message.list", slow(30))  # the first page is answered late
    reader = feishu_reader(feishu_api, page_size=1, max_pages=5)
    loop = asyncio.get_running_loop()
    workers = ThreadPoolExecutor()  # the read's worker threads, to wait for them to end
    loop.set_default_executor(workers)

    context = await ThreadContext({Platform.FEISHU: reader}, timeout_s=1.0).read(feishu_mention())
    assert "took over 1 s" in context.note
    sent = len(feishu_api.calls_to("im.v1.message.list"))
    loop.set_default_executor(ThreadPoolExecutor())
    feishu_api.reset()  # the late page is answered now; its calls are forgotten
    await asyncio.to_thread(workers.shutdown, wait=True)

    assert sent <= 1
    assert feishu_api.calls_to("im.v1.message.list") == []  # no page after the timeout
