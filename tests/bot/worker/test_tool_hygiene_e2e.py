"""Tool output hygiene through the whole bot (docs/reliability.md A1, A7), in one process.

Why this way: the promise is about what leaves the worker, so the test drives a signed Slack
mention through the real ingress and worker (wired as in production, `guarded` toolset
included), lets `http_get` fetch a page holding fake secrets, a forged frame end and an injected
instruction from the tests' service, and then reads what the fake OpenAI provider and the fake
Slack Web API were sent. The fake model plays a model that falls for the injection, so what
stops a write is what A1 relies on: no such tool is offered, and an unknown tool never runs.
"""

from __future__ import annotations

import json

from agent_core.tools._hygiene import UNTRUSTED_NOTE
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import LEAK_SECRETS
from tests.slack_view import card_text, final_card


async def test_secrets_are_redacted_framed_and_injected_calls_run_nothing(
    bot, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/leak")})]),
        fp.ToolCallsReply([fp.ToolCall("delete_everything", {})]),  # it fell for the injection
        fp.TextReply("The config dump holds a Slack token and an AWS key: rotate them."),
    )
    thread = sg.slack_ts()
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    assert len(fake_llm.requests) == 3

    # A7 and A1: the model reads the result redacted, after the note, inside one intact frame.
    tool_result = fake_llm.requests[1].messages[-1]
    assert tool_result["role"] == "tool"
    content = tool_result["content"]
    assert "[REDACTED:slack_token]" in content and "[REDACTED:aws_access_key]" in content
    assert content.startswith(f'{UNTRUSTED_NOTE}\n<tool_output tool="http_get">\n')
    assert content.count("</tool_output>") == 1 and content.endswith("</tool_output>\n[step 1]")
    assert "ignore previous instructions" in content  # shown as data, not dropped

    # A1: only read-only tools are offered; the injected call answers "unknown", runs nothing.
    offered = {t["function"]["name"] for t in fake_llm.requests[0].tools or []}
    assert offered == {
        "http_get",
        "http_probe",
        "dispatch_subagent",
        "answer_child",
        "past_analyses",
    }
    refused = fake_llm.requests[2].messages[-1]
    assert refused["role"] == "tool"
    assert refused["content"].startswith("error: unknown tool 'delete_everything'")
    assert [hit.path for hit in slow_service.hits] == ["/leak"]

    # A7: no secret in anything sent to the model or to Slack (cards, status lines, all of it).
    sent_to_model = json.dumps([r.body for r in fake_llm.requests])
    sent_to_slack = json.dumps([c.params for c in slack_api.calls], default=str)
    for secret in LEAK_SECRETS:
        assert secret not in sent_to_model
        assert secret not in sent_to_slack
    assert "rotate them" in card_text(final_card(slack_api, thread))
