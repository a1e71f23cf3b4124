"""Test support shipped with the runtime: a scripted in-process model.

`ScriptedModel` plays a fixed list of responses and validates every history it is sent with the
same strict rules as the providers, so a test using it fails the way production would if the
runtime ever sent a broken history. Tests of the HTTP boundary use the fake OpenAI-compatible
server instead; this model is for fast property tests of the loop itself.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent_core._errors import HistoryRejected, ModelUnavailable
from agent_core._history import validate_history
from agent_core._llm.client import DeltaSink, ModelResponse, Usage
from agent_core._messages import AssistantMessage, Message, ToolCall
from agent_core.tools._base import Toolset

__all__ = ["ScriptedModel", "calls", "text"]

_IDS = itertools.count(1)


def text(content: str) -> AssistantMessage:
    """A final answer."""
    return AssistantMessage(content=content)


def calls(*named: tuple[str, str]) -> AssistantMessage:
    """A batch of parallel calls given as `(tool name, JSON arguments)` pairs, with fresh ids."""
    return AssistantMessage(
        tool_calls=tuple(ToolCall(id=f"call_{next(_IDS)}", name=n, arguments=a) for n, a in named)
    )


@dataclass
class ScriptedModel:
    """A `ChatModel` that answers from a script and records what it was sent."""

    script: list[AssistantMessage]
    requests: list[list[Message]] = field(default_factory=list)
    delta_chunks: int = 2
    """Text answers are streamed in this many deltas."""

    async def respond(
        self, messages: Sequence[Message], toolset: Toolset, on_delta: DeltaSink | None = None
    ) -> ModelResponse:
        """Validate the history like a strict provider, then play the next response."""
        self.requests.append(list(messages))
        try:
            validate_history(messages)
        except Exception as exc:
            raise HistoryRejected(str(exc), status=400) from exc
        if not self.script:
            raise ModelUnavailable("script exhausted", status=500)
        message = self.script.pop(0)
        if message.content and on_delta is not None:
            size = max(1, len(message.content) // self.delta_chunks)
            for start in range(0, len(message.content), size):
                await on_delta(message.content[start : start + size])
                await asyncio.sleep(0)
        return ModelResponse(message=message, usage=Usage(10, 5), response_id=f"resp-{next(_IDS)}")
