"""Progress cards under faults, docs/reliability.md rows C1-C10.

C3 (a SIGKILLed worker) and C4 (its turn resumed on another worker, on the same card) run across
processes in `test_turn_processes.py`. For C9, C3 bounds how long a card can stay live after its
worker died, and the age of the oldest live analysis is exported for an alert.

Why this way: a card is what people trust, so each row is checked where they would look: the
fake Slack Web API's record of posts, updates and status lines, driven through the real ingress,
worker and publisher, with the platform's faults (429, `message_not_found`) scripted on the fake.
Where a row is about two writers (C5, C10), the second writer is a real `CardPublisher` or
`Reaper` built on the same Redis, so the fence is exercised, not assumed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis

from bot.adapters.slack.cards import SlackCards
from bot.analysis.actor import ActorOptions
from bot.events import Platform, session_id_for
from bot.keys import BotKeys
from bot.ops.reaper import Reaper
from bot.publishing.card_publisher import CardPublisher, PublisherOptions
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import CardTarget
from bot.settings import Settings
from bot.state.lease import Leases
from bot.state.settle import Book, SettleWriter
from cards._model import CardStatus, ProgressCard
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.slack_api import FakeSlackAPI, ratelimited, slack_error
from tests.slack_view import card_text, cards_in, final_card, stop_buttons, updates_of

KEYS = BotKeys()


def session_of(thread: str) -> str:
    return session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)


def statuses(api: FakeSlackAPI, thread: str) -> list[str]:
    return [
        str(c.params.get("status"))
        for c in api.calls_to("assistant.threads.setStatus")
        if c.params.get("thread_ts") == thread
    ]


def paced(seconds: float, **kwargs: Any) -> ActorOptions:
    return ActorOptions(publisher=PublisherOptions(min_interval_s=seconds, **kwargs))


async def test_c1_one_placeholder_updates_coalesced_final_answered(
    bot, fake_llm, slack_api, slow_service
) -> None:
    calls = [fp.ToolCall("http_get", {"url": slow_service.url("/ok")}) for _ in range(6)]
    fake_llm.script(fp.ToolCallsReply(calls), fp.TextReply("All six probes are healthy."))
    thread = sg.slack_ts()
    worker = await bot.start_worker(paced(1.0))
    await bot.post(sg.slack_app_mention(ts=thread))
    await worker.wait_finished(1)

    (posted,) = cards_in(slack_api, thread)  # exactly one placeholder
    updates = updates_of(slack_api, posted.response["ts"])
    # 9 card changes (turn start, 6 calls started at once, 6 results, the answer) reach the
    # platform as at most four updates: the instant results coalesce.
    assert 1 <= len(updates) <= 4
    final = final_card(slack_api, thread)
    assert "Answered" in card_text(final) and not stop_buttons(final)


async def test_c2_an_error_in_the_agent_fails_the_card_with_a_short_reason(
    bot, fake_llm, slack_api
) -> None:
    too_long = fp.ErrorReply(
        400, "This model's maximum context length is 8192 tokens.", param="messages"
    )
    fake_llm.script(too_long, too_long)  # the one retry, compacted harder, is refused too
    thread = sg.slack_ts()
    worker = await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await worker.wait_finished(1)
    final = final_card(slack_api, thread)
    text = card_text(final)
    assert "Failed" in text and "context length" in text and not stop_buttons(final)
    assert "Traceback" not in text
    assert statuses(slack_api, thread)[-1] == ""  # the status line is cleared on failure too


async def test_c5_a_stale_writer_never_overwrites_a_final_card(
    slack_api, redis_client: aioredis.Redis
) -> None:
    thread = sg.slack_ts()
    session = session_of(thread)
    target = CardTarget(Platform.SLACK, sg.SLACK_CHANNEL_ID, thread)
    client = SlackCards.from_settings(_slack_settings(slack_api))
    leases = Leases(redis_client, KEYS, ttl_s=30)
    old = await leases.try_acquire(session, "old-worker", "t1")
    assert old is not None
    live = ProgressCard(title="why?", turn_id="t1", thread=thread)
    zombie = CardPublisher(client, CardRecord(redis_client, KEYS, session), target, old.token)
    await zombie.open(live)

    # The old worker's lease is taken over (it was paused); the new holder ends the card.
    await redis_client.delete(KEYS.live_turn(session))
    new = await leases.try_acquire(session, "new-worker", "t1")
    assert new is not None and new.token > old.token
    heir = CardPublisher(client, CardRecord(redis_client, KEYS, session), target, new.token)
    await heir.open(live)
    assert heir.ref == zombie.ref  # the same card, not a second one
    await heir.finish(live.evolve(status=CardStatus.ANSWERED, answer="It was DNS."))

    before = len(slack_api.calls_to("chat.update"))
    zombie.show(live.evolve(status=CardStatus.WORKING))  # the late "in progress"
    await zombie.finish(live.evolve(status=CardStatus.FAILED, error="late"))
    assert len(slack_api.calls_to("chat.update")) == before  # refused before any call
    final = final_card(slack_api, thread)
    assert "It was DNS." in card_text(final) and not stop_buttons(final)
    await client.aclose()


async def test_c6_a_429_on_an_intermediate_edit_is_waited_out(
    bot, fake_llm, slack_api, slow_service
) -> None:
    slack_api.script("chat.update", ratelimited(1))
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("Healthy."),
    )
    thread = sg.slack_ts()
    worker = await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await worker.wait_finished(1)
    rejected = [c for c in slack_api.calls_to("chat.update") if c.status == 429]
    assert len(rejected) == 1
    final = final_card(slack_api, thread)
    assert "Answered" in card_text(final) and "ratelimited" not in card_text(final)


async def test_c7_a_deleted_card_does_not_stop_the_run(bot, fake_llm, slack_api) -> None:
    slack_api.script("chat.update", *[slack_error("message_not_found")] * 2)
    fake_llm.script(fp.TextReply("The answer, posted anew."))
    thread = sg.slack_ts()
    worker = await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await worker.wait_finished(1)
    posts = cards_in(slack_api, thread)
    assert len(posts) == 2  # the card, then the final answer as a new message
    assert "The answer, posted anew." in card_text(posts[-1]) and not stop_buttons(posts[-1])


async def test_c8_the_status_line_is_refreshed_while_working_and_cleared_at_the_end(
    bot, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/s")})]),
        fp.TextReply("Done."),
    )
    thread = sg.slack_ts()
    worker = await bot.start_worker(paced(0.05, status_refresh_s=0.1))
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    await slack_api.wait_for_calls(4, "assistant.threads.setStatus")  # set, then refreshed
    slow_service.release("s")
    await worker.wait_finished(1)
    shown = statuses(slack_api, thread)
    assert shown[-1] == "" and all(s for s in shown[:-1]) and len(shown) >= 4


async def test_c10_two_reapers_finalize_an_abandoned_card_once(
    slack_api, redis_client: aioredis.Redis
) -> None:
    thread = sg.slack_ts()
    session = session_of(thread)
    client = SlackCards.from_settings(_slack_settings(slack_api))
    leases = Leases(redis_client, KEYS, ttl_s=30)
    lease = await leases.try_acquire(session, "doomed", "t9")
    assert lease is not None
    target = CardTarget(Platform.SLACK, sg.SLACK_CHANNEL_ID, thread)
    publisher = CardPublisher(client, CardRecord(redis_client, KEYS, session), target, lease.token)
    await publisher.open(ProgressCard(title="why?", turn_id="t9", thread=thread))
    await redis_client.sadd(KEYS.open_turns(session), "t9")  # queued by the ingress,
    await redis_client.set(KEYS.session.begun(session, "t9"), "1")  # begun by the runtime
    await redis_client.delete(KEYS.live_turn(session))  # the worker died; its lease expired

    def reaper() -> Reaper:
        settle = SettleWriter(redis_client, KEYS)
        platforms = {Platform.SLACK: client}
        return Reaper(
            redis=redis_client, keys=KEYS, leases=leases, settle=settle, platforms=platforms
        )

    far_future = 2**62
    reports = await asyncio.gather(reaper().sweep(far_future), reaper().sweep(far_future))
    assert sum(r.interrupted for r in reports) == 1
    interrupted = [c for c in slack_api.calls_to("chat.update") if "Interrupted" in card_text(c)]
    assert len(interrupted) == 1
    assert await redis_client.xlen(KEYS.book(Book.SETTLES)) == 1
    assert not stop_buttons(final_card(slack_api, thread))
    again = await reaper().sweep(far_future)
    assert (again.interrupted, again.delivered) == (0, 0)
    await client.aclose()


def _slack_settings(api: FakeSlackAPI) -> Settings:
    return Settings(_env_file=None, SLACK_BOT_TOKEN=api.token, SLACK_API_URL=api.base_url)


async def test_c9_the_age_of_the_oldest_live_analysis_is_a_metric(bot, redis_client) -> None:
    leases = Leases(redis_client, KEYS, ttl_s=30)
    lease = await leases.try_acquire("slack-old", "w1", "t1")
    assert lease is not None
    two_hours_ago_ms = (await redis_client.time())[0] * 1000 - 2 * 3600 * 1000
    await redis_client.zadd(KEYS.lease_starts, {"slack-old": two_hours_ago_ms}, xx=True)

    def gauge(text: str) -> float:
        (line,) = [x for x in text.splitlines() if x.startswith("chatops_oldest_live_analysis")]
        return float(line.split()[-1])

    assert gauge((await bot.http.get("/metrics")).text) >= 2 * 3600 - 60  # alert: > 1 h
    await leases.release(lease)
    assert gauge((await bot.http.get("/metrics")).text) == 0
