"""`CHATOPS_TOOL_CHOICE`: the enum's values, `function:<tool name>`, and what start-up refuses."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agent_core import ForcedTool, ToolChoice
from bot.settings import Settings
from bot.worker.model import build_chat_model


def tool_choice(value: str) -> ToolChoice | ForcedTool:
    return Settings(_env_file=None, CHATOPS_TOOL_CHOICE=value).tool_choice


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("auto", ToolChoice.AUTO),
        ("required", ToolChoice.REQUIRED),
        ("omit", ToolChoice.OMIT),
        ("function:http_get", ForcedTool("http_get")),
        (" function: prometheus_query ", ForcedTool("prometheus_query")),
    ],
)
def test_a_tool_choice_is_parsed(value: str, parsed: ToolChoice | ForcedTool) -> None:
    assert tool_choice(value) == parsed


def test_the_default_is_auto() -> None:
    assert Settings(_env_file=None).tool_choice is ToolChoice.AUTO


@pytest.mark.parametrize("value", ["function:", "function:   "])
def test_a_forced_tool_without_a_name_is_refused(value: str) -> None:
    with pytest.raises(ValidationError, match=r"function: needs a tool's name"):
        tool_choice(value)


@pytest.mark.parametrize("value", ["bogus", "prometheus_query", "", "x" * 10_000])
def test_another_value_is_refused_with_the_choices(value: str) -> None:
    with pytest.raises(ValidationError, match="is not auto, required, omit or function:") as err:
        tool_choice(value)
    assert len(str(err.value)) < 1000  # a long value is not echoed whole


async def test_the_model_is_built_with_the_forced_tool() -> None:
    settings = Settings(_env_file=None, CHATOPS_TOOL_CHOICE="function:http_get")
    model, client = build_chat_model(settings)
    try:
        assert model._tool_choice == ForcedTool("http_get")
    finally:
        await client.close()
