"""Address checks after resolution (X15): `http_get` and `http_probe` with a chosen resolver.

Why this way: the allowlist names hosts, but a host's DNS answer is what a connection reaches,
so each case makes an allowlisted name resolve to a chosen address through the tools' injected
resolver (`tests.fakes.resolver.Answering`) and checks the refusal, or, for an address the
allowlist names, the request arriving at a real loopback server (with the name as its `Host`).
The rebinding case answers a second lookup differently and shows there is none: one lookup per
call, and the connection made to the first answer. Where TLS matters, an httpx MockTransport
shows the request httpcore would send: the IP in the URL, the name in `Host` and SNI.
"""

from __future__ import annotations

import ipaddress
import socket

import httpx
import pytest

from agent_core import ConfigError, HostAllowlist, ToolFailed, http_get_tool
from agent_core.tools._address_policy import refusal_reason, resolve_target
from agent_core.tools._http_probe import http_probe_tool
from tests.fakes.bomb_server import BombServer
from tests.fakes.resolver import Answering
from tests.tool_context import Ctx


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "a cloud metadata address"),
        ("10.0.0.1", "private"),
        ("::1", "loopback"),
        ("fd00:ec2::254", "a cloud metadata address"),
        ("100.100.100.200", "a cloud metadata address"),
        ("192.168.1.10", "private"),
        ("172.16.0.1", "private"),
        ("fc00::1", "private"),
        ("fe80::1", "link-local"),
        ("169.254.10.10", "link-local"),
        ("100.64.0.1", "shared address space (RFC 6598)"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "private"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "a cloud metadata address"),
        ("2002:a9fe:a9fe::", "a cloud metadata address"),  # 6to4 of 169.254.169.254
        ("64:ff9b::a00:1", "private"),  # NAT64 of 10.0.0.1
        ("8.8.8.8", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_addresses_that_are_not_public_are_named_with_their_reason(
    address: str, why: str | None
) -> None:
    """X15: the classification a refusal cites; public addresses pass."""
    assert refusal_reason(ipaddress.ip_address(address)) == why


@pytest.mark.parametrize("address", ["127.0.0.1", "169.254.169.254", "10.0.0.1", "::1"])
async def test_an_allowlisted_name_resolving_to_a_private_address_is_refused(
    address: str,
) -> None:
    """X15: refused with a clear tool error naming the address; nothing is sent."""
    sent: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    allow = HostAllowlist.parse("status.internal")
    async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
        for tool in (
            http_get_tool(allow, client, resolver=Answering(address)),
            http_probe_tool(allow, client, resolver=Answering(address)),
        ):
            with pytest.raises(ToolFailed, match=f"resolves to {address} .*does not name"):
                await tool.handler({"url": "http://status.internal/health"}, Ctx())
    assert sent == []


async def test_an_explicitly_allowlisted_address_is_admitted_and_connected_to() -> None:
    """X15: a name resolving to 127.0.0.1 is fetched when the allowlist names that address."""
    async with BombServer() as server, httpx.AsyncClient() as client:
        allow = HostAllowlist.parse(f"status.internal,127.0.0.1:{server.port}")
        resolver = Answering("127.0.0.1")
        tool = http_get_tool(allow, client, resolver=resolver)
        shown = await tool.handler({"url": f"http://status.internal:{server.port}/text?n=2"}, Ctx())
        probe = http_probe_tool(allow, client, resolver=resolver)
        probed = await probe.handler(
            {"url": f"http://status.internal:{server.port}/text?n=2"}, Ctx()
        )
    assert shown == "HTTP 200 OK\naa"
    assert probed.startswith(f"GET http://status.internal:{server.port}/text?n=2 at 127.0.0.1\n")
    assert server.connections == 2
    assert all(f"Host: status.internal:{server.port}".encode() in h for h in server.heads)


async def test_a_range_entry_admits_its_addresses_only_at_its_port() -> None:
    """X15: `127.0.0.0/8:<port>` admits the name's loopback answer there, not at another port."""
    async with BombServer() as server, httpx.AsyncClient() as client:
        allow = HostAllowlist.parse(f"status.internal,127.0.0.0/8:{server.port}")
        tool = http_get_tool(allow, client, resolver=Answering("127.0.0.1"))
        assert await tool.handler({"url": f"http://status.internal:{server.port}/text?n=1"}, Ctx())
        with pytest.raises(ToolFailed, match="127.0.0.1 \\(loopback\\)"):
            await tool.handler({"url": f"http://status.internal:{server.port + 1}/"}, Ctx())


async def test_the_connection_goes_to_the_checked_address_with_no_second_lookup() -> None:
    """X15: a resolver that answers 169.254.169.254 the second time is asked only once per call."""
    async with BombServer() as server, httpx.AsyncClient() as client:
        allow = HostAllowlist.parse(f"status.internal,127.0.0.1:{server.port}")
        rebinding = Answering("127.0.0.1", "169.254.169.254")
        tool = http_get_tool(allow, client, resolver=rebinding)
        url = f"http://status.internal:{server.port}/text?n=3"
        assert await tool.handler({"url": url}, Ctx()) == "HTTP 200 OK\naaa"
        assert rebinding.lookups == [("status.internal", server.port)]
        assert server.connections == 1
        with pytest.raises(ToolFailed, match="169.254.169.254 \\(a cloud metadata address\\)"):
            await tool.handler({"url": url}, Ctx())  # the next call's own lookup is checked
    assert server.connections == 1


async def test_the_first_admitted_answer_is_used_and_https_keeps_the_name_for_tls() -> None:
    """X15: of several answers, refused ones are skipped; the request names the checked IP."""
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, text="ok")

    async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
        allow = HostAllowlist.parse("status.example")
        resolver = Answering(["169.254.169.254", "2606:4700:4700::1111", "8.8.8.8"])
        tool = http_get_tool(allow, client, resolver=resolver)
        await tool.handler({"url": "https://status.example:8443/health"}, Ctx())
    [request] = seen
    assert str(request.url) == "https://[2606:4700:4700::1111]:8443/health"
    assert request.headers["host"] == "status.example:8443"
    assert request.extensions["sni_hostname"] == "status.example"


async def test_an_ip_literal_url_needs_no_lookup_and_gets_no_sni() -> None:
    """X15: a URL naming an allowlisted address is checked as it is; TLS names the address."""
    resolver = Answering("8.8.8.8")
    target = await resolve_target(
        "https://10.1.2.3/health", HostAllowlist.parse("10.0.0.0/8"), resolver
    )
    assert (target.address, target.extensions, resolver.lookups) == ("10.1.2.3", {}, [])
    with pytest.raises(ToolFailed, match="not in CHATOPS_HTTP_ALLOWLIST"):
        await resolve_target(
            "http://169.254.169.254/latest/meta-data/", HostAllowlist.parse("10.0.0.0/8"), resolver
        )


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"), True),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), False),
    ],
)
async def test_a_name_that_does_not_resolve_is_a_tool_error(
    error: socket.gaierror, retryable: bool
) -> None:
    """X15: a lookup failure is a tool error; only the resolver's transient one is retried."""

    async def failing(host: str, port: int) -> list[str]:
        raise error

    async with httpx.AsyncClient() as client:
        tool = http_get_tool(HostAllowlist.parse("status.internal"), client, resolver=failing)
        with pytest.raises(ToolFailed, match="could not resolve status.internal") as caught:
            await tool.handler({"url": "http://status.internal/"}, Ctx())
    assert caught.value.retryable is retryable


async def test_a_refused_connection_to_a_checked_address_is_still_retryable() -> None:
    """X15: the address check keeps retries: a connect failure stays `retryable`."""
    from tests.conftest import free_port

    port = free_port()
    async with httpx.AsyncClient() as client:
        allow = HostAllowlist.parse(f"status.internal,127.0.0.1:{port}")
        tool = http_get_tool(allow, client, resolver=Answering("127.0.0.1"))
        with pytest.raises(ToolFailed, match="\\(127.0.0.1\\) failed: ConnectError") as caught:
            await tool.handler({"url": f"http://status.internal:{port}/"}, Ctx())
    assert caught.value.retryable is True


@pytest.mark.parametrize(
    ("spec", "host", "port", "allowed"),
    [
        ("10.0.0.0/8", "10.20.30.40", 9090, True),
        ("10.0.0.0/8:9090", "10.20.30.40", 9091, False),
        ("[fd00::/8]:443", "fd12::1", 443, True),
        ("fd00::/8", "fd12::1", 80, True),
        ("127.0.0.1", "127.0.0.2", 80, False),
        ("10.0.0.0/8", "status.internal", 80, False),
    ],
)
def test_address_and_range_entries(spec: str, host: str, port: int, allowed: bool) -> None:
    """X15: the allowlist's address forms: an address, a range, with or without a port."""
    assert HostAllowlist.parse(spec).allows(host, port) is allowed


@pytest.mark.parametrize("spec", ["10.0.0.1/8", "10.0.0.0/33", "[fd00::/129]:443"])
def test_malformed_ranges_are_config_errors(spec: str) -> None:
    """X15: a range with host bits set or a bad prefix is a typo, refused at start."""
    with pytest.raises(ConfigError, match="not a valid address or range"):
        HostAllowlist.parse(spec)
