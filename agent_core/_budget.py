"""Budgets: how much one turn may do before it must wrap up (docs/reliability.md H12, A8).

A turn may make at most `max_model_requests` model requests and `max_tool_calls` tool calls,
spend at most `max_tokens` tokens, and run one exact call (same tool, same arguments) at most
`max_identical_calls` times. The limits come from configuration only: nothing in a call's
arguments or in chat text can raise them.

- Tool calls are admitted per whole batch: a batch that would pass the cap runs none of its
  calls (each is answered "not run: …"), so the model never sees half a plan carried out.
- A call identical to one that already ran its allowed number of times is answered "not run:
  repeated …" while the batch's other calls run; a batch made only of such repeats is a loop,
  and spends the budget.
- Once a budget is spent, the turn makes one last request with no tools offered, asking the
  model to answer with what it found; the card says which budget ended the analysis.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent_core._diagnostics import RunDiagnostics
from agent_core._errors import ConfigError
from agent_core._messages import ToolCall

__all__ = ["Budget", "BudgetMeter", "wrap_up_note"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """The limits of one turn.

    Raises:
        ConfigError: A limit below 1 (or a negative token budget).
    """

    max_model_requests: int = 25
    """Model requests with tools offered; the wrap-up request comes on top."""
    max_tool_calls: int = 60
    """Tool calls started in one turn, all batches together."""
    max_identical_calls: int = 2
    """Times one exact call (tool and arguments) may run in one turn."""
    max_tokens: int = 0
    """Prompt plus completion tokens of one turn; 0: no token budget."""

    def __post_init__(self) -> None:
        for name in ("max_model_requests", "max_tool_calls", "max_identical_calls"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_tokens < 0:
            raise ConfigError(f"max_tokens must be 0 (none) or more, not {self.max_tokens}")


def _identity(call: ToolCall) -> str:
    """The same tool with the same arguments, however the JSON was spaced or ordered."""
    try:
        args = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except (json.JSONDecodeError, RecursionError):  # RecursionError: absurd nesting
        args = call.arguments
    return f"{call.name}\x1f{args}"


@dataclass(slots=True)
class BudgetMeter:
    """What one turn has spent of its `Budget`."""

    budget: Budget
    tool_calls: int = 0
    """Calls admitted so far."""
    runs: Counter[str] = field(default_factory=Counter)
    spent: str = ""
    """Why the turn must wrap up, once a budget is spent by a batch."""

    def admit(self, calls: Sequence[ToolCall]) -> dict[str, str]:
        """Admit a batch; return the refusals (the answer text) of calls that may not run."""
        cap = self.budget.max_tool_calls
        if self.tool_calls + len(calls) > cap:
            self.spent = f"tool-call budget spent ({cap} calls per turn)"
            text = (
                f"not run: this batch of {len(calls)} calls would pass the turn's budget of "
                f"{cap} tool calls ({self.tool_calls} used). Answer with what you have."
            )
            return {call.id: text for call in calls}
        refused: dict[str, str] = {}
        most = self.budget.max_identical_calls
        for call in calls:
            key = _identity(call)
            if self.runs[key] >= most:
                refused[call.id] = (
                    f"not run: this exact call already ran {most} times in this turn; use its "
                    "earlier results"
                )
                continue
            self.runs[key] += 1
            self.tool_calls += 1
        if calls and len(refused) == len(calls):
            self.spent = "the same calls were repeated (a loop)"
        return refused

    def exhausted(self, diag: RunDiagnostics) -> str:
        """Why the turn must wrap up now, or "" while every budget holds."""
        if self.spent:
            return self.spent
        if diag.model_requests >= self.budget.max_model_requests:
            return f"step limit reached ({self.budget.max_model_requests} model requests)"
        if self.budget.max_tokens and diag.usage.total_tokens >= self.budget.max_tokens:
            return f"token budget spent ({self.budget.max_tokens:,} tokens)"
        return ""


def wrap_up_note(why: str) -> str:
    """The notice the wrap-up request ends with."""
    return (
        f"Budget for this analysis: {why}. No more tools are available. Answer now with what "
        "you found, and say what is left to check."
    )
