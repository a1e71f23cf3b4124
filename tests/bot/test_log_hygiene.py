"""No secret and no raw request body in any log record (docs/reliability.md A10).

Why this way: a leak can come from any module a request passes through (ingress, adapters,
queue, worker, actor, runtime, card publisher), so the test drives one signed Slack mention and
one encrypted Feishu mention through the real in-process bot, each to its final card, with
every `bot` and `agent_core` logger at DEBUG (stricter than A10's INFO) and every other logger
(slack_sdk, lark, openai, httpx) at INFO, and then scans each record whole: its formatted
message, its arguments, any exception text and any `extra` fields. The JSON lines the
processes would print for the same records (`bot.logs`, ids added from the context) are
captured too, decoded and scanned the same way.
"""

from __future__ import annotations

import io
import json
import logging

import pytest
from pydantic import SecretStr

from bot.logs import configure_logging
from bot.settings import Settings
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.inprocess_bot import SECRET

ENCRYPT_KEY = "log-hygiene-encrypt-key-0123456789"
VERIFICATION_TOKEN = "log-hygiene-verification-token-0123"
OPENAI_KEY = "log-hygiene-openai-key-0123456789"


@pytest.fixture
def bot_settings(bot_settings: Settings, feishu_api) -> Settings:
    """The in-process bot's settings, with Feishu configured as well as Slack."""
    return bot_settings.model_copy(
        update={
            "feishu_app_id": sg.FEISHU_APP_ID,
            "feishu_app_secret": SecretStr(sg.FEISHU_APP_SECRET),
            "feishu_encrypt_key": SecretStr(ENCRYPT_KEY),
            "feishu_verification_token": SecretStr(VERIFICATION_TOKEN),
            "feishu_domain": feishu_api.base_url,
            "openai_api_key": SecretStr(OPENAI_KEY),
        }
    )


def record_text(record: logging.LogRecord) -> str:
    """Everything a record carries, as one string (message, args, exception, extras)."""
    return " ".join(
        [record.getMessage(), repr(record.args), record.exc_text or "", repr(vars(record))]
    )


@pytest.fixture
def json_lines():
    """What the processes would print: the JSON lines of `configure_logging`'s handler."""
    out, root = io.StringIO(), logging.getLogger()
    level = root.level
    handler = configure_logging("json", "DEBUG", stream=out)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)


async def test_no_secret_or_raw_body_is_logged(
    bot, fake_llm, slack_api, feishu_api, caplog, json_lines
) -> None:
    caplog.set_level(logging.INFO)  # the SDKs' and clients' loggers, at A10's level
    for name in ("bot", "agent_core"):
        caplog.set_level(logging.DEBUG, logger=name)
    fake_llm.script(fp.TextReply("slack answer"), fp.TextReply("feishu answer"))
    await bot.start_worker()

    slack_body, slack_headers = sg.slack_request(sg.slack_app_mention(), secret=SECRET)
    response = await bot.http.post("/slack/events", content=slack_body, headers=slack_headers)
    assert response.status_code == 200
    await bot.worker.wait_finished(1)

    feishu_body, feishu_headers = sg.feishu_request(
        sg.feishu_message_receive(),
        encrypt_key=ENCRYPT_KEY,
        verification_token=VERIFICATION_TOKEN,
    )
    response = await bot.http.post("/feishu/events", content=feishu_body, headers=feishu_headers)
    assert response.status_code == 200, response.text
    await bot.worker.wait_finished(2)
    assert feishu_api.calls, "the Feishu card was posted"

    secrets = {
        "Slack signing secret": SECRET,
        "Slack bot token": slack_api.token,
        "Feishu encrypt key": ENCRYPT_KEY,
        "Feishu verification token": VERIFICATION_TOKEN,
        "Feishu app secret": sg.FEISHU_APP_SECRET,
        "OpenAI API key": OPENAI_KEY,
        "Slack raw body": slack_body.decode(),
        "Feishu raw body": feishu_body.decode(),
        "Slack signature": slack_headers["X-Slack-Signature"],
    }
    records = caplog.records
    assert any(r.name.startswith("bot.") for r in records), "the bot logs at DEBUG"
    leaks = [
        (record.name, what)
        for record in records
        for what, value in secrets.items()
        if value in record_text(record)
    ]
    assert leaks == []
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    assert len(lines) >= len([r for r in records if r.levelno >= logging.INFO])
    assert any(line.get("session", "").startswith("feishu-") for line in lines)
    json_leaks = [
        (line["logger"], what)
        for line in lines
        for what, value in secrets.items()
        if value in " ".join(str(v) for v in line.values())
    ]
    assert json_leaks == []
