"""Draining a worker on SIGTERM: a live turn suspends at its next cut and continues elsewhere.

docs/reliability.md rows: W1 (idle), W2 (mid model call), W3 (mid tool), W4 (grace runs out), W6
(two signals, SIGTERM and SIGINT).

Why this way: a rolling restart is signals and processes, so the test runs `chatops serve` and
two `chatops worker` processes, sends SIGTERM to the one holding the analysis, and reads the
outcome where people and books see it: the settles (drained, then completed by the other
worker), the one card in the thread, and the slow service's record (the finished call is not
made again). Marked slow: it starts processes.
"""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest

from tests.deployment import Deployment, slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.processes import Chatops
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = pytest.mark.slow


async def test_w3_sigterm_mid_tool_hands_the_turn_over_at_its_next_cut(
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
    draining = await deployment.holder(slack_session(thread))
    draining.signal(signal.SIGTERM)
    draining.signal(signal.SIGTERM)  # two signals are handled like one
    slow_service.release("db")  # the batch closes: that is the cut where the turn suspends

    await handed_over(deployment, draining, thread)
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


async def test_w1_w6_an_idle_worker_exits_on_sigterm_and_a_second_signal_changes_nothing(
    deployment,
) -> None:
    await deployment.start()
    deployment.worker.signal(signal.SIGTERM)
    deployment.worker.signal(signal.SIGINT)
    await deployment.worker.wait_for_line("drained")
    deployment.worker.signal(signal.SIGTERM)  # while it exits: must not kill it
    assert await asyncio.to_thread(deployment.worker.proc.wait, 10) == 0
    assert "drained" in deployment.worker.log
    assert "Traceback" not in deployment.worker.log


async def test_w2_sigterm_mid_model_call_finishes_the_call_then_hands_over(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    streaming = threading.Event()
    fake_llm.script(
        fp.ToolCallsReply(
            [fp.ToolCall("http_get", {"url": slow_service.url("/ok")})],
            stall_after=1,
            release=streaming,
        ),
        fp.TextReply("Handed over mid-call; the service is healthy."),
    )
    await deployment.start(workers=2)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await fake_llm.wait_for_requests(1)
    draining = await deployment.holder(slack_session(thread))
    draining.signal(signal.SIGTERM)
    streaming.set()  # the call in flight completes within the grace period

    await handed_over(deployment, draining, thread)
    assert [r.status for r in fake_llm.requests] == [200, 200]  # the history stayed valid
    assert fake_llm.aborted_streams == 0  # the call was finished, not cut
    assert len(slow_service.hits) <= 1  # run once at most, never again after the hand-over
    assert len(cards_in(slack_api, thread)) == 1
    final = final_card(slack_api, thread)
    assert "Handed over mid-call" in card_text(final) and not stop_buttons(final)


async def test_w4_a_turn_whose_cut_misses_the_grace_is_taken_over_from_its_journal(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply(
            [
                fp.ToolCall("http_get", {"url": slow_service.url("/ok")}),
                fp.ToolCall("http_get", {"url": slow_service.url("/hold/db")}),
            ]
        ),
        fp.TextReply("Recovered after the grace period ran out."),
    )
    await deployment.start(workers=1, first_worker_args=("--grace", "1"))
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    await slow_service.wait_for_hits(2)
    leaving = deployment.worker
    leaving.signal(signal.SIGTERM)  # the batch cannot close within 1 s: /hold/db is held
    assert await asyncio.to_thread(leaving.proc.wait, 15) == 3  # left at the end of its grace
    assert "grace period over" in leaving.log
    await deployment.add_worker()  # takes the entry over once the lease has expired
    await slow_service.wait_for_hits(3)  # the interrupted read-only probe runs again
    slow_service.release("db")

    settled = await deployment.next_settle()
    assert settled.reason == "completed", settled
    await deployment.released(slack_session(thread))
    assert [r.status for r in fake_llm.requests] == [200, 200]  # never a 400
    assert [h.path for h in slow_service.hits].count("/ok") == 1  # the finished one: once
    assert len(cards_in(slack_api, thread)) == 1
    final = final_card(slack_api, thread)
    assert "Recovered after the grace" in card_text(final) and not stop_buttons(final)


async def handed_over(deployment: Deployment, draining: Chatops, thread: str) -> None:
    """Drained, then completed on another worker; the draining worker exited 0."""
    drained, completed = await deployment.next_settle(), await deployment.next_settle()
    assert drained.reason == "drained" and drained.final_event_id == ""
    assert completed.reason == "completed" and completed.turn_id.startswith(drained.turn_id)
    await deployment.released(slack_session(thread))
    assert await asyncio.to_thread(draining.proc.wait, 15) == 0
