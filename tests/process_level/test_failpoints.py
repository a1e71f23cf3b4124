"""A worker killed at named points; another takes its analysis over (H1, Q3, Q4, Q12, W5).

Why this way: a crash is a process dying with no cleanup, so the first worker runs with
`CHATOPS_FAILPOINTS` and SIGKILLs itself at the named point; a second worker, started after
that death, takes the pending entry over once the lease expires. What must hold is read where
it shows: the provider never answered a request with a 400 (the history stayed valid), a tool
that had finished was not run again, the turn settled once as completed, and the thread has
one card, final. Marked slow.

Q12 (a restarted worker recovers its predecessor's pending entries): consumer names are per
process, so a restart never depends on re-reading its own pending list; the new process takes
the dead one's entries over with `XAUTOCLAIM`, which is what these tests start after each
death. W5 (no second model call for a recorded turn): the fake provider's request count.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.deployment import slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.slack_view import card_text, cards_in, final_card, stop_buttons

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("point", "tool_runs"),
    [
        ("after_model_response", 0),
        ("mid_tool", 2),  # its effect happened, unjournaled: a read-only call runs again
        ("after_tool_result", 1),
        ("before_final_card", 1),
    ],
)
async def test_a_worker_killed_at_a_failpoint_is_taken_over(
    deployment, fake_llm, slack_api, slow_service, point, tool_runs
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("Recovered: all probes answered."),
    )
    await deployment.start(workers=1, first_worker_env={"CHATOPS_FAILPOINTS": point})
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    doomed = deployment.workers[0]
    assert await asyncio.to_thread(doomed.proc.wait, 20) == -9  # it died at the point
    await deployment.add_worker()  # takes the entry over once the lease has expired

    settled = await deployment.next_settle()
    assert settled.reason == "completed", settled
    await deployment.released(slack_session(thread))
    assert [r.status for r in fake_llm.requests] == [200, 200]  # never a 400
    assert len(slow_service.hits) == tool_runs  # a finished tool is not run again
    assert len(cards_in(slack_api, thread)) == 1
    final = final_card(slack_api, thread)
    assert "Recovered" in card_text(final) and not stop_buttons(final)


async def test_q4_a_worker_killed_while_taking_over_does_not_stop_the_next(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_get", {"url": slow_service.url("/ok")})]),
        fp.TextReply("Recovered: all probes answered."),
    )
    armed = {"CHATOPS_FAILPOINTS": "after_model_response"}
    await deployment.start(workers=1, first_worker_env=armed)
    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    assert await asyncio.to_thread(deployment.workers[0].proc.wait, 20) == -9
    reclaimer = await deployment.add_worker({"CHATOPS_FAILPOINTS": "during_reclaim"})
    assert await asyncio.to_thread(reclaimer.proc.wait, 20) == -9  # died while taking over
    await deployment.add_worker()

    settled = await deployment.next_settle()
    assert settled.reason == "completed", settled
    await deployment.released(slack_session(thread))
    assert [r.status for r in fake_llm.requests] == [200, 200]
    assert len(cards_in(slack_api, thread)) == 1
    final = final_card(slack_api, thread)
    assert "Recovered" in card_text(final) and not stop_buttons(final)
