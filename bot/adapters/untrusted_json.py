r"""JSON from outside (webhook bodies, decrypted Feishu payloads, their nested JSON strings).

Contract (fault matrix X14): what `loads` returns holds only text that encodes as UTF-8, so
nothing downstream (the Redis write, a log line, a card) can fail on it; anything else is a
`MalformedRequest` (a 400 at the ingress), never a 500.

The stdlib's `json.loads` accepts a lone surrogate escape (`"\ud800"`) and returns a `str` that
cannot be encoded; a signed Slack message holding one reached the Redis write and ended in a 500
with a traceback. pydantic-core's `from_json` (jiter, already a dependency through pydantic)
refuses a lone leading or trailing surrogate escape while it parses, joins a valid pair (an
emoji sent as `"\ud83d\ude00"`), and refuses input that is not UTF-8, so the check costs no
second walk over the decoded structure. Its nesting limit (about 200 levels) is far above any
platform payload. `tests/bot/ingress/test_ingress_encoding.py` pins this behaviour on every route.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import from_json

from bot.errors import MalformedRequest

__all__ = ["loads"]


def loads(raw: bytes | str, *, what: str = "body") -> Any:
    """Parse untrusted JSON whose every string encodes as UTF-8.

    Args:
        raw: The JSON text, as sent (bytes must be UTF-8).
        what: What is parsed, for the error's detail (`body`, `message content`, ...).

    Raises:
        MalformedRequest: Not JSON, not UTF-8, a lone surrogate escape, or absurd nesting. The
            detail says where parsing stopped, never the text sent.
    """
    try:
        return from_json(raw)
    except ValueError as exc:  # jiter's errors name a line and column, never the content
        raise MalformedRequest(f"{what} is not JSON: {exc}") from exc
