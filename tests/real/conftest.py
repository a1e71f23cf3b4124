"""Fixtures of the tests against a real llama-cpp-python server (`make test-real`).

Those tests are marked `real`. `make test-real` starts the server and gives its URL in
`CHATOPS_REAL_LLAMA_URL`; without it they are deselected (and reported so), so `make test` and
`pytest -m "not slow"` never run them. They are not deselected through `addopts = -m "not real"`:
a later `-m` replaces the one in addopts, and `pytest -m "not slow"` would have picked them up
again. Asked for explicitly (`-m real`) without a server, they fail: nothing passes silently.

Every exchange with the server goes through a recording proxy (tests/real/recording_proxy.py);
with `CHATOPS_REAL_RECORD_DIR` set, each test's exchanges are written there under the names the
test gives (`record_as`): `make test-real RECORD=1` made tests/data/replay/llama-cpp/ so.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bot.settings import Settings
from tests.inprocess_bot import SECRET
from tests.real.llama_server import ALIAS
from tests.real.recording_proxy import RecordingProxy

URL_ENV = "CHATOPS_REAL_LLAMA_URL"
VERSION_ENV = "CHATOPS_REAL_LLAMA_VERSION"
RECORD_ENV = "CHATOPS_REAL_RECORD_DIR"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the `real` tests when no server was given, unless `-m` names them."""
    if os.environ.get(URL_ENV) or "real" in (config.option.markexpr or ""):
        return
    real = [item for item in items if item.get_closest_marker("real") is not None]
    if real:
        config.hook.pytest_deselected(items=real)
        items[:] = [item for item in items if item.get_closest_marker("real") is None]


@dataclass(frozen=True)
class LlamaServer:
    """The real server `make test-real` started."""

    url: str
    version: str

    @property
    def name(self) -> str:
        return f"llama-cpp-python {self.version} (python -m llama_cpp.server, model {ALIAS})"


@pytest.fixture(scope="session")
def llama_server() -> LlamaServer:
    url = os.environ.get(URL_ENV)
    if not url:
        pytest.fail(f"{URL_ENV} is not set: run these tests with `make test-real`")
    server = LlamaServer(url.rstrip("/"), os.environ.get(VERSION_ENV, "unknown"))
    print(f"\nreal model server: {server.name} at {server.url}")
    return server


@pytest.fixture
def llama_proxy(
    llama_server: LlamaServer, request: pytest.FixtureRequest, record_property
) -> Iterator[RecordingProxy]:
    """A recording proxy in front of the server; its exchanges saved when recording is on."""
    record_property("model_server", llama_server.name)
    proxy = RecordingProxy(llama_server.url.removesuffix("/v1"))
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()
        if folder := os.environ.get(RECORD_ENV):
            proxy.save(Path(folder), proxy.record_as)


@pytest.fixture
def real_settings(redis_server, llama_proxy, slack_api, slow_service) -> Callable[..., Settings]:
    """Build the bot's settings against the real server, through the proxy; one step of tools.

    Keyword arguments are more settings by their variable names (`CHATOPS_TOOL_CHOICE="omit"`).
    """

    def build(**more: Any) -> Settings:
        values: dict[str, Any] = {
            "REDIS_URL": redis_server,
            "OPENAI_BASE_URL": llama_proxy.base_url,
            "OPENAI_API_KEY": "unused",
            "CHATOPS_MODEL": ALIAS,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_BOT_TOKEN": slack_api.token,
            "SLACK_API_URL": slack_api.base_url,
            "CHATOPS_HTTP_ALLOWLIST": f"127.0.0.1:{slow_service.port}",
            "CHATOPS_INTENT_CHECK": "off",
            # One request with tools, then the tool-less wrap-up for the answer: the tiny model
            # forced to call tools would call them until the budget ran out.
            "CHATOPS_MAX_STEPS": 1,
            "CHATOPS_THREAD_CONTEXT_TOKENS": 0,
            "CHATOPS_CONTEXT_WINDOW_TOKENS": 8192,  # the server's --n_ctx
            "CHATOPS_ANSWER_RESERVE_TOKENS": 1024,
        }
        return Settings(_env_file=None, **(values | more))

    return build
