"""Structured logs: one JSON object per line, with the ids of the work, and no secret (A10).

Why this way: what an operator gets is the processes' output, so the main test starts
`chatops serve`, `chatops worker` and `chatops scheduler` as processes with the default
settings (JSON, INFO), runs one analysis with a tool call through them (a signed Slack mention,
the fake model and Slack API over loopback) and reads back everything each process printed:
every line must parse as JSON, the lines about the analysis must carry its session, turn and
event ids (the worker's HTTP client's lines too, so the ids reach libraries' loggers), and no
configured secret or raw body may appear anywhere. The formatter's and context's own rules
(ids restored after a block, one task's ids never on another's lines, tracebacks) are checked
in process, on a handler writing to a string.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from bot.logs import bind, configure_logging, current_ids, log_context
from tests.deployment import SECRET, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg

OPENAI_KEY = "logs-openai-key-0123456789abcdef"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """The root logger writing JSON lines to a string (restored afterwards)."""
    out = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    handler = configure_logging("json", "DEBUG", stream=out)
    yield out
    root.removeHandler(handler)
    root.setLevel(level)
    assert root.handlers == handlers


def lines_of(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
async def test_a_request_line_of_the_http_clients_is_logged_at_debug_only(level: str) -> None:
    """Every request is logged at INFO by httpx and httpx2 (the openai SDK's): noise above DEBUG."""
    import httpx
    import httpx2

    out = io.StringIO()
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    handler = configure_logging("json", level, stream=out)  # type: ignore[arg-type]
    try:
        for client in (
            httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))),
            httpx2.AsyncClient(transport=httpx2.MockTransport(lambda r: httpx2.Response(200))),
        ):
            async with client:
                await client.get("http://tool.example/health")
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        for name in ("httpx", "httpx2"):
            logging.getLogger(name).setLevel(logging.NOTSET)
    requests = [line for line in lines_of(out) if "HTTP Request:" in line["message"]]
    assert [line["logger"] for line in requests] == ([] if level == "INFO" else ["httpx", "httpx2"])


def test_a_line_carries_the_ids_of_its_context_and_only_there(captured) -> None:
    log = logging.getLogger("bot.test")
    with log_context(session="s1", event="e1"):
        with log_context(turn="t1"):
            log.info("inside %s", "both")
        log.info("outer")
    log.info("outside")
    log.info("explicit", extra={"session": "s9"})

    inside, outer, outside, explicit = lines_of(captured)
    assert inside["message"] == "inside both"
    assert (inside["session"], inside["turn"], inside["event"]) == ("s1", "t1", "e1")
    assert inside["level"] == "INFO" and inside["logger"] == "bot.test"
    assert inside["time"].endswith("+00:00")
    assert ("session" in outer, "turn" in outer) == (True, False)
    assert not {"session", "turn", "event"} & set(outside)
    assert explicit["session"] == "s9"
    assert current_ids() == {}


async def test_concurrent_tasks_log_their_own_ids(captured) -> None:
    log = logging.getLogger("bot.test")
    both_bound = asyncio.Barrier(2)

    async def job(n: int) -> None:
        bind(session=f"s{n}", turn=f"t{n}")
        await both_bound.wait()  # each logs only once the other has bound its own ids
        log.info("job %d", n)

    await asyncio.gather(job(1), job(2))
    by_message = {line["message"]: line for line in lines_of(captured)}
    assert (by_message["job 1"]["session"], by_message["job 1"]["turn"]) == ("s1", "t1")
    assert (by_message["job 2"]["session"], by_message["job 2"]["turn"]) == ("s2", "t2")
    assert current_ids() == {}  # gather ran each job in a task of its own


def test_a_traceback_stays_inside_its_json_line(captured) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("bot.test").exception("failed")
    (line,) = lines_of(captured)
    assert line["message"] == "failed" and line["level"] == "ERROR"
    assert "ValueError: boom" in line["exc"]


def test_text_format_shows_known_ids_after_the_message() -> None:
    out = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging("text", "INFO", stream=out)
    try:
        with log_context(session="s1", turn="t1"):
            logging.getLogger("bot.test").info("hello")
        logging.getLogger("bot.test").debug("not at INFO")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    (line,) = out.getvalue().splitlines()
    assert line.endswith("INFO bot.test: hello [session=s1 turn=t1]")


@pytest.mark.slow
async def test_every_process_line_is_json_with_ids_and_no_secret(
    deployment, deploy_env, fake_llm, slack_api, slow_service
) -> None:
    deploy_env["OPENAI_API_KEY"] = OPENAI_KEY  # a key no other text could contain
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("The service is healthy."),
    )
    await deployment.start(scheduler_interval=0.5)
    thread = sg.slack_ts()
    mention = sg.slack_app_mention(ts=thread)
    await deployment.slack(mention)
    settled = await deployment.next_settle()
    assert settled.reason == "completed"
    await deployment.released(slack_session(thread))
    for proc in deployment.processes:
        await proc.stop()  # all it printed is in its log file

    session, turn, event = settled.session_id, settled.turn_id, mention["event_id"]
    serve, worker, scheduler = deployment.serve, deployment.worker, deployment.processes[-1]
    logs = {
        p.args[0]: [json.loads(line) for line in p.log.splitlines() if line]
        for p in (serve, worker, scheduler)
    }
    for name, lines in logs.items():
        assert lines and all({"time", "level", "logger", "message"} <= set(ln) for ln in lines)
        assert not [ln for ln in lines if ln["level"] == "DEBUG"], name

    taken = [ln for ln in logs["serve"] if ln["message"].endswith(f"event {event}: start")]
    assert [(ln["session"], ln["event"]) for ln in taken] == [(session, event)]
    ran = [ln for ln in logs["worker"] if ln["message"].startswith(f"turn {turn} ran: completed")]
    assert [(ln["session"], ln["turn"], ln["event"]) for ln in ran] == [(session, turn, event)]
    model_calls = [ln for ln in logs["worker"] if fake_llm.base_url in ln["message"]]
    assert model_calls == [], "httpx's line for each model request is for DEBUG only"

    body, _ = sg.slack_request(mention, secret=SECRET)
    secrets = {
        "Slack signing secret": SECRET,
        "Slack bot token": slack_api.token,
        "Slack raw body": body.decode(),
        "the mention's text": mention["event"]["text"],
        "Feishu app secret": sg.FEISHU_APP_SECRET,
        "Feishu encrypt key": deploy_env["FEISHU_ENCRYPT_KEY"],
        "Feishu verification token": deploy_env["FEISHU_VERIFICATION_TOKEN"],
        "OpenAI API key": OPENAI_KEY,
    }
    leaks = [
        (proc.args[0], what)
        for proc in deployment.processes
        for what, value in secrets.items()
        if value in proc.log
    ]
    assert leaks == []
