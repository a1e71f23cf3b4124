"""Prometheus metrics move as the bot works: scraped over HTTP, parsed as Prometheus parses them.

Why this way: a metric is only as good as the place that feeds it, so the analyses here run
through the real ingress, worker, runtime, settle writer and card publisher (the in-process bot,
and once as `chatops worker` and `chatops serve` processes), against the fake OpenAI provider,
the fake Slack Web API and the slow service. Each test reads the worker's (and the ingress's)
`GET /metrics` before and after, with `prometheus_client.parser`, and asserts how counts and
histogram `_count`s moved, never a latency's value (wall-clock times are not asserted). The pure
trace readers (steer-to-cut, stop-to-quiet) are checked on hand-built diagnostics.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client.parser import text_string_to_metric_families

from agent_core._diagnostics import RunDiagnostics, TraceEntry
from bot.control.killswitch import KillSwitch
from bot.keys import BotKeys
from bot.worker.metrics import steer_to_cut, stop_to_quiet
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.fakes.slack_api import ratelimited
from tests.inprocess_bot import Bot
from tests.loopback import free_port
from tests.slack_view import cards_in, stop_buttons

KEYS = BotKeys()
Samples = Mapping[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape(url: str) -> Samples:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when it is absent (a labelled child never touched)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def probe(service: SlowService, name: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": service.url(f"/hold/{name}")})


async def started(bot: Bot) -> str:
    """Start the bot's worker with its metrics endpoint; the endpoint's URL."""
    port = free_port()
    await bot.start_worker(metrics_port=port)
    return f"http://127.0.0.1:{port}/metrics"


async def test_a_completed_analysis_with_one_tool_call(bot, fake_llm, slow_service) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("Healthy."),
    )
    url = await started(bot)
    before = await scrape(url)
    await bot.post(sg.slack_app_mention(ts=sg.slack_ts()))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    after = await scrape(url)

    assert moved(before, after, "chatops_turns_total", reason="completed") == 1
    assert moved(before, after, "chatops_tool_calls_total", tool="http_get", outcome="ok") == 1
    assert moved(before, after, "chatops_tool_duration_seconds_count", tool="http_get") == 1
    assert moved(before, after, "chatops_turn_probes_count") == 1
    assert moved(before, after, "chatops_turn_probes_sum") == 2  # at the start, after the batch
    assert moved(before, after, "chatops_queue_lag_seconds_count") == 1
    # Two model requests of 10 prompt and 5 completion tokens each (the fake's usage).
    assert moved(before, after, "chatops_turn_tokens_total", kind="prompt") == 20
    assert moved(before, after, "chatops_turn_tokens_total", kind="completion") == 10
    assert moved(before, after, "chatops_card_calls_total", **_slack("post", "ok")) == 1
    assert moved(before, after, "chatops_card_calls_total", **_slack("update", "ok")) >= 1
    # Neither a steer nor a stop happened.
    assert moved(before, after, "chatops_steer_to_cut_seconds_count") == 0
    assert moved(before, after, "chatops_stop_to_quiet_seconds_count") == 0


async def test_a_steer_moves_the_steer_to_cut_histogram(bot, fake_llm, slow_service) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("db", "cache")]),
        fp.TextReply("The gateway is dropping connections."),
    )
    url = await started(bot)
    before = await scrape(url)
    thread = sg.slack_ts()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(2)
    await bot.post(sg.slack_message(text="it's the gateway, not the db", thread_ts=thread))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    after = await scrape(url)

    assert moved(before, after, "chatops_steer_to_cut_seconds_count") == 1
    assert moved(before, after, "chatops_stop_to_quiet_seconds_count") == 0
    assert moved(before, after, "chatops_turns_total", reason="steered") == 1
    assert moved(before, after, "chatops_turns_total", reason="completed") == 1
    # The steer cancelled both probes (interruptible calls), each answered "interrupted".
    interrupted = {"tool": "http_get", "outcome": "interrupted"}
    assert moved(before, after, "chatops_tool_calls_total", **interrupted) == 2
    assert moved(before, after, "chatops_tool_duration_seconds_count", tool="http_get") == 2
    assert moved(before, after, "chatops_turn_probes_count") == 2  # two turns


async def test_a_stop_moves_the_stop_to_quiet_histogram(
    bot, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("a", "b")]),
        fp.TextReply("never sent"),
    )
    url = await started(bot)
    before = await scrape(url)
    thread = sg.slack_ts()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(2)
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
    after = await scrape(url)

    assert moved(before, after, "chatops_stop_to_quiet_seconds_count") == 1
    assert moved(before, after, "chatops_steer_to_cut_seconds_count") == 0
    assert moved(before, after, "chatops_turns_total", reason="stopped") == 1
    interrupted = {"tool": "http_get", "outcome": "interrupted"}
    assert moved(before, after, "chatops_tool_calls_total", **interrupted) == 2


async def test_a_429_from_slack_is_counted(bot, fake_llm, slack_api, slow_service) -> None:
    slack_api.script("chat.update", ratelimited(1))
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("Healthy."),
    )
    url = await started(bot)
    before = await scrape(url)
    await bot.post(sg.slack_app_mention(ts=sg.slack_ts()))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    after = await scrape(url)

    assert moved(before, after, "chatops_card_calls_total", **_slack("update", "rate_limited")) == 1
    assert moved(before, after, "chatops_card_calls_total", **_slack("update", "ok")) >= 1
    assert moved(before, after, "chatops_turns_total", reason="completed") == 1


async def test_kill_switch_and_queue_gauges_are_read_at_scrape_time(
    bot, redis_client: aioredis.Redis
) -> None:
    ingress = "/metrics"
    assert value(parse((await bot.http.get(ingress)).text), "chatops_killswitch_on") == 0
    switch = KillSwitch(redis_client)
    await switch.engage("ops")
    url = await started(bot)  # it reads no turn while the switch is on

    await bot.post(sg.slack_app_mention(ts=sg.slack_ts()))
    samples = await scrape(url)
    assert value(samples, "chatops_killswitch_on") == 1
    assert value(samples, "chatops_queue_waiting") == 1  # queued, claimed by no worker
    assert value(samples, "chatops_queue_pending") == 0
    assert value(parse((await bot.http.get(ingress)).text), "chatops_killswitch_on") == 1

    # Another consumer claims it without acknowledging it: pending, no longer waiting.
    await redis_client.xreadgroup(KEYS.turns_group, "elsewhere", {KEYS.turns_stream: ">"}, 1)
    samples = await scrape(url)
    assert (value(samples, "chatops_queue_waiting"), value(samples, "chatops_queue_pending")) == (
        0,
        1,
    )

    await switch.release()
    assert value(await scrape(url), "chatops_killswitch_on") == 0
    assert value(parse((await bot.http.get(ingress)).text), "chatops_killswitch_on") == 0


@pytest.mark.slow
async def test_a_worker_process_serves_its_metrics_on_the_configured_port(
    deployment, fake_llm, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("Healthy."),
    )
    port = free_port()
    await deployment.start(
        first_worker_env={"CHATOPS_WORKER_METRICS_PORT": str(port)},
        first_worker_args=("--metrics-host", "127.0.0.1"),
    )
    url = f"http://127.0.0.1:{port}/metrics"
    before = await scrape(url)
    await deployment.slack(sg.slack_app_mention(ts=sg.slack_ts()))
    assert (await deployment.next_settle()).reason == "completed"
    after = await scrape(url)
    assert moved(before, after, "chatops_turns_total", reason="completed") == 1
    assert moved(before, after, "chatops_tool_calls_total", tool="http_get", outcome="ok") == 1
    ingress = parse((await deployment.http.get(f"{deployment.base}/metrics")).text)
    assert value(ingress, "chatops_killswitch_on") == 0


def _trace(*steps: tuple[str, str, float]) -> RunDiagnostics:
    diag = RunDiagnostics(session_id="s", turn_id="t")
    diag.trace = [TraceEntry(seq=n, kind=k, detail=d, at=at) for n, (k, d, at) in enumerate(steps)]
    return diag


def test_steer_to_cut_runs_from_the_first_steer_heard_to_the_steer_cut() -> None:
    diag = _trace(
        ("tool_start", "c1", 1.0),
        ("steer_received", "", 2.0),
        ("steer_received", "", 2.5),
        ("tool_end", "c1", 3.0),
        ("cut", "steer", 3.5),
        ("end", "Steered", 4.0),
    )
    assert steer_to_cut(diag) == 1.5
    found_at_a_probe = _trace(("cut", "steer", 1.0), ("end", "Steered", 2.0))
    assert steer_to_cut(found_at_a_probe) is None  # no arrival stamp: not measured
    assert steer_to_cut(_trace(("steer_received", "", 1.0), ("end", "Completed", 2.0))) is None


def test_stop_to_quiet_runs_from_the_stop_to_the_last_call_answered_or_the_end() -> None:
    diag = _trace(
        ("tool_start", "c1", 1.0),
        ("tool_end", "c0", 1.5),
        ("stop_accepted", "ana", 2.0),
        ("tool_end", "c1", 2.25),
        ("tool_end", "c2", 2.75),
        ("end", "Stopped", 3.0),
    )
    assert stop_to_quiet(diag) == 0.75
    idle = _trace(("stop_accepted", "ana", 2.0), ("cut", "stop", 2.25), ("end", "Stopped", 2.5))
    assert stop_to_quiet(idle) == 0.5
    assert stop_to_quiet(_trace(("tool_end", "c1", 1.0), ("end", "Completed", 2.0))) is None


def _slack(call: str, outcome: str) -> dict[str, str]:
    return {"platform": "slack", "call": call, "outcome": outcome}
