"""The scheduler's metrics: reaper releases and leadership, scraped from `GET /metrics`.

Why this way: the counters must move for the sweep that really finalizes an abandoned card, so
the card is set up as a worker that died would leave it (posted live by a real
`CardPublisher`, its turn begun, its lease gone and long expired in the leases index, as in
`test_card_reliability.py` C10), the scheduler is the one `open_scheduler` builds from the
settings (real Redis, the fake Slack API over loopback) with its metrics port open, and the
values are read back over HTTP and parsed by `prometheus_client`'s own parser. A second
scheduler on the same Redis shows the leader gauge and the skipped sweeps. The command-line
flags are checked on a `chatops scheduler` process.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from bot.adapters.slack.cards import SlackCards
from bot.events import Platform, session_id_for
from bot.keys import BotKeys
from bot.ops.scheduler import open_scheduler
from bot.publishing.card_publisher import CardPublisher
from bot.publishing.card_record import CardRecord
from bot.publishing.platform import CardTarget
from bot.settings import Settings
from bot.state.lease import Leases
from cards._model import ProgressCard
from tests.fakes import signing as sg
from tests.fakes.slack_api import FakeSlackAPI
from tests.loopback import free_port
from tests.processes import Chatops
from tests.slack_view import card_text, final_card

KEYS = BotKeys()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
    assert response.status_code == 200
    return samples(response.text)


async def abandoned_card(redis: aioredis.Redis, api: FakeSlackAPI, thread: str) -> None:
    """A live card whose worker died: its turn begun, its lease expired long ago."""
    session = session_id_for("slack", sg.SLACK_TEAM_ID, sg.SLACK_CHANNEL_ID, thread)
    client = SlackCards.from_settings(settings_for(api))
    lease = await Leases(redis, KEYS, ttl_s=30).try_acquire(session, "doomed", "t1")
    assert lease is not None
    target = CardTarget(Platform.SLACK, sg.SLACK_CHANNEL_ID, thread)
    publisher = CardPublisher(client, CardRecord(redis, KEYS, session), target, lease.token)
    await publisher.open(ProgressCard(title="why?", turn_id="t1", thread=thread))
    await client.aclose()  # that worker is gone: the reaper brings its own client
    await redis.sadd(KEYS.open_turns(session), "t1")
    await redis.set(KEYS.session.begun(session, "t1"), "1")
    await redis.delete(KEYS.live_turn(session))  # the worker died; its lease expired …
    await redis.zadd(KEYS.leases, {session: 1})  # … long before the reaper's grace


def settings_for(api: FakeSlackAPI, **more: Any) -> Settings:
    return Settings(_env_file=None, SLACK_BOT_TOKEN=api.token, SLACK_API_URL=api.base_url, **more)


INTERRUPTED = ("chatops_reaper_interrupted_total", ())
DELIVERED = ("chatops_reaper_delivered_total", ())
LEADER = ("chatops_scheduler_leader", ())


def sweeps(outcome: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("chatops_reaper_sweeps_total", (("outcome", outcome),))


async def test_a_sweep_that_finalizes_an_abandoned_card_moves_the_counter(
    redis_client: aioredis.Redis, slack_api: FakeSlackAPI
) -> None:
    thread = sg.slack_ts()
    await abandoned_card(redis_client, slack_api, thread)
    port, other_port = free_port(), free_port()
    settings = settings_for(slack_api)
    async with (
        open_scheduler(
            settings,
            interval_s=10,
            redis=redis_client,
            metrics_host="127.0.0.1",
            metrics_port=port,
        ) as leader,
        open_scheduler(
            settings,
            interval_s=10,
            redis=redis_client,
            metrics_host="127.0.0.1",
            metrics_port=other_port,
        ) as follower,
    ):
        before = await scrape(port)
        assert (before[INTERRUPTED], before[DELIVERED], before[LEADER]) == (0, 0, 0)

        report = await leader.tick()
        assert report is not None and report.interrupted == 1
        assert "Interrupted" in card_text(final_card(slack_api, thread))
        assert await follower.tick() is None  # the lock is held: it does not sweep

        led, followed = await scrape(port), await scrape(other_port)
        assert (led[INTERRUPTED], led[LEADER], led[sweeps("swept")]) == (1, 1, 1)
        assert led[DELIVERED] == report.delivered
        assert (followed[INTERRUPTED], followed[LEADER]) == (0, 0)
        assert followed[sweeps("not_leader")] == 1

        again = await leader.tick()  # nothing left to release
        assert again is not None and again.interrupted == 0
        after = await scrape(port)
        assert (after[INTERRUPTED], after[sweeps("swept")]) == (1, 2)


async def test_the_metrics_port_is_closed_with_the_scheduler(
    redis_client: aioredis.Redis, slack_api: FakeSlackAPI
) -> None:
    port = free_port()
    settings = settings_for(slack_api, CHATOPS_SCHEDULER_METRICS_PORT=port)
    async with open_scheduler(
        settings, interval_s=10, redis=redis_client, metrics_host="127.0.0.1"
    ):
        assert LEADER in await scrape(port)  # the setting opens it when no port is passed
    with pytest.raises(httpx.ConnectError):
        await scrape(port)


@pytest.mark.slow
async def test_chatops_scheduler_serves_its_metrics_on_the_given_port(
    deploy_env, redis_client
) -> None:
    port = free_port()
    args = ["scheduler", "--interval", "0.2", "--metrics-host", "127.0.0.1"]
    proc = Chatops([*args, "--metrics-port", str(port)], deploy_env)
    try:
        await proc.wait_for_line("leads: it runs the reaper")  # logged as the gauge is set
        assert (await scrape(port))[LEADER] == 1
    finally:
        await proc.stop()
