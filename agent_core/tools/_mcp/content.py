"""What the model reads of an MCP tool result: its text, with other content named, not shown.

Text blocks (and the text of embedded text resources) are joined with newlines. Images, audio
and binary resources are replaced by a short marker (`[image omitted: image/png]`): the chat
model is asked for text, and base64 would only spend its context. Structured content is shown
as JSON only when the result carries no content blocks at all (the spec asks servers that return
structured content to repeat it as text).

Bounded first: before anything joins, serialises or redacts it, the result is taken block by
block up to `max_bytes` bytes of UTF-8 (`CHATOPS_TOOL_MAX_BYTES`; structured content serialised
piece by piece, so a huge object is never written out whole), each block cut in time
proportional to what is kept; an oversized result ends with a truncation notice. Then the text
is redacted and cut to `MAX_RESULT_CHARS`, in that order, so that no prefix of a secret cut at
the limit survives; only the part shown and `REDACTION_MARGIN_CHARS` after it are scanned.

Not bounded here: the `mcp` client has already read and parsed the JSON-RPC message (its stdio
transport reads a line of any length, its HTTP transport caps an SSE event at 1 MiB by default
but reads a JSON answer whole), so a server can still make the worker hold one large message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import mcp_types

from agent_core._redaction import redact

__all__ = ["DEFAULT_MAX_BYTES", "MAX_RESULT_CHARS", "render_result"]

MAX_RESULT_CHARS = 8_000
"""Results longer than this are cut (logs can be long; the model's context is not)."""
DEFAULT_MAX_BYTES = 1_048_576
"""Bytes of a result read at most, unless configured otherwise."""
REDACTION_MARGIN_CHARS = 16_000
"""Characters past the cut redacted with the shown part, so a secret across it is seen whole."""


def _block_text(block: mcp_types.ContentBlock) -> str:
    match block:
        case mcp_types.TextContent():
            return block.text
        case mcp_types.ImageContent():
            return f"[image omitted: {block.mime_type}]"
        case mcp_types.AudioContent():
            return f"[audio omitted: {block.mime_type}]"
        case mcp_types.ResourceLink():
            return f"[resource link: {_prefix(str(block.uri), 512)}]"
        case mcp_types.EmbeddedResource(resource=mcp_types.TextResourceContents() as inner):
            return inner.text
        case mcp_types.EmbeddedResource():
            return f"[binary resource omitted: {_prefix(str(block.resource.uri), 512)}]"
    return f"[{type(block).__name__} omitted]"


def _prefix(text: str, room: int) -> str:
    """The longest prefix of `text` of at most `room` UTF-8 bytes, in O(room) time."""
    head = text[:room].encode("utf-8", errors="replace")  # ≥ 1 byte per character
    return head[:room].decode("utf-8", errors="ignore")  # a character cut in two is dropped


def _pieces(result: mcp_types.CallToolResult) -> Iterator[str]:
    """The result's text in pieces, each produced only when asked for."""
    if result.content:
        for index, block in enumerate(result.content):
            yield ("\n" if index else "") + _block_text(block)
    elif result.structured_content is not None:
        try:
            yield from json.JSONEncoder(ensure_ascii=False).iterencode(result.structured_content)
        except RecursionError:  # the encoder recurses once per level of nesting
            yield "\n[structured content nested too deeply to show]"


def _bounded(result: mcp_types.CallToolResult, max_bytes: int) -> tuple[str, bool]:
    """At most `max_bytes` bytes of the result's text, and whether anything was left out."""
    kept: list[str] = []
    room = max_bytes
    for piece in _pieces(result):
        head = _prefix(piece, room)
        kept.append(head)
        room -= len(head.encode("utf-8", errors="replace"))
        if len(head) < len(piece):
            return "".join(kept), True
    return "".join(kept), False


def render_result(result: mcp_types.CallToolResult, *, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """The text the model reads for `result` (error results too), read up to `max_bytes`."""
    full, truncated = _bounded(result, max_bytes)
    window = MAX_RESULT_CHARS + REDACTION_MARGIN_CHARS
    shown = redact(full[:window])
    left = len(shown) - MAX_RESULT_CHARS + max(0, len(full) - window)
    if left > 0:
        shown = f"{shown[:MAX_RESULT_CHARS]}\n… [truncated {left} characters]"
    if truncated:
        shown += f"\n[truncated: read the first {max_bytes} bytes of a longer result]"
    return shown
