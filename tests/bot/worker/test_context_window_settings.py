"""The context window's two settings, as an operator sets them.

Why this way: the settings are read from the environment by the one `Settings` object, so the
test sets environment variables and reads what a worker would build its `LoopLimits` from; a
reserve that leaves no room is refused at start-up by both, with a message naming the setting.
"""

from __future__ import annotations

import pydantic
import pytest

from agent_core import ConfigError, LoopLimits
from bot.settings import Settings


def test_the_window_and_reserve_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHATOPS_CONTEXT_WINDOW_TOKENS", "16000")
    monkeypatch.setenv("CHATOPS_ANSWER_RESERVE_TOKENS", "2048")
    settings = Settings(_env_file=None)
    limits = LoopLimits(
        context_window_tokens=settings.context_window_tokens,
        answer_reserve_tokens=settings.answer_reserve_tokens,
    )
    assert (limits.context_window_tokens, limits.answer_reserve_tokens) == (16_000, 2_048)


def test_the_defaults_are_128k_and_4096(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATOPS_CONTEXT_WINDOW_TOKENS", raising=False)
    monkeypatch.delenv("CHATOPS_ANSWER_RESERVE_TOKENS", raising=False)
    settings = Settings(_env_file=None)
    assert (settings.context_window_tokens, settings.answer_reserve_tokens) == (128_000, 4_096)
    assert LoopLimits().context_window_tokens == 128_000


def test_a_reserve_of_half_the_window_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATOPS_CONTEXT_WINDOW_TOKENS", "8000")
    monkeypatch.setenv("CHATOPS_ANSWER_RESERVE_TOKENS", "4000")
    with pytest.raises(pydantic.ValidationError, match="CHATOPS_CONTEXT_WINDOW_TOKENS"):
        Settings(_env_file=None)
    with pytest.raises(ConfigError, match="less than half the context window"):
        LoopLimits(context_window_tokens=8_000, answer_reserve_tokens=4_000)
