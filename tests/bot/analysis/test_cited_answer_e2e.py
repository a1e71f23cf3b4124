"""An answer that cites its evidence, end to end: the numbers the model reads are the card's.

Why this way: the model reads a step number at the end of each tool result (the runtime's step
labels) and the card numbers its steps as it books calls (the card tracker); the two are counted
in different processes' worth of code from different facts, so only an analysis run for real can
show they agree. The analysis runs through the real ingress, queue, worker, runtime and card
publisher, over real Redis, with the fake OpenAI provider scripted and the fake Slack Web API
recording every card: it spans two turns (a redirect mid-batch) and two batches, one call of
which the redirect interrupts. The assertions read what the provider was sent and what Slack was
asked to show.
"""

from __future__ import annotations

import re
from typing import Any

from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.fakes.service import SlowService
from tests.slack_view import blocks, final_card

ANSWER = """Findings:
The db probe never answered [1]; the cache neither [2, 3]. The health page is up [4].
Hypotheses:
The gateway drops connections [9], as pods[1] suggests.
Next steps:
Check the gateway's connection pool."""


def probe(service: SlowService, name: str) -> fp.ToolCall:
    return fp.ToolCall("http_get", {"url": service.url(f"/hold/{name}")})


def steps_seen(request: fp.RecordedRequest) -> dict[int, str]:
    """Each step number the model read on a result, and the URL its call fetched."""
    urls = {
        call["id"]: call["function"]["arguments"]
        for message in request.messages
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or []
    }
    seen: dict[int, str] = {}
    for message in request.messages:
        if message["role"] == "tool":
            label = re.fullmatch(r"(?s).*\n\[step (\d+)\]", message["content"])
            assert label, message["content"][-80:]
            seen[int(label.group(1))] = urls[message["tool_call_id"]]
    return seen


def step_lines(card: list[dict[str, Any]]) -> dict[int, str]:
    """The card's numbered step lines (`*3.* ✅ `http_get` url=…`), by number."""
    found = {}
    for block in card:
        for line in block.get("text", {}).get("text", "").splitlines():
            if numbered := re.match(r"\*(\d+)\.\* ", line):
                found[int(numbered.group(1))] = line
    return found


async def test_the_answers_citations_name_the_steps_the_model_read(
    bot, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([probe(slow_service, n) for n in ("db", "cache", "queue")]),
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply(ANSWER),
    )
    thread = sg.slack_ts()
    await bot.start_worker()
    await bot.post(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(3)
    await bot.post(sg.slack_message(text="it's the gateway, not the db", thread_ts=thread))
    assert bot.worker is not None
    await bot.worker.wait_finished(1)
    assert len(fake_llm.requests) == 3

    # What the model read: the follow-up turn's results go on counting from the first turn's.
    first_turn = steps_seen(fake_llm.requests[1])
    last = steps_seen(fake_llm.requests[2])
    assert sorted(first_turn) == [1, 2, 3]
    assert sorted(last) == [1, 2, 3, 4] and all(last[n] == first_turn[n] for n in first_turn)
    assert "/ok" in last[4]

    # What the card shows: the same number for the same call, every one of them.
    card = blocks(final_card(slack_api, thread))
    shown = step_lines(card)
    assert sorted(shown) == sorted(last)
    for number, arguments in last.items():
        url = re.search(r'"url": ?"([^"]+)"', arguments)
        assert url and url.group(1) in shown[number], (number, shown[number])
    assert "interrupted" in shown[1] and "interrupted" not in shown[4]

    # The answer: its parts apart, each citation of a step a reference to it, [9] left alone.
    sections = [b["text"]["text"] for b in card if b["type"] == "section"]
    findings = next(s for s in sections if s.startswith("*Findings*\n"))
    assert "never answered *[1 · http_get]*; the cache neither *[2 · http_get, 3 · http_get]*" in (
        findings
    )
    assert "The health page is up *[4 · http_get]*." in findings
    hypotheses = next(s for s in sections if s.startswith("*Hypotheses*\n"))
    assert "connections [9], as pods[1] suggests" in hypotheses
    assert any(s.startswith("*Next steps*\nCheck the gateway") for s in sections)
    contexts = [e["text"] for b in card if b["type"] == "context" for e in b["elements"]]
    sources = next(c for c in contexts if c.startswith("*Sources*"))
    assert [line.split("`")[0] for line in sources.splitlines()[1:]] == [
        "*[1]* ",
        "*[2]* ",
        "*[3]* ",
        "*[4]* ",
    ]
    assert "/hold/db" in sources.splitlines()[1] and "/ok" in sources.splitlines()[4]
