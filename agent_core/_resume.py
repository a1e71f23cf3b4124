"""Closing the batch a dead worker left open, from its journal (docs/design.md §Invariants I7).

While a batch runs, its assistant message and each result are journaled as they arrive; the
batch reaches the history only when every call is answered. A worker that dies in between
leaves the journal behind. The turn's next run closes that batch before anything else:

- a call whose result was journaled keeps it: a finished tool is never run again;
- an abortable call (a read, a probe) that had not answered is run again;
- a must-complete call (one with side effects) that had not answered is answered "in doubt":
  it may or may not have taken effect, and running it again could do it twice.

This module decides; the run loop executes the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass

from agent_core._messages import AssistantMessage, ToolCall, ToolMessage, ToolStatus
from agent_core.tools._base import Interruptibility, Toolset

__all__ = ["IN_DOUBT", "ResumePlan", "plan_resume"]

IN_DOUBT = (
    "in doubt: the worker running this call stopped before it answered, so it may or may not "
    "have taken effect. Verify its effect before retrying it."
)


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """How each call of an interrupted batch gets its answer."""

    answered: Mapping[str, ToolMessage]
    """Results known without running anything: journaled ones and "in doubt" ones."""
    rerun: tuple[ToolCall, ...]
    """Abortable calls without a journaled result, to run again."""

    @property
    def in_doubt(self) -> int:
        """How many calls are answered "in doubt"."""
        return sum(1 for r in self.answered.values() if r.content == IN_DOUBT)


def plan_resume(
    batch: AssistantMessage,
    journaled: Mapping[str, ToolMessage],
    toolset: Toolset,
    waiting: Set[str] = frozenset(),
) -> ResumePlan:
    """Decide, call by call, how the interrupted `batch` is closed.

    Calls in `waiting` (they wait for a person's approval, so they never ran) are left out of
    the plan: the loop suspends them again.
    """
    answered: dict[str, ToolMessage] = {}
    rerun: list[ToolCall] = []
    for call in batch.tool_calls:
        if call.id in journaled:
            answered[call.id] = journaled[call.id]
            continue
        if call.id in waiting:
            continue
        tool = toolset.get(call.name)
        if tool is not None and tool.interruptibility is Interruptibility.MUST_COMPLETE:
            answered[call.id] = ToolMessage(
                call_id=call.id, name=call.name, content=IN_DOUBT, status=ToolStatus.ERROR
            )
        else:
            rerun.append(call)  # an unknown tool is answered with its error by the batch runner
    return ResumePlan(answered=answered, rerun=tuple(rerun))
