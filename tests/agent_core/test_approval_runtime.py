"""Who may close a suspended batch, through the runtime's and the desk's Python API (H3).

The bot's continuation is the only turn that may run an approved call; these tests drive the
runtime directly (real Redis, the fake OpenAI provider) to reach the two turns that are not it:
a later, unrelated turn of the session, and the suspended turn itself run again after its
worker died. Decisions go through the real approval desk.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_core import Awaiting, Completed, Tool, TurnRequest, UserMessage, validate_history
from agent_core.tools._base import Interruptibility, Risk, ToolContext
from bot.control.approval_desk import ApprovalDesk, PressOutcome, approval_button_value
from bot.events import ChatEvent, EventKind, Platform
from bot.keys import BotKeys
from tests.fakes import openai_provider as fp

RESPONDER = "U0RESPONDER"


class Restarts:
    """A side-effecting tool that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0
        self.tool = Tool(
            name="restart_pod",
            description="Restart a pod.",
            parameters={"type": "object", "properties": {"pod": {"type": "string"}}},
            handler=self._run,
            risk=Risk.SIDE_EFFECT,
            interruptibility=Interruptibility.MUST_COMPLETE,
        )

    async def _run(self, args: Mapping[str, Any], ctx: ToolContext) -> str:
        self.runs += 1
        return f"restarted {args['pod']}"


def press_event(value: str, action: str = "approve") -> ChatEvent:
    return ChatEvent(
        platform=Platform.SLACK,
        event_id=f"press-{action}-{value}",
        kind=EventKind.ACTION,
        workspace="T1",
        channel="C1",
        thread="1700000000.000100",
        message_id="",
        author=RESPONDER,
        action=action,
        action_value=value,
    )


SESSION = press_event("x").session_id


async def suspend(runtime: Any, fake_llm: fp.FakeProvider, redis_client: Any) -> str:
    """Run turn T1 until it waits for approval of one restart; approve it; its button value."""
    fake_llm.script(fp.ToolCallsReply([fp.ToolCall("restart_pod", {"pod": "checkout-1"})]))
    task = (UserMessage(content="checkout is down", author="alice"),)
    outcome = await runtime.run(
        TurnRequest(session_id=SESSION, turn_id="T1", inputs=task, requester="alice")
    )
    assert isinstance(outcome.result, Awaiting)
    (record,) = (await runtime.approvals.records(SESSION)).values()
    value = approval_button_value(record)
    desk = ApprovalDesk(redis_client, BotKeys(), responders=[RESPONDER])
    assert (await desk.press(press_event(value))).outcome is PressOutcome.APPROVED
    return value


async def test_h3_the_suspended_turn_run_again_closes_nothing(
    make_runtime, fake_llm, redis_client
) -> None:
    restarts = Restarts()
    runtime = make_runtime(restarts.tool)
    await suspend(runtime, fake_llm, redis_client)

    again = await runtime.run(TurnRequest(session_id=SESSION, turn_id="T1"))
    assert isinstance(again.result, Awaiting)  # its continuation runs the call, not this
    assert restarts.runs == 0 and len(fake_llm.requests) == 1


async def test_h3_an_approval_is_not_carried_into_an_unrelated_turn(
    make_runtime, fake_llm, redis_client
) -> None:
    restarts = Restarts()
    runtime = make_runtime(restarts.tool)
    await suspend(runtime, fake_llm, redis_client)
    fake_llm.script(fp.TextReply("Looked again; nothing restarted."))

    # Its continuation never ran (say, dead-lettered); days later someone asks again.
    later = (UserMessage(content="what's the status now?", author="bob"),)
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="T9", inputs=later))
    assert isinstance(outcome.result, Completed)
    assert restarts.runs == 0
    result = next(m for m in fake_llm.requests[1].messages if m["role"] == "tool")
    assert result["content"].startswith("not run: it was approved for an analysis that ended")
    validate_history(await runtime.store.load(SESSION))


async def test_h3_no_more_calls_wait_than_a_card_can_show(make_runtime, fake_llm) -> None:
    restarts = Restarts()
    runtime = make_runtime(restarts.tool, approvals_per_batch=2)
    pods = [fp.ToolCall("restart_pod", {"pod": f"checkout-{n}"}) for n in range(3)]
    fake_llm.script(fp.ToolCallsReply(pods))
    task = (UserMessage(content="restart checkout", author="alice"),)
    outcome = await runtime.run(TurnRequest(session_id=SESSION, turn_id="T1", inputs=task))

    assert isinstance(outcome.result, Awaiting) and len(outcome.result.approvals) == 2
    assert len(await runtime.approvals.records(SESSION)) == 2
    suspended = await runtime.approvals.suspended(SESSION)
    assert suspended is not None
    (third,) = suspended.journaled.values()  # answered at once, kept with the batch
    assert third.content.startswith("not run: at most 2 calls may wait for approval")
    assert restarts.runs == 0
