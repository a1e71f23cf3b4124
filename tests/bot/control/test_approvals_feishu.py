"""Approve and Deny presses on a Feishu card (docs/reliability.md F13, A4).

Why this way: the Slack presses are proven in `tests/bot/control/test_approvals.py`; Feishu's differ
in transport (an encrypted, signed `card.action.trigger` callback at `/feishu/card`, answered
with a toast) and in how a replay is caught (the nonce, then the event id). So the whole bot
runs in process with Feishu configured: the worker posts its card to the fake Feishu Open API
through lark-oapi, the test reads the buttons from the API calls the fake recorded, and presses
them with callbacks encrypted and signed as Feishu does. The tool is a real MCP server over
stdio declared `side_effect`; it journals every call it receives, so "nothing ran" and "it ran
once" are read from the server, not from our own bookkeeping.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr

from agent_core import validate_history
from agent_core._approvals import Approval, Verdict
from agent_core._keys import Keys
from agent_core._store import HistoryStore
from bot.events import Platform, session_id_for
from bot.settings import Settings
from cards._feishu import HEADER_TEMPLATES
from cards._model import CardStatus
from tests.bot.control.test_approvals import RESTART, mcp_settings, restarts
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.feishu_api import FakeFeishuAPI
from tests.inprocess_bot import Bot

ENCRYPT_KEY = "approvals-feishu-encrypt-key-0123"
TOKEN = "approvals-feishu-verification-token"
RESPONDER = "ou_fakeresponder00000000000000000r1"
OUTSIDER = "ou_fakeoutsider000000000000000000o1"
ROOT = "om_root_approval_0000000000000000001"
SESSION = session_id_for(Platform.FEISHU, sg.FEISHU_TENANT_KEY, sg.FEISHU_CHAT_ID, ROOT)


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


@pytest.fixture
def bot_settings(bot_settings: Settings, feishu_api: FakeFeishuAPI, journal: Path) -> Settings:
    """The in-process bot with Feishu configured, a `side_effect` MCP tool and one responder."""
    with_feishu = bot_settings.model_copy(
        update={
            "feishu_app_id": sg.FEISHU_APP_ID,
            "feishu_app_secret": SecretStr(sg.FEISHU_APP_SECRET),
            "feishu_encrypt_key": SecretStr(ENCRYPT_KEY),
            "feishu_verification_token": SecretStr(TOKEN),
            "feishu_domain": feishu_api.base_url,
        }
    )
    # A bare id, as written before ids were qualified: it matches on Feishu (`bot.people`).
    return mcp_settings(with_feishu, journal, "side_effect", CHATOPS_RESPONDERS=RESPONDER)


def sealed(payload: dict[str, Any], *, nonce: str | None = None) -> tuple[bytes, dict[str, str]]:
    return sg.feishu_request(
        payload, encrypt_key=ENCRYPT_KEY, verification_token=TOKEN, nonce=nonce
    )


async def send(bot: Bot, path: str, request: tuple[bytes, dict[str, str]]) -> dict[str, Any]:
    """POST a sealed request to the ingress; its JSON answer (the status must be 200)."""
    body, headers = request
    response: httpx.Response = await bot.http.post(path, content=body, headers=headers)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def card_states(api: FakeFeishuAPI) -> tuple[str, list[dict[str, Any]]]:
    """The bot's one card in the thread: its message id and every state sent, oldest first."""
    (posted,) = [c for c in api.calls_to("im.v1.message.reply") if c.status == 200]
    assert posted.path_params["message_id"] == ROOT
    message_id = str(posted.response["data"]["message_id"])
    patches = [
        c
        for c in api.calls_to("im.v1.message.patch")
        if c.path_params["message_id"] == message_id and c.status == 200
    ]
    return message_id, [json.loads(c.params["content"]) for c in [posted, *patches]]


def callback_values(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The callback values of the card's buttons, by `value.action`."""
    return {
        behavior["value"]["action"]: behavior["value"]
        for element in card["body"]["elements"]
        if element.get("tag") == "button"
        for behavior in element.get("behaviors", [])
        if behavior.get("type") == "callback"
    }


def card_text(card: dict[str, Any]) -> str:
    return "\n".join(str(e.get("content", "")) for e in card["body"]["elements"])


def approval_press(value: dict[str, Any], card_id: str, operator: str) -> dict[str, Any]:
    return sg.feishu_card_action(value=value, open_message_id=card_id, operator_open_id=operator)


async def the_record(redis: aioredis.Redis) -> Approval:
    (raw,) = await redis.hvals(Keys().approvals(SESSION))
    return Approval.from_json(raw)


async def test_f13_presses_on_the_feishu_card_decide_the_waiting_call(
    bot, fake_llm, feishu_api, redis_client, journal
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall(RESTART, {"pod": "checkout-7f9"})]),
        fp.TextReply("Restarted checkout."),
    )
    await bot.start_worker()
    await send(bot, "/feishu/events", sealed(sg.feishu_message_receive(message_id=ROOT)))
    await bot.worker.wait_finished(1)  # the turn settled "awaiting"; the worker is free

    card_id, states = card_states(feishu_api)
    waiting = states[-1]
    assert waiting["header"]["template"] == HEADER_TEMPLATES[CardStatus.AWAITING_APPROVAL]
    assert RESTART in card_text(waiting) and "checkout-7f9" in card_text(waiting)
    values = callback_values(waiting)
    assert {"approve", "deny", "stop"} <= set(values)
    assert values["approve"]["thread"] == ROOT and values["approve"]["call"]
    assert restarts(journal) == 0 and len(fake_llm.requests) == 1

    # A person who is not a responder: refused, told why, and the call keeps waiting.
    outsider = sealed(approval_press(values["approve"], card_id, OUTSIDER), nonce="n-outsider")
    refused = await send(bot, "/feishu/card", outsider)
    assert refused["toast"]["content"] == "Not accepted: only a responder may approve this call."
    # The same callback again (same nonce): a replay, answered without reaching the desk.
    assert "toast" not in await send(bot, "/feishu/card", outsider)
    record = await the_record(redis_client)
    assert record.verdict is Verdict.PENDING
    assert list(record.refusals) == [f"feishu:{OUTSIDER}: only a responder may approve this call"]
    assert restarts(journal) == 0 and len(fake_llm.requests) == 1

    press = approval_press(values["approve"], card_id, RESPONDER)
    approved = await send(bot, "/feishu/card", sealed(press, nonce="n-responder"))
    assert approved["toast"]["content"].startswith("Approved")
    await bot.worker.wait_finished(2)  # the continuation ran the call and the model answered

    # Replays of the approving callback: the same nonce, then the same event freshly signed.
    for again in (sealed(press, nonce="n-responder"), sealed(press)):
        answer = await send(bot, "/feishu/card", again)
        assert "Approved" not in json.dumps(answer)
    assert restarts(journal) == 1
    assert len(fake_llm.requests) == 2 and fake_llm.requests[1].status == 200
    record = await the_record(redis_client)
    assert record.verdict is Verdict.APPROVED and record.decided_by == f"feishu:{RESPONDER}"
    validate_history(await HistoryStore(redis_client).load(SESSION))

    final_id, final_states = card_states(feishu_api)
    final = final_states[-1]
    assert final_id == card_id  # the same card, answered in place
    assert final["header"]["template"] == HEADER_TEMPLATES[CardStatus.ANSWERED]
    assert "Restarted checkout." in card_text(final)
    # No Approve, Deny or Stop left on it: only the answer's "Mark answer wrong".
    assert set(callback_values(final)) == {"wrong"}

    # A press on a decided call changes nothing, and says so.
    late = approval_press(values["deny"], card_id, RESPONDER)
    decided = await send(bot, "/feishu/card", sealed(late))
    assert decided["toast"]["content"] == "Already decided (approved)."
    assert restarts(journal) == 1
