"""The end-to-end turn across processes: `chatops serve`, `chatops worker`, `chatops scheduler`.

Why this way: the deployment runs the ingress, the workers and the scheduler as separate
processes that share only Redis; what must hold (one card, true to the end; nothing after a stop;
no card left "in progress" when a worker is killed) has to hold across them, with real signals.
Requests reach `chatops serve` over HTTP, signed (and for Feishu encrypted) as the platforms do;
the processes reach the fake OpenAI provider, the fake Slack and Feishu APIs and the slow service
over loopback. Waits are on Redis streams (`XREAD BLOCK` on the settles book), never on sleeps.
Marked slow: each test starts processes.
"""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from bot.events import session_id_for
from bot.ops.reaper import INTERRUPTED_ERROR
from tests.deployment import KEYS, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.feishu_api import FakeFeishuAPI
from tests.fakes.service import SlowService
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = pytest.mark.slow


def feishu_session(root: str) -> str:
    return session_id_for("feishu", sg.FEISHU_TENANT_KEY, sg.FEISHU_CHAT_ID, root)


def probe(service: SlowService, name: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": service.url(f"/hold/{name}")})


async def test_slack_mention_steer_mid_batch_then_answer(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("db", "cache", "queue")]),
        fp.TextReply("The gateway is dropping connections."),
    )
    await deployment.start()
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(3)
    await deployment.slack(sg.slack_message(text="it's the gateway, not the db", thread_ts=thread))

    first, second = await deployment.next_settle(), await deployment.next_settle()
    assert (first.reason, first.final_event_id) == ("steered", "")
    assert second.reason == "completed" and second.final_event_id
    await deployment.released(slack_session(thread))
    sent = fake_llm.requests[1].messages
    assert [m["role"] for m in sent][-5:] == ["assistant", "tool", "tool", "tool", "user"]
    assert "gateway, not the db" in sent[-1]["content"]
    assert len(cards_in(slack_api, thread)) == 1
    assert stop_buttons(cards_in(slack_api, thread)[0])
    final = final_card(slack_api, thread)
    assert not stop_buttons(final)
    assert "redirected" in card_text(final) and "Answered" in card_text(final)
    assert slack_api.thread_status(sg.SLACK_CHANNEL_ID, thread) in (None, "")


async def test_slack_stop_button_mid_batch(deployment, fake_llm, slack_api, slow_service) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("a", "b")]),
        fp.TextReply("never sent"),
    )
    await deployment.start()
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(2)
    (posted,) = cards_in(slack_api, thread)
    (button,) = stop_buttons(posted)
    await deployment.slack_press(
        sg.slack_block_actions(
            action_id=button["action_id"],
            value=button["value"],
            message_ts=posted.response["ts"],
            thread_ts=thread,
        )
    )
    settled = await deployment.next_settle()
    assert settled.reason == "stopped"
    await deployment.released(slack_session(thread))
    assert len(fake_llm.requests) == 1 and len(slow_service.hits) == 2
    final = final_card(slack_api, thread)
    assert not stop_buttons(final) and "Stopped" in card_text(final)


def feishu_cards(api: FakeFeishuAPI) -> list[dict[str, Any]]:
    return api.bot_messages(sg.FEISHU_CHAT_ID)


def feishu_card(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("body", {}).get("content") or message.get("content")
    assert isinstance(content, str)
    parsed: dict[str, Any] = json.loads(content)
    return parsed


def feishu_stop_value(card: dict[str, Any]) -> dict[str, Any] | None:
    text = json.dumps(card, ensure_ascii=False)
    if '"action": "stop"' not in text:
        return None

    def find(node: Any) -> dict[str, Any] | None:
        if isinstance(node, dict):
            for behavior in node.get("behaviors", []) or []:
                value = behavior.get("value")
                if isinstance(value, dict) and value.get("action") == "stop":
                    return value
            for child in node.values():
                if (found := find(child)) is not None:
                    return found
        if isinstance(node, list):
            for child in node:
                if (found := find(child)) is not None:
                    return found
        return None

    return find(card)


async def test_feishu_mention_steer_then_answer_and_stop_from_the_card(
    deployment, fake_llm, feishu_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("db", "cache")]),
        fp.TextReply("The gateway is dropping connections."),
    )
    await deployment.start()
    mention = sg.feishu_message_receive()
    root = mention["event"]["message"]["message_id"]
    await deployment.feishu(mention)
    await slow_service.wait_for_hits(2)
    reply = sg.feishu_message_receive(
        text="it's the gateway", mentions=[], root_id=root, parent_id=root
    )
    await deployment.feishu(reply)
    assert (await deployment.next_settle()).reason == "steered"
    assert (await deployment.next_settle()).reason == "completed"
    await deployment.released(feishu_session(root))
    (message,) = feishu_cards(feishu_api)
    card = feishu_card(feishu_api.message(message["message_id"]) or message)
    text = json.dumps(card, ensure_ascii=False)
    assert feishu_stop_value(card) is None
    assert "redirected" in text and "gateway is dropping" in text

    # A second analysis in another thread, stopped from its card's button.
    fake_llm.script(fp.ToolCallsReply([probe(slow_service, "z")]), fp.TextReply("never"))
    other = sg.feishu_message_receive()
    await deployment.feishu(other)
    await slow_service.wait_for_hits(3)
    newest = feishu_cards(feishu_api)[-1]
    value = feishu_stop_value(feishu_card(newest))
    assert value is not None and value["turn"]
    press = sg.feishu_card_action(value=value, open_message_id=newest["message_id"])
    await deployment.feishu(press, path="/feishu/card")
    assert (await deployment.next_settle()).reason == "stopped"
    assert len(fake_llm.requests) == 3


async def test_c3_a_killed_worker_leaves_no_card_in_progress(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(fp.ToolCallsReply([probe(slow_service, "forever")]))
    await deployment.start(scheduler_interval=0.5)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    assert stop_buttons(cards_in(slack_api, thread)[0])
    deployment.worker.signal(signal.SIGKILL)

    settled = await deployment.next_settle()  # the reaper's, within lease TTL + one sweep
    assert (settled.reason, settled.error) == ("failed", INTERRUPTED_ERROR)
    final = final_card(slack_api, thread)
    assert not stop_buttons(final) and "Interrupted" in card_text(final)
    assert not await deployment.redis.exists(KEYS.live_turn(slack_session(thread)))


async def test_c4_a_killed_workers_turn_resumes_on_another_worker_on_the_same_card(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, "forever")]),
        fp.TextReply("Resumed: the gateway is dropping connections."),
    )
    await deployment.start(scheduler_interval=0.5, workers=2)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    holder = (await deployment.redis.get(KEYS.live_turn(slack_session(thread)))).decode()
    running = next(w for w in deployment.workers if holder.split("|")[1] in w.log)
    running.signal(signal.SIGKILL)

    settled = await deployment.next_settle()  # the other worker's, before the reaper's grace
    assert settled.reason == "completed", settled
    await deployment.released(slack_session(thread))
    assert len(cards_in(slack_api, thread)) == 1  # the same card, not a second one
    final = final_card(slack_api, thread)
    assert "Resumed: the gateway" in card_text(final) and not stop_buttons(final)
