"""The `shell` tool in a worker, configured by `CHATOPS_SHELL_ALLOWLIST` (issue 7, RELIABILITY A3).

Why this way: the tool is only as safe as the worker's wiring, so the test configures it the way
an operator does (the setting), drives a signed Slack mention through the real ingress and
worker against the fake provider, and reads what the model was told: an allowed command's
output, and a refusal for a command that tries to escape the allowlist.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from bot.settings import Settings
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import Bot, open_bot


@pytest.fixture
async def shell_bot(bot_settings: Settings, redis_client: aioredis.Redis) -> AsyncIterator[Bot]:
    settings = bot_settings.model_copy(update={"shell_allowlist": "echo"})
    async with open_bot(settings, redis_client) as running:
        yield running


async def test_a3_the_configured_shell_runs_allowed_commands_and_refuses_escapes(
    shell_bot: Bot, fake_llm: fp.FakeProvider
) -> None:
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("shell", {"command": "echo checkout-ok"}),
                fp.ToolCall("shell", {"command": "echo hi; rm -rf /tmp/x"}),
            ]
        ),
        fp.TextReply("Checked."),
    )
    worker = await shell_bot.start_worker()
    await shell_bot.post(sg.slack_app_mention(ts=sg.slack_ts()))
    await worker.wait_finished(1)
    results = [m["content"] for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert "exit 0" in results[0] and "checkout-ok" in results[0]
    assert results[1].startswith("error:") and "checkout-ok" not in results[1]
