"""The audit trail and the replay timeline, checked against what the fakes recorded.

Why this way: the audit is only worth reading if it agrees with what really happened, so the
analysis runs through the in-process bot (the real ingress and worker, the fake OpenAI provider
and the fake Slack Web API over HTTP, one real Redis), and the trail is compared with the
fakes' own records: requests the provider served, the call ids it handed out, the card states
Slack was sent. The CLI is run through typer's runner against the same Redis. Times are only
compared with each other, never with the wall clock.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from bot.cli.main import app
from bot.events import session_id_for
from bot.keys import BotKeys
from bot.ops.replay_text import describe, lane_of
from bot.state.audit import TEXT_CHARS, AuditEvent, AuditLog, clip, in_analysis, read_audit
from cards._lines import STATUS_ICONS
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.slack_view import blocks, cards_in, final_card, stop_buttons, updates_of

KEYS = BotKeys()
STEER = "it's the gateway, not the db"


def probe(service: SlowService, name: str, call_id: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": service.url(f"/hold/{name}")}, id=call_id)


def session_of(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


def slack_statuses(slack_api: Any, thread: str) -> list[str]:
    """The card's status, per post or update Slack took, with repeats folded."""
    (posted,) = cards_in(slack_api, thread)
    shown = [posted, *updates_of(slack_api, posted.response["ts"])]
    statuses: list[str] = []
    for call in shown:
        status = _status_of(call)
        if not statuses or statuses[-1] != status:
            statuses.append(status)
    return statuses


def _status_of(call: Any) -> str:
    # The status line of a Slack card starts with its status's icon, then the bold label.
    text = json.dumps(blocks(call), ensure_ascii=False)
    (status,) = [s.value for s, icon in STATUS_ICONS.items() if f"{icon} *" in text]
    return status


async def steered_then_stopped(bot, fake_llm, slack_api, slow_service) -> tuple[str, str]:
    """Run one analysis: two probes, a steer mid-batch, two more, a Stop mid-batch."""
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n, f"call_{n}") for n in ("db", "cache")]),
        fp.ToolCallsReply([probe(slow_service, n, f"call_{n}") for n in ("gw", "lb")]),
        fp.TextReply("never sent"),
    )
    thread = sg.slack_ts()
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(2)
    await bot.post(sg.slack_message(text=STEER, thread_ts=thread))
    await slow_service.wait_for_hits(4)
    (posted,) = cards_in(slack_api, thread)
    (button,) = stop_buttons(posted)
    await bot.press(
        sg.slack_block_actions(
            action_id=button["action_id"],
            value=button["value"],
            message_ts=posted.response["ts"],
            thread_ts=thread,
        )
    )
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    return thread, button["value"]


async def test_a_steered_then_stopped_analysis_is_audited_in_order(
    bot, fake_llm, slack_api, slow_service, redis_client
) -> None:
    thread, root = await steered_then_stopped(bot, fake_llm, slack_api, slow_service)
    session = session_of(thread)
    events = await read_audit(redis_client, session, root)
    kinds = [e.kind for e in events]

    # Every model request the provider saw, numbered per turn, with the messages it was sent.
    requests = [e for e in events if e.kind == "model_request"]
    assert len(requests) == len(fake_llm.requests) == 2
    assert [r.data["messages"] for r in requests] == [len(r.messages) for r in fake_llm.requests]
    responses = [e for e in events if e.kind == "model_response"]
    assert [[c["id"] for c in r.data["calls"]] for r in responses] == [
        ["call_db", "call_cache"],
        ["call_gw", "call_lb"],
    ]
    assert all(
        r.data["prompt_tokens"] == 10 and r.data["completion_tokens"] == 5 for r in responses
    )

    # Each call the audit names is one the provider handed out; the steered batch's calls and
    # results were sent back to it in the follow-up request.
    calls = [e.data["id"] for e in events if e.kind == "tool_call"]
    assert calls == ["call_db", "call_cache", "call_gw", "call_lb"]
    sent_back = json.dumps(fake_llm.requests[1].messages)
    assert all(call in sent_back for call in calls[:2])
    results = {e.data["id"]: e.data["status"] for e in events if e.kind == "tool_result"}
    assert set(results) == set(calls)
    assert {results["call_gw"], results["call_lb"]} == {"interrupted"}

    # The people: the steer with its text and author, then the stop with its author.
    people = [e for e in events if lane_of(e.kind) == "people"]
    assert [(p.kind, p.who) for p in people] == [
        ("steer", f"slack:{sg.SLACK_USER_ID}"),  # people are platform-qualified (X10)
        ("stop", f"slack:{sg.SLACK_USER_ID}"),
    ]
    assert people[0].data == {"text": STEER}

    # The order: each turn starts, asks, calls; the steer comes before the cut that took it,
    # and the cut after the batch closed; the stop comes before the second batch's results.
    first, second = root, f"{root}.1"
    assert [e.turn for e in events if e.kind == "turn_start"] == [first, second]
    cuts = [(e.turn, e.data["site"], e.data["signal"]) for e in events if e.kind == "cut"]
    assert cuts == [(first, "start", ""), (first, "batch_closed", "steer"), (second, "start", "")]
    steer_at, cut_at = kinds.index("steer"), kinds.index("cut", kinds.index("cut") + 1)
    assert kinds.index("model_request") < kinds.index("tool_call") < steer_at < cut_at
    closed = max(i for i, e in enumerate(events) if e.kind == "balance" and e.turn == first)
    assert events[closed].data == {"balance": 0} and closed < cut_at
    assert kinds.index("stop") < max(i for i, k in enumerate(kinds) if k == "tool_result")
    balances = [e.data["balance"] for e in events if e.kind == "balance"]
    assert balances == [2, 1, 0, 2, 1, 0]

    # One settle per turn, with its reason; the cards' statuses as Slack was sent them.
    settles = [(e.turn, e.data["reason"]) for e in events if e.kind == "settle"]
    assert settles == [(first, "steered"), (second, "stopped")]
    # The provider reported its usage, so the booked tokens are not marked as estimated.
    assert [e.data["usage_estimated"] for e in events if e.kind == "settle"] == [False, False]
    cards = [e.data["status"] for e in events if e.kind == "card"]
    assert cards == slack_statuses(slack_api, thread)
    assert cards[0] == "working" and cards[-1] == "stopped"
    assert kinds[-1] in ("settle", "card")

    # Stamped in order; the whole session's trail holds nothing the analysis's leaves out.
    assert [e.ts for e in events] == sorted(e.ts for e in events)
    assert await read_audit(redis_client, session) == events
    assert final_card(slack_api, thread)  # one card, as the statuses assumed


async def test_the_cli_exports_jsonl_that_round_trips_and_replays_lanes_and_cuts(
    bot, fake_llm, slack_api, slow_service, redis_client, redis_server, monkeypatch
) -> None:
    thread, root = await steered_then_stopped(bot, fake_llm, slack_api, slow_service)
    session = session_of(thread)
    monkeypatch.setenv("REDIS_URL", redis_server)
    runner = CliRunner()

    async def invoke(*args: str) -> Result:
        # In a thread: the commands run their own event loop, as they do from a shell.
        return await asyncio.to_thread(runner.invoke, app, list(args))

    exported = await invoke("audit", session, "--turn", root)
    assert exported.exit_code == 0, exported.output
    lines = exported.output.splitlines()
    parsed = [AuditEvent.model_validate_json(line) for line in lines]
    assert parsed == await read_audit(redis_client, session, root)
    assert [json.loads(line) for line in lines] == [e.model_dump(mode="json") for e in parsed]

    replayed = await invoke("replay", session, "--turn", root)
    assert replayed.exit_code == 0, replayed.output
    out = replayed.output
    for lane in ("model", "tools", "people", "system"):
        assert f" {lane} " in out
    assert "✂ cut at batch_closed: steer" in out
    assert "✂ cut at start: -" in out
    assert f"steer: {STEER} (by slack:{sg.SLACK_USER_ID})" in out
    assert "settled stopped" in out
    by_turn = await invoke("replay", root)  # the turn id alone: `chatops replay <session|turn>`
    assert by_turn.exit_code == 0, by_turn.output
    assert "✂ cut at batch_closed: steer" in by_turn.output and "settled stopped" in by_turn.output

    table = await invoke("audit", session, "--format", "table")
    assert table.exit_code == 0 and "model_request" in table.output
    unknown = await invoke("audit", "slack-nothing-here")
    assert unknown.exit_code == 1 and "nothing recorded" in unknown.output


async def test_a_turn_filter_keeps_the_analysis_and_the_people_during_it(redis_client) -> None:
    audit = AuditLog(redis_client)

    def at(ts: float, turn: str, kind: str) -> AuditEvent:
        return AuditEvent(ts=ts, session="s1", turn=turn, kind=kind)

    written = [
        at(1.0, "t1", "turn_start"),
        at(2.0, "", "steer"),
        at(3.0, "t1.1", "turn_start"),
        at(4.0, "t10", "turn_start"),  # another analysis, whose id only starts the same
        at(5.0, "t1.1.2", "settle"),
        at(6.0, "", "steer"),  # after the analysis ended
    ]
    await audit.record_many(reversed(written))  # written late: read back in time order
    assert [e.ts for e in await audit.read("s1")] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [e.ts for e in await audit.read("s1", "t1")] == [1.0, 2.0, 3.0, 5.0]
    assert [e.ts for e in await audit.read("s1", "t10")] == [4.0]
    assert await audit.read("s1", "t2") == []
    assert in_analysis("t1.1.2", "t1") and not in_analysis("t10", "t1")


async def test_the_stream_is_capped_and_expires(redis_client) -> None:
    audit = AuditLog(redis_client, maxlen=10, retention_s=60)
    await audit.record_many(
        AuditEvent(ts=float(i), session="capped", turn="t", kind="balance", data={"balance": i})
        for i in range(500)
    )
    key = KEYS.audit("capped")
    assert key == "{chatops}:capped:audit"
    assert 10 <= await redis_client.xlen(key) < 500  # `~`: trimmed by whole nodes
    assert 0 < await redis_client.ttl(key) <= 60


async def test_a_failed_write_is_counted_and_never_raised(redis_client) -> None:
    await redis_client.set(KEYS.audit("wrongtype"), "a string, not a stream")
    audit = AuditLog(redis_client)
    await audit.record(AuditEvent(ts=1.0, session="wrongtype", turn="t", kind="stop"))
    assert audit.failures == 1


def test_texts_are_redacted_and_cut() -> None:
    secret = "postgres://app:hunter2@db:5432/x"
    assert "hunter2" not in clip(f"connecting to {secret}")
    long = clip("x" * (TEXT_CHARS * 2))
    assert len(long) == TEXT_CHARS and long.endswith("…")


@pytest.mark.parametrize(
    ("kind", "data", "shown"),
    [
        (
            "cut",
            {"site": "batch_closed", "signal": "stop", "balance": 0},
            "✂ cut at batch_closed: stop",
        ),
        (
            "approval",
            {"call_id": "c1", "tool": "restart", "verdict": "approved"},
            "approved restart",
        ),
        ("killswitch", {"on": True}, "kill switch on"),
        (
            "settle",
            {"reason": "completed", "prompt_tokens": 120, "completion_tokens": 30},
            "settled completed [120+30 tok]",
        ),
        (
            "settle",
            {
                "reason": "completed",
                "prompt_tokens": 120,
                "completion_tokens": 30,
                "usage_estimated": True,
            },
            "settled completed [120+30 tok, estimated]",
        ),
        ("something_new", {"a": 1}, 'something_new: {"a": 1}'),
    ],
)
def test_each_kind_reads_as_one_line(kind: str, data: dict[str, Any], shown: str) -> None:
    assert describe(kind, "", data).startswith(shown)
    assert describe(kind, "U1", data).endswith("(by U1)")
