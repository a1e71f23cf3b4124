"""Platform-qualified identities: a console user is never a Slack or Feishu user (X10).

Why this way: the console's bearer token proves only that a console sent the request, so its
`user` is whatever the client writes. The attack is a console token holder who writes a Slack
admin's or responder's id, so the tests send exactly that over HTTP, to the real ingress app
with a real Redis (and, for approvals, a real worker whose destructive tool is a real MCP server
that journals its calls), next to signed Slack requests from the same ids, which must keep
working. How `CHATOPS_ADMINS`/`CHATOPS_RESPONDERS` entries are read is unit-tested at the end,
as is the start-up warning for every bare id.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr, ValidationError

from agent_core._approvals import Approval, Verdict
from agent_core._keys import Keys
from bot.adapters.console.inbound import CONSOLE_WORKSPACE
from bot.control.killswitch import KillSwitch
from bot.events import AuthorKind, ChatEvent, Platform, person_of, session_id_for
from bot.keys import BotKeys
from bot.people import People, parse_people
from bot.settings import Settings
from bot.state.audit import read_audit
from tests.bot.control.test_approvals import RESTART, mcp_settings, restarts
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import Bot, open_bot

TOKEN = "console-identity-token-0000"
CHANNEL = "ops"
SLACK_ADMIN = "U0ADMIN01"
"""Configured bare: it matches on Slack (and Feishu), never on the console."""
QUALIFIED_ADMIN = "U0ADMIN02"
"""Configured `slack:U0ADMIN02`."""
RESPONDER = "U0RESPONDER"


def with_console(settings: Settings, **update: Any) -> Settings:
    return settings.model_copy(update={"console_token": SecretStr(TOKEN), **update})


def console_mention(user: str, text: str) -> dict[str, Any]:
    thread = uuid.uuid4().hex
    return {
        "type": "message",
        "channel": CHANNEL,
        "thread": thread,
        "message_id": thread,
        "user": user,
        "text": text,
        "mention": True,
    }


async def console(bot: Bot, payload: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    response = await bot.console(payload)
    answer: dict[str, Any] = response.json()
    return response.status_code, answer


@pytest.fixture
async def admin_bot(bot_settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Bot]:
    admins = f"{SLACK_ADMIN}, slack:{QUALIFIED_ADMIN}, console:root"
    async with open_bot(with_console(bot_settings, admins=admins), redis_client) as running:
        yield running


async def test_x10_a_console_user_claiming_a_slack_admins_id_cannot_pull_the_kill_switch(
    admin_bot, redis_client
) -> None:
    """X10: `U0ADMIN01` and `slack:U0ADMIN01` from the console are not the Slack admin."""
    switch = KillSwitch(redis_client)
    for claimed in (SLACK_ADMIN, QUALIFIED_ADMIN):
        status, answer = await console(admin_bot, console_mention(claimed, "killswitch on"))
        assert status == 200 and answer["killswitch"] == "refused", answer
        assert not (await switch.state()).on
    for claimed in (f"slack:{SLACK_ADMIN}", f"slack:{QUALIFIED_ADMIN}", "console:root"):
        status, answer = await console(admin_bot, console_mention(claimed, "killswitch on"))
        assert status == 400 and "user" in answer["detail"], answer
        assert not (await switch.state()).on
    assert await redis_client.xlen(BotKeys().turns_stream) == 0  # nothing started either


async def test_x10_the_admins_of_each_platform_keep_their_kill_switch(
    admin_bot, redis_client
) -> None:
    """X10: a bare Slack admin, a qualified one and a console admin each pull it."""
    switch = KillSwitch(redis_client)
    whos = []
    for user in (SLACK_ADMIN, QUALIFIED_ADMIN):
        on = sg.slack_app_mention(text=f"<@{sg.SLACK_BOT_USER_ID}> killswitch on", user=user)
        assert (await admin_bot.post(on)).json()["killswitch"] == "on"
        assert (await switch.state()).on
        await switch.release()
        thread = on["event"]["ts"]
        session = session_id_for(Platform.SLACK, sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)
        whos += [e.who for e in await read_audit(redis_client, session) if e.kind == "killswitch"]
    payload = console_mention("root", "killswitch on")
    status, answer = await console(admin_bot, payload)
    assert status == 200 and answer["killswitch"] == "on"
    state = await switch.state()
    assert state.on and state.by == "root"  # shown as the console wrote it, as before
    session = session_id_for(Platform.CONSOLE, CONSOLE_WORKSPACE, CHANNEL, payload["thread"])
    whos += [e.who for e in await read_audit(redis_client, session) if e.kind == "killswitch"]
    # The record names each person qualified.
    assert whos == [f"slack:{SLACK_ADMIN}", f"slack:{QUALIFIED_ADMIN}", "console:root"]


# -- approvals from the console ---------------------------------------------------------------


def journal_path(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


async def latest_approvals(redis: aioredis.Redis, thread: str) -> list[dict[str, Any]]:
    """The approvals the newest state of the thread's console card shows."""
    raw: Any = await redis.xrange(BotKeys().console_cards)
    cards = [
        json.loads(fields[b"card"]) for _, fields in raw if fields[b"thread"].decode() == thread
    ]
    shown: list[dict[str, Any]] = cards[-1].get("approvals", [])
    return shown


def console_press(thread: str, user: str, value: str) -> dict[str, Any]:
    return {
        "type": "action",
        "channel": CHANNEL,
        "thread": thread,
        "user": user,
        "action": "approve",
        "value": value,
    }


async def test_x10_a_console_user_claiming_a_slack_responders_id_cannot_approve(
    bot_settings, redis_client, fake_llm, tmp_path
) -> None:
    """X10: the console's `U0RESPONDER` is not the Slack responder; `console:carol` is one."""
    journal = journal_path(tmp_path)
    responders = f"{RESPONDER},console:carol"
    settings = mcp_settings(with_console(bot_settings), journal, "side_effect")
    settings = settings.model_copy(update={"responders": responders})
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall(RESTART, {"pod": "checkout-7f9"})]),
        fp.TextReply("Restarted checkout."),
    )
    async with open_bot(settings, redis_client) as bot:
        worker = await bot.start_worker()
        mention = console_mention("alice", "checkout is down, restart it")
        status, _ = await console(bot, mention)
        assert status == 200
        await worker.wait_finished(1)  # suspended: the call waits for a decision
        thread = mention["thread"]
        (shown,) = await latest_approvals(redis_client, thread)
        assert shown["tool"] == RESTART

        status, claimed = await console(bot, console_press(thread, RESPONDER, shown["value"]))
        assert status == 200 and claimed["approval"] == "refused", claimed
        assert "only a responder" in claimed["message"]
        assert restarts(journal) == 0

        status, approved = await console(bot, console_press(thread, "carol", shown["value"]))
        assert status == 200 and approved["approval"] == "approved", approved
        await worker.wait_finished(2)
    assert restarts(journal) == 1
    session = session_id_for(Platform.CONSOLE, CONSOLE_WORKSPACE, CHANNEL, thread)
    (raw,) = await redis_client.hvals(Keys().approvals(session))
    record = Approval.from_json(raw)
    assert record.verdict is Verdict.APPROVED and record.decided_by == "console:carol"
    assert list(record.refusals) == [f"console:{RESPONDER}: only a responder may approve this call"]
    presses = [e.who for e in await read_audit(redis_client, session) if e.kind == "approval"]
    assert presses == [f"console:{RESPONDER}", "console:carol"]


# -- how entries are read ---------------------------------------------------------------------


def test_x10_a_bare_id_matches_on_slack_and_feishu_never_on_the_console() -> None:
    """X10: the documented reading of bare ids (`bot.people`)."""
    people = parse_people(" U0ADMIN01 , feishu:ou_lead, console:root,, ")
    assert people.bare == {"U0ADMIN01"}
    assert people.qualified == {"feishu:ou_lead", "console:root"}
    assert "slack:U0ADMIN01" in people and "feishu:U0ADMIN01" in people
    assert "console:U0ADMIN01" not in people and "subagent:U0ADMIN01" not in people
    assert "U0ADMIN01" not in people  # only qualified ids are compared
    assert "feishu:ou_lead" in people and "slack:ou_lead" not in people
    assert "console:root" in people and "slack:root" not in people
    assert not parse_people("") and not People()


@pytest.mark.parametrize(
    "entry", ["slak:U0123", "scheduler:nightly", "subagent:x", "slack:", "slack: U1", "console:a:b"]
)
def test_x10_an_entry_with_another_qualifier_is_refused_at_start_up(entry: str) -> None:
    """X10: a typo'd or impossible platform is a configuration error, not a silent no-match."""
    with pytest.raises(ValueError, match="is not <platform>:<id>"):
        parse_people(f"slack:U0OK,{entry}")
    for variable in ("CHATOPS_ADMINS", "CHATOPS_RESPONDERS"):
        with pytest.raises(ValidationError, match="is not <platform>:<id>"):
            fields: dict[str, Any] = {variable: entry}
            Settings(_env_file=None, **fields)


def test_x10_every_author_is_qualified_by_its_platform() -> None:
    """X10: `ChatEvent.person` is `platform:id`; a scheduled run is nobody's person."""

    def event(platform: Platform, author: str, kind: AuthorKind = AuthorKind.HUMAN) -> ChatEvent:
        return ChatEvent(
            platform=platform,
            event_id="e",
            workspace="w",
            channel="c",
            thread="t",
            message_id="m",
            author=author,
            author_kind=kind,
        )

    assert event(Platform.SLACK, "U0123").person == "slack:U0123"
    assert event(Platform.FEISHU, "ou_abc").person == "feishu:ou_abc"
    assert event(Platform.CONSOLE, "U0123").person == "console:U0123"
    scheduled = event(Platform.SLACK, "scheduler:nightly", AuthorKind.SCHEDULER)
    assert scheduled.person == "scheduler:nightly"
    # Idempotent for the own platform only: another platform's prefix stays inside the id.
    assert person_of(Platform.SLACK, "slack:U0123") == "slack:U0123"
    assert person_of(Platform.CONSOLE, "slack:U0123") == "console:slack:U0123"


async def test_x10_each_bare_id_is_warned_about_when_the_ingress_starts(
    bot_settings, redis_client, caplog
) -> None:
    """X10: one warning per bare entry of each variable; none for qualified ones."""
    settings = bot_settings.model_copy(
        update={"admins": "U0ADMIN01,slack:U0ADMIN02", "responders": "U0R1,ou_r2,console:carol"}
    )
    with caplog.at_level(logging.WARNING, logger="bot.people"):
        async with open_bot(settings, redis_client):
            pass
    warned = [r.getMessage() for r in caplog.records if r.name == "bot.people"]
    assert len(warned) == 3, warned
    assert any(w.startswith("CHATOPS_ADMINS entry 'U0ADMIN01' has no platform") for w in warned)
    for bare in ("U0R1", "ou_r2"):
        assert any(w.startswith(f"CHATOPS_RESPONDERS entry '{bare}'") for w in warned)
    assert all("never a console user" in w for w in warned)
