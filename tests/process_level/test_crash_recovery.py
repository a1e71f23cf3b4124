"""Workers that die, pause or race over the turns stream (docs/reliability.md Q5–Q9).

Why this way: each row is about processes and the real stream, so the tests run `chatops
serve` and `chatops worker` processes against one real Redis, stop or kill them with real
signals (or with a failpoint, `CHATOPS_FAILPOINTS`), and read the outcome where it shows: the
settles book, the pending list, the thread's card on the fake Slack API and the requests the
fake provider and the slow service received. Marked slow: they start processes.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest

from bot.keys import BotKeys
from bot.state.settle import Book
from bot.worker.process import MAX_DELIVERIES
from tests.deployment import Deployment, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.processes import Chatops
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = pytest.mark.slow

KEYS = BotKeys()


async def test_q5_a_paused_worker_that_wakes_after_a_takeover_changes_nothing(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    zombie, session, thread = await _pause_the_holder_until_taken_over(
        deployment, fake_llm, slow_service
    )
    slow_service.release("db")
    completed = await deployment.next_settle()
    assert completed.reason == "completed", completed
    await deployment.released(session)
    shown_before = len(slack_api.calls)

    zombie.signal(signal.SIGCONT)  # wakes with a tool result for a turn it no longer holds
    await zombie.wait_for_line("not acknowledged")  # its XACK was refused
    settles: Any = await deployment.redis.xrange(KEYS.book(Book.SETTLES))
    assert len(settles) == 1  # its settle was refused
    assert len(fake_llm.requests) == 2  # it did not go on with the model
    late = [
        c
        for c in slack_api.calls[shown_before:]
        if c.status == 200 and c.operation.startswith("chat.")
    ]
    assert late == []  # its card updates were refused
    final = final_card(slack_api, thread)
    assert "Taken over" in card_text(final) and not stop_buttons(final)


async def test_q5_a_paused_worker_that_wakes_while_the_new_holder_runs_cannot_ack_its_entry(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    zombie, session, thread = await _pause_the_holder_until_taken_over(
        deployment, fake_llm, slow_service
    )
    zombie.signal(signal.SIGCONT)  # the new holder (B) is still waiting on its probe
    await zombie.wait_for_line("not acknowledged")  # an unfenced XACK would drop B's entry
    summary: Any = await deployment.redis.xpending(KEYS.turns_stream, KEYS.turns_group)
    assert summary["pending"] == 1  # still B's to acknowledge
    assert await deployment.holder(session) is not zombie

    slow_service.release("db")
    completed = await deployment.next_settle()
    assert completed.reason == "completed", completed
    await deployment.released(session)
    assert len(fake_llm.requests) == 2
    assert await deployment.redis.xlen(KEYS.turns_stream) == 0  # B acknowledged it
    shown = [card_text(c) for c in slack_api.calls_to("chat.update") if c.status == 200]
    assert not any("Failed" in text or "Interrupted" in text for text in shown)
    final = final_card(slack_api, thread)
    assert "Taken over" in card_text(final) and not stop_buttons(final)


async def _pause_the_holder_until_taken_over(
    deployment: Deployment, fake_llm: fp.FakeProvider, slow_service: SlowService
) -> tuple[Chatops, str, str]:
    """Two workers; SIGSTOP the one running a held probe until the other runs it again."""
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("Taken over: the database answered."),
    )
    await deployment.start(workers=2)
    thread = sg.slack_ts()
    session = slack_session(thread)
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    zombie = await deployment.holder(session)
    zombie.signal(signal.SIGSTOP)  # paused past its lease: the other worker (B) takes over
    await slow_service.wait_for_hits(2)  # the interrupted read-only probe runs again there
    return zombie, session, thread


async def test_q6_of_two_idle_workers_exactly_one_takes_an_abandoned_entry_over(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("Recovered once."),
    )
    await deployment.start(workers=1, first_worker_env={"CHATOPS_FAILPOINTS": "after_tool_result"})
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    assert await asyncio.to_thread(deployment.workers[0].proc.wait, 20) == -9
    racers = [await deployment.add_worker(), await deployment.add_worker()]

    settled = await deployment.next_settle()
    assert settled.reason == "completed", settled
    await deployment.released(slack_session(thread))
    assert sum("resuming turn" in w.log for w in racers) == 1
    assert [r.status for r in fake_llm.requests] == [200, 200]
    assert len(slow_service.hits) == 1
    assert len(cards_in(slack_api, thread)) == 1


async def test_q8_a_job_longer_than_the_lease_ttl_is_not_taken_over_while_its_worker_lives(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("Slow but single."),
    )
    await deployment.start(workers=2)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    ttl_s = float(deployment.env["CHATOPS_LEASE_TTL_S"])
    await asyncio.sleep(4 * ttl_s)  # the idle worker looks for abandoned entries each TTL
    pending: Any = await deployment.redis.xpending_range(
        KEYS.turns_stream, KEYS.turns_group, min="-", max="+", count=10
    )
    assert [p["times_delivered"] for p in pending] == [1]  # never run by the other
    # and never even claimed by it: its worker kept the entry's idle time fresh (a claim of a
    # busy session's entry is given back with a log line, and its count set back)
    assert not any("is busy: left pending" in w.log for w in deployment.workers)
    slow_service.release("db")

    settled = await deployment.next_settle()
    assert settled.reason == "completed", settled
    await deployment.released(slack_session(thread))
    assert len(slow_service.hits) == 1 and len(fake_llm.requests) == 2
    assert not any("resuming turn" in w.log for w in deployment.workers)
    assert "Slow but single" in card_text(final_card(slack_api, thread))


async def test_q9_an_entry_deleted_while_pending_ends_its_card_as_interrupted(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("never shown"),
    )
    armed = {"CHATOPS_FAILPOINTS": "after_model_response"}
    await deployment.start(workers=1, first_worker_env=armed, scheduler_interval=0.5)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    assert await asyncio.to_thread(deployment.workers[0].proc.wait, 20) == -9
    pending: Any = await deployment.redis.xpending_range(
        KEYS.turns_stream, KEYS.turns_group, min="-", max="+", count=10
    )
    await deployment.redis.xdel(KEYS.turns_stream, pending[0]["message_id"])  # trimmed
    survivor = await deployment.add_worker()

    settled = await deployment.next_settle()
    assert settled.reason == "failed" and "interrupted" in (settled.error or ""), settled
    # the reaper settles after the card is shown: the settle is its last word
    assert "Interrupted" in card_text(final_card(slack_api, thread))
    await survivor.wait_for_line("deleted while pending")
    summary: Any = await deployment.redis.xpending(KEYS.turns_stream, KEYS.turns_group)
    assert summary["pending"] == 0  # the lost entry no longer sits in the pending list
    assert len(fake_llm.requests) == 1 and slow_service.hits == []  # nothing ran again


async def test_q7_a_job_that_kills_every_worker_is_dead_lettered_and_its_card_fails(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(  # every delivery gets as far as the model's answer, and dies there
        *[
            fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})])
            for _ in range(MAX_DELIVERIES)
        ]
    )
    armed = {"CHATOPS_FAILPOINTS": "after_model_response"}
    await deployment.start(workers=1, first_worker_env=armed)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    deaths = 0
    while await _died_before_a_dead_letter(deployment, deployment.workers[-1]):
        deaths += 1  # killed by the job; the next worker takes it over once the lease expired
        assert deaths <= MAX_DELIVERIES, "the job was never set aside"
        await deployment.add_worker(armed)

    settled = await deployment.next_settle()
    assert settled.reason == "failed" and "could not be run" in (settled.error or ""), settled
    await deployment.released(slack_session(thread))
    letters: Any = await deployment.redis.xrange(KEYS.dead_letters)
    ((_, dead),) = letters
    assert int(dead[b"deliveries"]) > MAX_DELIVERIES
    assert len(fake_llm.requests) == deaths  # the delivery that set it aside ran nothing
    assert len(cards_in(slack_api, thread)) == 1  # every worker, the last one too, on one card
    assert await deployment.redis.xlen(KEYS.turns_stream) == 0
    final = final_card(slack_api, thread)
    assert "Failed" in card_text(final) and not stop_buttons(final)


async def _died_before_a_dead_letter(deployment: Deployment, worker: Chatops) -> bool:
    """Wait until `worker` dies (True) or a job is dead-lettered (False)."""
    async with asyncio.timeout(30):
        while worker.proc.poll() is None:
            if await deployment.redis.xread({KEYS.dead_letters: "0-0"}, count=1, block=200):
                return False
    assert worker.proc.returncode == -9, worker.log
    return True


async def test_q7_an_entry_waiting_for_its_busy_session_is_not_counted_as_a_delivery(
    deployment, fake_llm, slack_api
) -> None:
    fake_llm.script(fp.TextReply("Ran once its session was free."))
    await deployment.start(workers=0)
    thread = sg.slack_ts()
    session = slack_session(thread)
    await deployment.slack(sg.slack_app_mention(ts=thread))
    # its worker died right after reading it, and the session is busy with another holder
    await deployment.redis.xreadgroup(KEYS.turns_group, "ghost", {KEYS.turns_stream: ">"})
    await deployment.redis.set(KEYS.live_turn(session), "99|elsewhere|turn-x", px=60_000)
    worker = await deployment.add_worker()
    await worker.wait_for_line("is busy: left pending")  # claimed, and given back
    pending: Any = await deployment.redis.xpending_range(
        KEYS.turns_stream, KEYS.turns_group, min="-", max="+", count=10
    )
    assert [p["times_delivered"] for p in pending] == [1]
    await deployment.redis.delete(KEYS.live_turn(session))  # the session frees up

    settled = await deployment.next_settle()
    assert settled.reason == "completed", settled
    await deployment.released(session)
    assert "Ran once" in card_text(final_card(slack_api, thread))
