"""The sub-agent tools: `dispatch_subagent`, `ask_parent`, `answer_child`.

The runtime knows nothing of queues or registries: a `SubagentPort` (implemented by the bot)
creates children, carries questions and answers. The tools raise the turn's signals: a dispatch,
or an answer to a child, ends the parent's turn at its next cut (`dispatched`: the parent
resumes when its children report); a question ends the child's turn (`awaiting`: it resumes
with the answer). Nothing busy-waits: a model never polls for its children.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from agent_core._errors import ToolFailed
from agent_core.tools._base import Interruptibility, Risk, Tool, ToolContext

__all__ = [
    "ANSWER_CHILD",
    "ASK_PARENT",
    "DISPATCH",
    "SubagentPort",
    "subagent_tools",
]

DISPATCH = "dispatch_subagent"
ASK_PARENT = "ask_parent"
ANSWER_CHILD = "answer_child"


class SubagentPort(Protocol):
    """What the sub-agent tools need from the deployment."""

    async def dispatch(self, ctx: ToolContext, task: str) -> str:
        """Create a child for `task` in the caller's session; its id.

        Keyed on `ctx.call_id`: the same call run again (a resumed batch) gets the child it
        created, which is not queued a second time.

        Raises:
            ToolFailed: No child can be created (the analysis was stopped, say).
        """
        ...

    async def ask(self, ctx: ToolContext, question: str) -> None:
        """Send the caller's (a child's) question to its parent.

        Raises:
            ToolFailed: The caller is not a sub-agent.
        """
        ...

    async def answer(self, ctx: ToolContext, child_id: str, answer: str) -> None:
        """Answer the question of the caller's child `child_id`.

        Raises:
            ToolFailed: No such child waits for an answer.
        """
        ...


def _text(args: Mapping[str, Any], name: str) -> str:
    value = str(args[name]).strip()
    if not value:
        raise ToolFailed(f"{name} must not be empty")
    return value


def subagent_tools(port: SubagentPort) -> list[Tool]:
    """The three tools, bound to `port`.

    A dispatch is keyed on its call (`SubagentPort.dispatch`), so a resumed batch may run it
    again and gets the same child; the question and the answer run to their end once started
    and are never run twice.
    """

    async def dispatch(args: Mapping[str, Any], ctx: ToolContext) -> str:
        child = await port.dispatch(ctx, _text(args, "task"))
        ctx.raise_dispatch()
        return (
            f"dispatched sub-agent {child}. Its report arrives as a message when it is done; "
            "do not wait for it with other tools."
        )

    async def ask(args: Mapping[str, Any], ctx: ToolContext) -> str:
        await port.ask(ctx, _text(args, "question"))
        ctx.raise_await()
        return "question sent to the parent analysis; its answer arrives as a message"

    async def answer(args: Mapping[str, Any], ctx: ToolContext) -> str:
        child = _text(args, "child_id")
        await port.answer(ctx, child, _text(args, "answer"))
        ctx.raise_dispatch()  # back to waiting for the children's reports
        return f"answer sent to sub-agent {child}; its report arrives as a message"

    def tool(
        name: str,
        description: str,
        fields: Mapping[str, str],
        handler: Any,
        *,
        rerunnable: bool = False,
    ) -> Tool:
        return Tool(
            name=name,
            description=description,
            parameters={
                "type": "object",
                "properties": {f: {"type": "string", "description": d} for f, d in fields.items()},
                "required": list(fields),
                "additionalProperties": False,
            },
            handler=handler,
            risk=Risk.READ_ONLY,
            idempotent=rerunnable,
            interruptibility=(
                Interruptibility.ABORTABLE if rerunnable else Interruptibility.MUST_COMPLETE
            ),
            timeout_s=10.0,
        )

    return [
        tool(
            DISPATCH,
            "Hand one part of the investigation to a sub-agent that runs in parallel (call it "
            "once per part, in one response). Your turn ends after this response; the reports "
            "come back to you as messages.",
            {"task": "What the sub-agent should find out, self-contained."},
            dispatch,
            # The port keys the child on the call: a resumed batch runs it again and gets the
            # same child back, rather than "in doubt" and a second child from the model.
            rerunnable=True,
        ),
        tool(
            ASK_PARENT,
            "As a sub-agent: ask the analysis that dispatched you a question you cannot answer "
            "yourself. Your turn ends; the answer comes back as a message.",
            {"question": "The question, self-contained."},
            ask,
        ),
        tool(
            ANSWER_CHILD,
            "Answer the question a sub-agent asked you (its id is in its message). Your turn "
            "ends after this response; the sub-agents' reports come back as messages.",
            {"child_id": "The sub-agent's id (sub-…).", "answer": "Your answer."},
            answer,
        ),
    ]
