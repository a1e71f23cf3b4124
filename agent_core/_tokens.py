"""Token estimates of text, for bounds that must hold before a provider counts.

`estimate_tokens` is linear in its input and never under-counts by much for the texts this
project sends: about four characters a token for ASCII text (English, JSON, logs), one token a
character for CJK and other wide scripts. Callers that need a provider's exact figure calibrate
against its reported `usage.prompt_tokens`.
"""

from __future__ import annotations

__all__ = ["estimate_tokens"]

_ASCII_CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """About how many tokens `text` costs a model: ASCII at four characters, the rest at one."""
    if not text:
        return 0
    ascii_chars = len(text.encode("ascii", "ignore"))
    wide = len(text) - ascii_chars
    return -(-ascii_chars // _ASCII_CHARS_PER_TOKEN) + wide
