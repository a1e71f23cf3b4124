"""`prometheus_query` retries through the worker, with the toolset the worker builds (X9, R-retry).

Why this way: the retry belongs to the batch and the failure's text to the `guarded` wrapper, so
a retryable flag lost between them would leave every wrapped tool at one attempt while the
tool's own tests (which call it unwrapped) still pass. Each test runs the whole bot in one
process (a signed Slack mention through the real ingress, a worker wired as in production,
`open_toolset` and its `guarded` wrapper included) against a real HTTP server on loopback that
speaks the Prometheus API (`tests/fakes/prometheus_api.py`), and counts the requests that
server received: a 503 is asked again and the model reads the second answer; a 400 (a query
that does not parse) is asked once and the model reads Prometheus' error.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent_core.tools._hygiene import UNTRUSTED_NOTE
from bot.settings import Settings
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.prometheus_api import DOWN_AT, FakePrometheus
from tests.inprocess_bot import Bot


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    server = FakePrometheus()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def bot_settings(bot_settings: Settings, prom: FakePrometheus) -> Settings:
    return bot_settings.model_copy(update={"prometheus_url": prom.base_url})


async def _ask(bot: Bot, fake_llm: fp.FakeProvider, query: str) -> str:
    """One mention whose model calls `prometheus_query` once; the tool message it then reads."""
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("prometheus_query", {"query": query, "time": DOWN_AT})]),
        fp.TextReply("Done."),
    )
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=sg.slack_ts()))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    assert len(fake_llm.requests) == 2
    offered = {t["function"]["name"] for t in fake_llm.requests[0].tools or []}
    assert "prometheus_query" in offered
    message = fake_llm.requests[1].messages[-1]
    assert message["role"] == "tool"
    content: str = message["content"]
    return content


async def test_a_503_is_retried_and_the_model_reads_the_second_answer(
    bot: Bot, fake_llm: fp.FakeProvider, prom: FakePrometheus
) -> None:
    prom.unavailable(1)
    content = await _ask(bot, fake_llm, "up")
    assert [seen.path for seen in prom.seen] == ["/api/v1/query"] * 2  # 503, then 200
    assert content.startswith(f'{UNTRUSTED_NOTE}\n<tool_output tool="prometheus_query">\n')
    assert 'up{instance="api-2:8080", job="api"} 1' in content
    assert "503" not in content


async def test_a_query_that_does_not_parse_is_asked_once(
    bot: Bot, fake_llm: fp.FakeProvider, prom: FakePrometheus
) -> None:
    content = await _ask(bot, fake_llm, "up{")
    assert len(prom.seen) == 1  # a 400 bad_data is the query's fault: not retried
    assert content.startswith("error: prometheus_query failed.\n")
    assert '<tool_error tool="prometheus_query">' in content
    assert "Prometheus refused the query (HTTP 400) bad_data: " in content
