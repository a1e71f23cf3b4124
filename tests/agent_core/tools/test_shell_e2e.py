"""The `shell` tool in a worker, configured by its settings (X7, X8; docs/reliability.md A3).

Why this way: the tool is only as safe as the worker's wiring, so the test configures it the way
an operator does (`CHATOPS_SHELL_ALLOWLIST`, and an operator profile for `echo` in the file
`CHATOPS_SHELL_PROFILES_FILE` names), drives a signed Slack mention through the real ingress and
worker against the fake provider, and reads what the model was told: an admitted command's
output, and refusals for commands that escape the grammar or the allowlist.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from bot.settings import Settings
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import Bot, open_bot


@pytest.fixture
async def shell_bot(
    bot_settings: Settings, redis_client: aioredis.Redis, tmp_path: Path
) -> AsyncIterator[Bot]:
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[programs.echo]\npositionals = ["name*"]\n')
    settings = bot_settings.model_copy(
        update={"shell_allowlist": "echo,kubectl get", "shell_profiles_file": str(profiles)}
    )
    async with open_bot(settings, redis_client) as running:
        yield running


async def test_x7_the_configured_shell_runs_profiled_commands_and_refuses_the_rest(
    shell_bot: Bot, fake_llm: fp.FakeProvider
) -> None:
    """X7, X8, A3: an operator profile from settings, refusals as the model reads them."""
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("shell", {"command": "echo checkout-ok"}),
                fp.ToolCall("shell", {"command": "echo hi; rm -rf /tmp/x"}),
                fp.ToolCall("shell", {"command": "echo -e hi"}),
                fp.ToolCall("shell", {"command": "kubectl get pods --server=https://evil"}),
                fp.ToolCall("shell", {"command": "kubectl describe pods"}),
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
    assert "`-e` is not an admitted flag of `echo`" in results[2]
    assert "`--server` chooses another server" in results[3]
    assert "`kubectl describe` is not enabled here" in results[4]
