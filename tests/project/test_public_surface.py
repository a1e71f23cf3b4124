"""The public surface: exported names, the CLI's help, settings from the environment.

Why this way: `__all__` is the documented Python API, so it is pinned (an accidental export or a
removal fails here first); the CLI is driven as a user runs it, through the installed
console script.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import agent_core
import agent_core.tools
from bot.settings import Settings


def test_agent_core_exports_exactly_its_all() -> None:
    public = {name for name in dir(agent_core) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(agent_core, name)).__name__ == "module"}
    assert public - modules == set(agent_core.__all__)
    assert {"Runtime", "TurnRequest", "ControlPlane", "validate_history"} <= set(agent_core.__all__)


def test_tools_package_exports() -> None:
    assert sorted(agent_core.tools.__all__) == [
        "HostAllowlist",
        "Interruptibility",
        "READ_RUNBOOK",
        "RetryPolicy",
        "Risk",
        "RunbookLibrary",
        "RunbookLimits",
        "SEARCH_RUNBOOKS",
        "Tool",
        "ToolContext",
        "ToolHandler",
        "Toolset",
        "http_get_tool",
        "runbook_tools",
    ]


@pytest.mark.parametrize("args", [["--help"], ["demo", "--help"], ["version", "--help"]])
def test_every_command_has_help(args: list[str]) -> None:
    exe = Path(sys.executable).with_name("chatops")  # the venv's console script
    assert exe.exists(), "the chatops console script is installed by `make install`"
    done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "Usage" in done.stdout


def test_settings_read_the_contract_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("CHATOPS_HTTP_ALLOWLIST", "a.example,b.example:8080")
    monkeypatch.setenv("CHATOPS_LEASE_TTL_S", "12.5")
    monkeypatch.setenv("CHATOPS_MODEL", "m-1")
    settings = Settings(_env_file=None)
    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-secret"
    assert "sk-secret" not in repr(settings)
    assert settings.http_allowlist == "a.example,b.example:8080"
    assert settings.lease_ttl_s == 12.5 and settings.model == "m-1"


async def test_model_client_is_built_from_the_environment(monkeypatch, fake_llm) -> None:
    from agent_core import Toolset, UserMessage
    from bot.worker.model import build_chat_model
    from tests.fakes.openai_provider import TextReply

    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("CHATOPS_MODEL", "model-from-env")
    fake_llm.script(TextReply("hello"))
    model, client = build_chat_model(Settings(_env_file=None))
    try:
        response = await model.respond([UserMessage(content="hi")], Toolset.of([]))
    finally:
        await client.close()
    assert response.message.content == "hello"
    request = fake_llm.requests[0]
    assert request.body["model"] == "model-from-env"
    assert request.headers["authorization"] == "Bearer sk-from-env"


def test_the_processes_that_call_no_model_do_not_import_the_openai_sdk() -> None:
    """The ingress and the scheduler start without `openai` (about a second of CPU to import)."""
    probe = (
        "import sys\n"
        "import agent_core, bot.ingress.app, bot.ops.scheduler\n"
        "assert 'openai' not in sys.modules\n"
        "from bot.settings import Settings\n"
        "from bot.worker.model import build_chat_model\n"
        "build_chat_model(Settings(_env_file=None))\n"
        "assert 'openai' in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
