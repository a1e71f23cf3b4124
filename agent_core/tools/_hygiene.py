"""Tool output hygiene: all a tool returns or raises is quoted as data before anyone reads it.

Contract (docs/reliability.md X2, X9; docs/reliability.md A1, A7): a tool wrapped by `guarded`
returns its text through `agent_core._untrusted.quote_untrusted`: capped, redacted, inside one
`<tool_output tool="…">…</tool_output>` block after a note saying it is untrusted data. Its
failures go the same way: a `ToolFailed`, or any other exception (as `TypeName: message`),
becomes a `QuotedFailure` reading `<tool> failed.`, the note and a `<tool_error>` block, and
keeps the original's `retryable` (so the batch retries what the tool said was transient). The
batch writes it after `error: `, so the first line still tells failure from success. A
`TimeoutError` passes unchanged (the batch words it without its text, and retries it), and
cancellation is never caught. A large text is scrubbed in a worker thread
(`aquote_untrusted`), so a big page does not stall the worker's event loop.

The wrapping happens here rather than in the batch executor so that what the model reads, what
the journal stores and what a card could show are all the same, already clean text, and so
that a toolset built for a test without it keeps its plain strings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agent_core._errors import ToolFailed
from agent_core._untrusted import UNTRUSTED_NOTE, QuoteKind, aquote_untrusted, quote_untrusted
from agent_core.tools._base import Tool, ToolContext, Toolset

__all__ = ["UNTRUSTED_NOTE", "QuotedFailure", "failure_text", "frame", "guarded"]


class QuotedFailure(ToolFailed):
    """A tool's failure whose text is already quoted as untrusted data."""


def frame(tool_name: str, text: str) -> str:
    """`text` redacted and framed as the untrusted output of `tool_name`."""
    return quote_untrusted(tool_name, text, kind=QuoteKind.TOOL_OUTPUT)


def failure_text(tool_name: str, quoted: str) -> str:
    """The text of a failure of `tool_name` whose own text, quoted, is `quoted`."""
    return f"{tool_name} failed.\n{quoted}"


def guarded(toolset: Toolset) -> Toolset:
    """The same tools, each returning framed, redacted text and raising framed failures."""
    return Toolset.of(_guarded(tool) for tool in toolset)


async def _quoted_failure(tool: Tool, exc: Exception) -> QuotedFailure:
    if isinstance(exc, QuotedFailure):
        return exc
    if isinstance(exc, ToolFailed):
        text, retryable = str(exc), exc.retryable
    else:
        text, retryable = f"{type(exc).__name__}: {exc}", False
    quoted = await aquote_untrusted(tool.name, text, kind=QuoteKind.TOOL_ERROR)
    return QuotedFailure(failure_text(tool.name, quoted), retryable=retryable)


def _guarded(tool: Tool) -> Tool:
    inner = tool.handler

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        try:
            output = await inner(args, ctx)
        except TimeoutError:
            raise
        except Exception as exc:
            raise await _quoted_failure(tool, exc) from exc
        return await aquote_untrusted(tool.name, output, kind=QuoteKind.TOOL_OUTPUT)

    return dataclasses.replace(tool, handler=handler)
