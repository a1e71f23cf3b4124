"""The built-in `http_get` tool: allowlist parsing and refusals, against a real local service.

Why this way: the allowlist is the tool's only brake, so its parsing is tested on the entry
forms the contract names, and refusals are checked to be tool errors the model reads (never
exceptions), by calling the tool's handler the way a batch does.
"""

from __future__ import annotations

import httpx
import pytest

from agent_core import ConfigError, HostAllowlist, ToolFailed, http_get_tool
from agent_core.tools._http_get import MAX_BODY_CHARS
from tests.fakes.resolver import Answering
from tests.fakes.service import SlowService
from tests.tool_context import Ctx


@pytest.mark.parametrize(
    ("spec", "host", "port", "allowed"),
    [
        ("status.internal", "status.internal", 8443, True),
        ("status.internal:80", "status.internal", 80, True),
        ("status.internal:80", "status.internal", 81, False),
        (" A.example , b.example:9 ", "a.example", 1, True),
        ("a.example", "evil.example", 80, False),
        ("[::1]:8080", "::1", 8080, True),
        ("::1", "::1", 1, True),
        ("", "anything", 80, False),
    ],
)
def test_allowlist_entries(spec: str, host: str, port: int, allowed: bool) -> None:
    assert HostAllowlist.parse(spec).allows(host, port) is allowed


@pytest.mark.parametrize("spec", ["host:port", "host:", ":80"])
def test_malformed_allowlist_entries_are_config_errors(spec: str) -> None:
    with pytest.raises(ConfigError):
        HostAllowlist.parse(spec)


async def test_fetches_allowlisted_urls_and_refuses_the_rest(slow_service: SlowService) -> None:
    async with httpx.AsyncClient() as client:
        tool = http_get_tool(HostAllowlist.parse(f"127.0.0.1:{slow_service.port}"), client)
        assert tool.interruptible and tool.timeout_s == 10
        body = await tool.handler({"url": slow_service.url("/ok")}, Ctx())
        assert body == "HTTP 200 OK\nservice healthy"
        assert (await tool.handler({"url": slow_service.url("/nope")}, Ctx())).startswith(
            "HTTP 404"
        )
        for url, why in [
            ("http://127.0.0.1:1/ok", "not in CHATOPS_HTTP_ALLOWLIST"),
            ("file:///etc/passwd", "only http:// and https://"),
            (f"ftp://127.0.0.1:{slow_service.port}/", "only http:// and https://"),
            ("", "non-empty string"),
        ]:
            with pytest.raises(ToolFailed, match=why):
                await tool.handler({"url": url}, Ctx())


async def test_connection_errors_are_tool_errors() -> None:
    from tests.conftest import free_port

    port = free_port()
    async with httpx.AsyncClient() as client:
        tool = http_get_tool(HostAllowlist.parse(f"127.0.0.1:{port}"), client)
        with pytest.raises(ToolFailed, match="failed: ConnectError"):
            await tool.handler({"url": f"http://127.0.0.1:{port}/"}, Ctx())


async def test_a_secret_across_the_body_limit_is_redacted_before_the_cut() -> None:
    """A7: the body is redacted whole, then cut; no prefix of the token reaches the model."""
    token = "xoxb-" + "1234567890-" * 3 + "abcdefghijklmnopqrstuvwx"
    body = "." * (MAX_BODY_CHARS - 11) + " " + token

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        allow = HostAllowlist.parse("logs.internal,192.0.2.10")
        tool = http_get_tool(allow, client, resolver=Answering("192.0.2.10"))
        shown = await tool.handler({"url": "http://logs.internal/tail"}, Ctx())
    assert "xoxb-" not in shown and "[REDACTED" in shown
