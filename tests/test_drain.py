"""Draining a worker on SIGTERM: a live turn suspends at its next cut and continues elsewhere.

Why this way: a rolling restart is signals and processes, so the test runs `chatops serve` and
two `chatops worker` processes, sends SIGTERM to the one holding the analysis, and reads the
outcome where people and books see it: the settles (drained, then completed by the other
worker), the one card in the thread, and the slow service's record (the finished call is not
made again). Marked slow: it starts processes.
"""

from __future__ import annotations

import asyncio
import signal

import pytest

from tests.deployment import KEYS, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = pytest.mark.slow


async def test_sigterm_hands_a_live_turn_over_at_its_next_cut(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")})]),
        fp.TextReply("Handed over, and the database is fine."),
    )
    await deployment.start(workers=2)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(1)
    holder = (await deployment.redis.get(KEYS.live_turn(slack_session(thread)))).decode()
    draining = next(w for w in deployment.workers if holder.split("|")[1] in w.log)
    draining.signal(signal.SIGTERM)
    draining.signal(signal.SIGTERM)  # two signals are handled like one
    slow_service.release("db")  # the batch closes: that is the cut where the turn suspends

    drained, completed = await deployment.next_settle(), await deployment.next_settle()
    assert drained.reason == "drained" and drained.final_event_id == ""
    assert completed.reason == "completed" and completed.turn_id.startswith(drained.turn_id)
    await deployment.released(slack_session(thread))
    assert await asyncio.to_thread(draining.proc.wait, 15) == 0
    assert "drained" in draining.log

    assert len(slow_service.hits) == 1  # the finished call was not made again
    resumed = fake_llm.requests[1].messages
    assert [m["role"] for m in resumed][-2:] == ["assistant", "tool"]
    assert [m["role"] for m in resumed].count("user") == 1  # the task, once
    assert len(cards_in(slack_api, thread)) == 1
    shown = [card_text(c) for c in slack_api.calls_to("chat.update") if c.status == 200]
    assert any("Continuing on another worker" in text for text in shown)
    final = final_card(slack_api, thread)
    assert "Handed over" in card_text(final) and not stop_buttons(final)


async def test_an_idle_worker_exits_on_sigterm(deployment) -> None:
    await deployment.start()
    deployment.worker.signal(signal.SIGTERM)
    assert await asyncio.to_thread(deployment.worker.proc.wait, 10) == 0
    assert "drained" in deployment.worker.log
