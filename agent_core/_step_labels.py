"""Step labels: each tool result the model is sent names the step number the card shows for it.

The answer cites evidence by step (`[3]`) and the progress card renders each citation as a
reference to its step, so the model and the card must number the same calls the same way. The
one rule both follow: **the steps of an analysis are the tool calls after the latest
`UserKind.TASK` message of the history, in history order (each assistant message's
`tool_calls` in order), numbered from 1.** Every call of a batch counts, whether it ran, was
refused by the budget, waited for approval or was answered "interrupted": each is on the card as
a step and in the history with its one answer. Steers and notices do not start a new analysis;
only a task does.

Contract:
- Pure and idempotent: `label_steps` returns new messages and never changes its input; a result
  already labelled is not labelled twice. The labels exist only in what is sent to the model,
  never in the persisted history or its journal.
- Numbers come from `history` (the full, persisted history); labels are put on `sent` (what
  goes out, which may be a compacted copy with some results stubbed or left out), matched by
  call id, so compaction never renumbers a step.
- The label is the result's last line (`[step 3]`), after any untrusted-data block has closed,
  so a tool's output cannot forge the label of its own result. At the end rather than the start:
  what a result starts with (the untrusted-data note, `error: …`, `not run: …`) stays the first
  thing the model reads of it.
"""

from __future__ import annotations

from collections.abc import Sequence

from agent_core._messages import AssistantMessage, Message, ToolMessage, UserKind, UserMessage

__all__ = ["label_steps", "step_label", "step_numbers"]


def step_label(number: int) -> str:
    """What the result of step `number` ends with: a last line `[step 3]`."""
    return f"\n[step {number}]"


def step_numbers(history: Sequence[Message]) -> dict[str, int]:
    """Each call id of the current analysis (after the latest task) and its step number."""
    start = 0
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if isinstance(message, UserMessage) and message.kind is UserKind.TASK:
            start = index + 1
            break
    numbers: dict[str, int] = {}
    for message in history[start:]:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                numbers.setdefault(call.id, len(numbers) + 1)
    return numbers


def label_steps(sent: Sequence[Message], history: Sequence[Message]) -> list[Message]:
    """`sent` with each tool result of the current analysis followed by its step label.

    Args:
        sent: The messages of the request (the system prompt, the history, maybe compacted).
        history: The history the step numbers are counted in (`step_numbers`).
    """
    numbers = step_numbers(history)
    labelled: list[Message] = []
    for message in sent:
        number = numbers.get(message.call_id) if isinstance(message, ToolMessage) else None
        if isinstance(message, ToolMessage) and number is not None:
            label = step_label(number)
            if not message.content.endswith(label):
                message = message.model_copy(update={"content": message.content + label})
        labelled.append(message)
    return labelled
