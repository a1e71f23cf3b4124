"""A `ToolContext` for calling a tool's handler directly, outside any turn.

Shared by the tool tests (HTTP, Prometheus, address checks, bounded reads): a read-only tool
never ends its turn, so either signal raising means the tool did something it must not.
"""

from __future__ import annotations

__all__ = ["Ctx"]


class Ctx:
    """Session `s`, turn `t`; the turn-ending signals fail the test."""

    session_id = "s"
    turn_id = "t"
    call_id = ""

    def raise_dispatch(self) -> None:
        raise AssertionError("a read-only tool dispatched a sub-agent")

    def raise_await(self) -> None:
        raise AssertionError("a read-only tool asked to wait")
