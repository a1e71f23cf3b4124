"""The team's instructions and runbooks, as the worker builds them from the settings.

Why this way: the promise is about what the model is sent, so the end-to-end tests drive a
signed Slack mention through the real ingress and a worker built by `open_worker` from
`CHATOPS_INSTRUCTIONS_FILE` and `CHATOPS_RUNBOOKS_DIR`, and read what the fake OpenAI provider
received: the first request's system message, the tools offered, and the runbook tools' results
as the model reads them (framed by `guarded`). The start-up errors are what an operator sees:
`open_worker` refusing with a `BotConfigError` that names the setting.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bot.errors import BotConfigError
from bot.settings import Settings
from bot.worker.assembly import open_worker
from bot.worker.prompt import MAX_INSTRUCTIONS_BYTES, SYSTEM_PROMPT, TEAM_HEADING
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import open_bot
from tests.paths import TESTS
from tests.slack_view import card_text, final_card

TEAM = """\
## Services
- `checkout` calls `payments-db` (Postgres 15, PgBouncer in front).

## Never
- Never suggest restarting `payments-db`: fail over with the DBA on call instead.
"""


def with_files(settings: Settings, **update: object) -> Settings:
    return settings.model_copy(update=update)


async def mention_and_wait(bot) -> str:
    thread = sg.slack_ts()
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    return thread


async def test_the_model_gets_the_team_instructions_and_searches_the_runbooks(
    bot_settings, redis_client, fake_llm, slack_api, tmp_path: Path
) -> None:
    instructions = tmp_path / "team.md"
    instructions.write_text(TEAM)
    runbooks = tmp_path / "runbooks"
    shutil.copytree(TESTS / "data" / "runbooks", runbooks)
    settings = with_files(
        bot_settings, instructions_file=str(instructions), runbooks_dir=str(runbooks)
    )
    search = {"query": "sorry, too many clients already"}
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("search_runbooks", search)]),
        fp.ToolCallsReply([fp.ToolCall("read_runbook", {"name": "db-connection-exhaustion"})]),
        fp.TextReply("Findings\nThe pool is full [2].\nHypotheses\nA leak.\nNext steps\nCheck."),
    )
    async with open_bot(settings, redis_client) as bot:
        thread = await mention_and_wait(bot)

    assert len(fake_llm.requests) == 3
    system = fake_llm.requests[0].messages[0]
    assert system["role"] == "system"
    assert system["content"].endswith(f"{TEAM_HEADING}\n\n{TEAM.strip()}")
    assert "Findings" in system["content"] and "`search_runbooks`" in system["content"]
    offered = {t["function"]["name"] for t in fake_llm.requests[0].tools or []}
    assert {"search_runbooks", "read_runbook"} <= offered

    found = fake_llm.requests[1].messages[-1]
    assert found["role"] == "tool"
    assert '<tool_output tool="search_runbooks">' in found["content"]
    assert "1. db-connection-exhaustion.md: Database connection pool exhaustion" in found["content"]
    read = fake_llm.requests[2].messages[-1]
    assert '<tool_output tool="read_runbook">' in read["content"]
    assert "pg_terminate_backend" in read["content"]
    assert "The pool is full" in card_text(final_card(slack_api, thread))


async def test_without_either_setting_the_default_prompt_and_no_runbook_tools(
    bot, fake_llm
) -> None:
    fake_llm.script(fp.TextReply("Findings\nNothing checked yet."))
    await mention_and_wait(bot)
    system = fake_llm.requests[0].messages[0]
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    offered = {t["function"]["name"] for t in fake_llm.requests[0].tools or []}
    assert not {"search_runbooks", "read_runbook"} & offered


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            b"x" * (MAX_INSTRUCTIONS_BYTES + 1),
            "is 32,769 bytes, more than the 32,768 bytes allowed",
        ),
        (b"# Team\n\xff\xfe not text", "is not UTF-8 text"),
        (None, "cannot be read: No such file or directory"),
    ],
    ids=["too large", "not utf-8", "missing"],
)
async def test_an_instructions_file_that_cannot_work_stops_the_worker(
    bot_settings, redis_client, tmp_path: Path, content: bytes | None, expected: str
) -> None:
    path = tmp_path / "team.md"
    if content is not None:
        path.write_bytes(content)
    settings = with_files(bot_settings, instructions_file=str(path))
    with pytest.raises(BotConfigError) as caught:
        async with open_worker(settings, redis=redis_client, metrics_port=0):
            pass
    assert str(caught.value).startswith(f"CHATOPS_INSTRUCTIONS_FILE: {path} ")
    assert expected in str(caught.value)


async def test_an_instructions_path_that_is_a_folder_stops_the_worker(
    bot_settings, redis_client, tmp_path: Path
) -> None:
    settings = with_files(bot_settings, instructions_file=str(tmp_path))
    with pytest.raises(BotConfigError, match="CHATOPS_INSTRUCTIONS_FILE: .* is not a regular file"):
        async with open_worker(settings, redis=redis_client, metrics_port=0):
            pass


async def test_an_instructions_file_at_the_bound_is_accepted(
    bot_settings, redis_client, tmp_path: Path
) -> None:
    path = tmp_path / "team.md"
    path.write_bytes(b"x" * MAX_INSTRUCTIONS_BYTES)
    settings = with_files(bot_settings, instructions_file=str(path))
    async with open_worker(settings, redis=redis_client, metrics_port=0) as worker:
        assert worker is not None


async def test_a_runbooks_folder_that_is_not_a_directory_stops_the_worker(
    bot_settings, redis_client, tmp_path: Path
) -> None:
    settings = with_files(bot_settings, runbooks_dir=str(tmp_path / "missing"))
    with pytest.raises(BotConfigError, match="CHATOPS_RUNBOOKS_DIR: .*missing is not a directory"):
        async with open_worker(settings, redis=redis_client, metrics_port=0):
            pass
