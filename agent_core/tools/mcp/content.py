"""What the model reads of an MCP tool result: its text, with other content named, not shown.

Text blocks (and the text of embedded text resources) are joined with newlines. Images, audio
and binary resources are replaced by a short marker (`[image omitted: image/png]`): the chat
model is asked for text, and base64 would only spend its context. Structured content is shown
as JSON only when the result carries no content blocks at all (the spec asks servers that return
structured content to repeat it as text). The whole text is redacted, then cut to
`MAX_RESULT_CHARS`, in that order so that no prefix of a secret cut at the limit survives.
"""

from __future__ import annotations

import json

import mcp_types

from agent_core.redaction import redact

__all__ = ["MAX_RESULT_CHARS", "render_result"]

MAX_RESULT_CHARS = 8_000
"""Results longer than this are cut (logs can be long; the model's context is not)."""


def _block_text(block: mcp_types.ContentBlock) -> str:
    match block:
        case mcp_types.TextContent():
            return block.text
        case mcp_types.ImageContent():
            return f"[image omitted: {block.mime_type}]"
        case mcp_types.AudioContent():
            return f"[audio omitted: {block.mime_type}]"
        case mcp_types.ResourceLink():
            return f"[resource link: {block.uri}]"
        case mcp_types.EmbeddedResource(resource=mcp_types.TextResourceContents() as inner):
            return inner.text
        case mcp_types.EmbeddedResource():
            return f"[binary resource omitted: {block.resource.uri}]"
    return f"[{type(block).__name__} omitted]"


def render_result(result: mcp_types.CallToolResult) -> str:
    """The text the model reads for `result` (error results too)."""
    if result.content:
        full = "\n".join(_block_text(block) for block in result.content)
    elif result.structured_content is not None:
        full = json.dumps(result.structured_content, ensure_ascii=False)
    else:
        full = ""
    full = redact(full)
    if len(full) <= MAX_RESULT_CHARS:
        return full
    cut = len(full) - MAX_RESULT_CHARS
    return f"{full[:MAX_RESULT_CHARS]}\n… [truncated {cut} characters]"
