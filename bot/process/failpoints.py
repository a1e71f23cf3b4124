"""Failpoints: kill this worker at a named point, for process-level crash tests.

`CHATOPS_FAILPOINTS` (comma-separated names) arms them; unset, nothing here does anything. An
armed point kills the process with SIGKILL, as an OOM kill or a lost node would: no cleanup
runs, which is the point. Points:

- `after_model_response`: a model response was booked (its calls not started yet);
- `mid_tool`: a tool call has done its work (its side effect happened) but its result is not
  journaled yet;
- `after_tool_result`: a tool result was journaled (the rest of its batch may still run);
- `before_final_card`: the analysis settled; its final card is not shown yet;
- `during_reclaim`: an abandoned entry was just taken over, before it runs.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
from collections.abc import Iterable, Mapping
from typing import Any

from agent_core import EventSink, EventSource, RunEvent, Tool, ToolContext, Toolset

__all__ = ["POINTS", "Failpoints"]

log = logging.getLogger(__name__)

POINTS = frozenset(
    {
        "after_model_response",
        "mid_tool",
        "after_tool_result",
        "before_final_card",
        "during_reclaim",
    }
)


class Failpoints:
    """The armed failpoints of this process."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.armed = frozenset(n.strip() for n in names if n.strip())
        unknown = self.armed - POINTS
        if unknown:
            raise ValueError(f"unknown failpoints: {sorted(unknown)}; known: {sorted(POINTS)}")

    @classmethod
    def parse(cls, spec: str) -> Failpoints:
        """From `CHATOPS_FAILPOINTS`."""
        return cls(spec.split(","))

    def hit(self, name: str) -> None:
        """Die here if `name` is armed."""
        assert name in POINTS, name
        if name in self.armed:
            log.critical("failpoint %s: killing the worker", name)
            os.kill(os.getpid(), signal.SIGKILL)

    def sink(self) -> EventSink | None:
        """An event sink for the runtime that hits the event failpoints (None when unarmed)."""
        if not self.armed & {"after_model_response", "after_tool_result"}:
            return None

        async def on_event(event: RunEvent) -> None:
            if event.partial:
                return
            if event.source is EventSource.MODEL and event.calls:
                self.hit("after_model_response")
            elif event.source is EventSource.TOOL:
                self.hit("after_tool_result")

        return on_event

    def toolset(self, toolset: Toolset) -> Toolset:
        """The tools, each hitting `mid_tool` once its work is done (as they are when unarmed)."""
        if "mid_tool" not in self.armed:
            return toolset
        return Toolset.of(self._wrapped(tool) for tool in toolset)

    def _wrapped(self, tool: Tool) -> Tool:
        async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
            result = await tool.handler(args, ctx)
            self.hit("mid_tool")
            return result

        return dataclasses.replace(tool, handler=handler)
