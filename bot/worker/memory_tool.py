"""The read-only `past_analyses` tool: what earlier analyses of the same alert or words found.

Contract: `past_analyses(query, days)` searches the memory of past analyses
(`bot.state.memory.MemoryBook.search`: the same alert, by name, or the same words; `days`
defaults to `CHATOPS_MEMORY_DAYS` and never reaches past it) and lists at most `MAX_SHOWN`
analyses, most recent first: when (UTC), the alert and its labels, the task, the answer, each
cut (`MAX_TASK_CHARS`, `MAX_ANSWER_CHARS`), the whole within `MAX_OUTPUT_CHARS`. An answer a
person marked wrong says so on its own line ("MARKED WRONG by … — do not rely on it"), before
the answer. None found is "no earlier analyses …". The tool is read-only, abortable and
idempotent; like every tool's, its output is quoted as untrusted data by `guarded` (a past
answer is data, not instructions). Redis failing is a retryable tool error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agent_core import Interruptibility, Risk, StoreError, Tool, ToolContext, ToolFailed
from bot.state.memory import MemoryBook, PastAnalysis

__all__ = ["PAST_ANALYSES", "past_analyses_tool", "render_past"]

PAST_ANALYSES = "past_analyses"
MAX_SHOWN = 5
"""Analyses listed per call."""
MAX_TASK_CHARS = 600
MAX_ANSWER_CHARS = 3_000
MAX_LABELS_SHOWN = 12
MAX_LABEL_CHARS = 80
MAX_QUERY_SHOWN = 200
MAX_OUTPUT_CHARS = 20_000
"""The whole answer, at most: analyses past it are counted, not shown."""
TIMEOUT_S = 10.0


def past_analyses_tool(memory: MemoryBook) -> Tool:
    """`past_analyses` over `memory`."""

    async def search(args: Mapping[str, Any], ctx: ToolContext) -> str:
        days = max(1, min(int(args.get("days", memory.days)), memory.days))
        query = str(args["query"])
        try:
            found = await memory.search(query, days=days, limit=MAX_SHOWN)
        except StoreError as exc:
            raise ToolFailed(
                f"the memory of past analyses cannot be read: {exc}", retryable=True
            ) from exc
        return render_past(found, query=query, days=days)

    return Tool(
        name=PAST_ANALYSES,
        description=(
            "Earlier analyses this bot made (most recent first, the last "
            f"{memory.days} days by default): those of the same alert (give the alert's name) "
            "or on the same words (the service, the symptom). Each with when it was (UTC), the "
            "alert and its labels, the task it was given and the answer it gave; an answer a "
            "person marked wrong says so. What was found last time is a lead to check, not a "
            "fact about now."
        ),
        parameters={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The alert's name, or words to look for (service, symptom)",
                },
                "days": {
                    "type": "integer",
                    "minimum": 1,
                    "description": f"Days to look back (default and at most {memory.days})",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        handler=search,
        interruptibility=Interruptibility.ABORTABLE,
        timeout_s=TIMEOUT_S,
        risk=Risk.READ_ONLY,
    )


def render_past(found: Sequence[PastAnalysis], *, query: str, days: int) -> str:
    """What the model reads of `found` (already most recent first)."""
    asked = " ".join(query.split())
    if len(asked) > MAX_QUERY_SHOWN:
        asked = asked[: MAX_QUERY_SHOWN - 1] + "…"
    if not found:
        return f"no earlier analyses for {asked!r} in the last {days} days"
    many = "analysis" if len(found) == 1 else "analyses"
    lines = [
        f"{len(found)} earlier {many} for {asked!r} in the last {days} days, most recent first:"
    ]
    size = len(lines[0])
    for rank, past in enumerate(found, 1):
        entry = "\n".join(_entry(rank, past))
        if size + len(entry) > MAX_OUTPUT_CHARS:
            lines.append(f"({len(found) - rank + 1} more not shown: the answer's room is used up)")
            break
        lines.append(entry)
        size += len(entry) + 1
    return "\n".join(lines)


def _entry(rank: int, past: PastAnalysis) -> list[str]:
    head = f"{rank}. {_utc(past.when)}"
    if past.alert_name:
        head += f" · alert {_cut(past.alert_name, MAX_LABEL_CHARS)}"
    if labels := _labels(past.labels):
        head += f" {{{labels}}}"
    head += f" · {past.platform} analysis {past.turn_id}"
    lines = [head]
    if past.wrong_by:
        lines.append(
            f"   MARKED WRONG by {_cut(past.wrong_by, MAX_LABEL_CHARS)} at "
            f"{_utc(past.wrong_at)} — do not rely on it"
        )
    lines.append(f"   task: {_cut(' '.join(past.task.split()), MAX_TASK_CHARS)}")
    answer = _cut(past.answer.strip(), MAX_ANSWER_CHARS)
    lines.append("   answer:")
    lines.extend(f"     {line}" for line in answer.splitlines() if line.strip())
    return lines


def _labels(labels: Sequence[tuple[str, str]]) -> str:
    shown = [
        f"{_cut(k, MAX_LABEL_CHARS)}={_cut(v, MAX_LABEL_CHARS)}"
        for k, v in labels[:MAX_LABELS_SHOWN]
    ]
    if len(labels) > MAX_LABELS_SHOWN:
        shown.append(f"… {len(labels) - MAX_LABELS_SHOWN} more")
    return ", ".join(shown)


def _utc(when: float) -> str:
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
