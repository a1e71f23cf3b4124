"""The `http_probe` tool against real local HTTPS servers with certificates issued in the test.

Why this way: what the probe reports about TLS comes from a real handshake, so each case runs
one: `trustme` issues a CA and leaf certificates (valid, expired, from an untrusted CA, for
another host) and an asyncio TLS server answers plain HTTP/1.1 over them; the client trusts
only the test CA, as production trusts the system store. Certificate dates are fixed and the
tool's clock is pinned, so "days left" never depends on when the test runs; latency is only
checked to be reported, never its value. The expired and untrusted cases also run through the
real `Runtime` once, to show the model reads them as a normal result, not an error.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import trustme

from agent_core import ToolFailed, TurnRequest, UserMessage
from agent_core._messages import ToolMessage, ToolStatus
from agent_core.tools._http_get import HostAllowlist
from agent_core.tools._http_probe import http_probe_tool
from tests.conftest import free_port
from tests.fakes import openai_provider as fp
from tests.fakes.service import SlowService
from tests.tool_context import Ctx

NOT_AFTER = datetime(2099, 1, 31, tzinfo=UTC)
"""The valid certificates' expiry; the tool's clock is set relative to it."""

_ANSWERS = {
    "/ok": b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nhealthy",
    "/down": b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
    "/old": b"HTTP/1.1 301 Moved Permanently\r\nLocation: /ok\r\nContent-Length: 0\r\n\r\n",
}


class TlsService:
    """An HTTP/1.1 server over TLS with one leaf certificate; counts handshakes attempted."""

    def __init__(self, leaf: trustme.LeafCert) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        leaf.configure_cert(self.context)
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(
            self._handle, "127.0.0.1", 0, ssl=self.context, ssl_handshake_timeout=5
        )
        return int(self.server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ")[1].decode()
            writer.write(_ANSWERS.get(path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass  # the client refused our certificate, or went away
        finally:
            writer.close()


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA(organization_name="chatops test CA")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[trustme.LeafCert], Awaitable[tuple[str, TlsService]]]]:
    services: list[TlsService] = []

    async def start(leaf: trustme.LeafCert) -> tuple[str, TlsService]:
        service = TlsService(leaf)
        services.append(service)
        return f"https://localhost:{await service.start()}", service

    yield start
    for service in services:
        assert service.server is not None
        service.server.close()
        await service.server.wait_closed()


def issue(ca: trustme.CA, host: str = "localhost", *, expired: bool = False) -> trustme.LeafCert:
    if expired:
        return ca.issue_cert(
            host,
            common_name=host,
            not_before=datetime(2019, 1, 1, tzinfo=UTC),
            not_after=datetime(2020, 1, 1, tzinfo=UTC),
        )
    return ca.issue_cert(
        host, common_name=host, not_before=datetime(2020, 1, 1, tzinfo=UTC), not_after=NOT_AFTER
    )


def trusting(ca: trustme.CA) -> httpx.AsyncClient:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return httpx.AsyncClient(verify=context)


def loopback_named(url: str) -> HostAllowlist:
    """`localhost` at the URL's port, and the loopback address it resolves to, named explicitly.

    The connection goes to 127.0.0.1 while TLS verifies the certificate for `localhost` (SNI).
    """
    port = httpx.URL(url).port
    return HostAllowlist.parse(f"localhost:{port},127.0.0.1:{port}")


async def probe(url: str, client: httpx.AsyncClient, *, days_left: int = 40) -> list[str]:
    """Probe `url` at a time `days_left` days and 6 hours before `NOT_AFTER`."""
    allow = loopback_named(url)
    now = NOT_AFTER - timedelta(days=days_left, hours=6)
    tool = http_probe_tool(allow, client, clock=lambda: now)
    return (await tool.handler({"url": url}, Ctx())).splitlines()


def latency(line: str, status: str) -> None:
    assert re.fullmatch(rf"HTTP {status} in [0-9]+ ms", line), line


async def test_a_healthy_https_endpoint_reports_status_latency_and_certificate(ca, serve) -> None:
    base, _ = await serve(issue(ca))
    async with trusting(ca) as client:
        lines = await probe(f"{base}/ok", client)
    assert lines[0] == f"GET {base}/ok at 127.0.0.1"
    latency(lines[1], "200 OK")
    assert re.fullmatch(
        r"TLS TLSv1\.[23]: subject CN=localhost, issuer O=chatops test CA", lines[2]
    )
    assert lines[3] == "certificate not after 2099-01-31T00:00:00Z: 40 days left"
    assert len(lines) == 4


async def test_a_certificate_close_to_expiry_is_flagged(ca, serve) -> None:
    base, _ = await serve(issue(ca))
    async with trusting(ca) as client:
        lines = await probe(f"{base}/ok", client, days_left=10)
    assert lines[-1] == (
        "certificate not after 2099-01-31T00:00:00Z: 10 days left, EXPIRES SOON (within 14)"
    )


async def test_error_statuses_and_redirects_are_reported_not_followed(ca, serve) -> None:
    base, service = await serve(issue(ca))
    async with trusting(ca) as client:
        down = await probe(f"{base}/down", client)
        moved = await probe(f"{base}/old", client)
    latency(down[1], "503 Service Unavailable")
    latency(moved[1], "301 Moved Permanently")
    assert moved[2] == "Location: /ok"
    assert service.connections == 2  # the redirect was not followed


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("expired", "certificate has expired"),
        ("untrusted", "unable to get local issuer certificate"),
        ("other host", "Hostname mismatch, certificate is not valid for 'localhost'."),
    ],
)
async def test_a_certificate_failing_verification_is_reported_as_the_finding(
    ca, serve, kind: str, reason: str
) -> None:
    leaf = {
        "expired": lambda: issue(ca, expired=True),
        "untrusted": lambda: issue(trustme.CA()),
        "other host": lambda: issue(ca, "status.internal"),
    }[kind]()
    base, _ = await serve(leaf)
    async with trusting(ca) as client:
        lines = await probe(f"{base}/ok", client)
    assert lines == [f"GET {base}/ok at 127.0.0.1", f"TLS verification failed: {reason}"]


async def test_hosts_outside_the_allowlist_are_refused_before_connecting(ca, serve) -> None:
    base, service = await serve(issue(ca))
    async with trusting(ca) as client:
        tool = http_probe_tool(HostAllowlist.parse("status.internal"), client)
        for url, why in [
            (f"{base}/ok", "not in CHATOPS_HTTP_ALLOWLIST"),
            ("ftp://status.internal/", "only http:// and https://"),
        ]:
            with pytest.raises(ToolFailed, match=why):
                await tool.handler({"url": url}, Ctx())
    assert service.connections == 0


async def test_plain_http_and_a_refused_connection(slow_service: SlowService) -> None:
    closed = free_port()
    allow = HostAllowlist.parse(f"127.0.0.1:{slow_service.port},127.0.0.1:{closed}")
    async with httpx.AsyncClient() as client:
        tool = http_probe_tool(allow, client)
        up = (await tool.handler({"url": slow_service.url("/ok")}, Ctx())).splitlines()
        down = (await tool.handler({"url": f"http://127.0.0.1:{closed}/"}, Ctx())).splitlines()
    assert len(up) == 2
    latency(up[1], "200 OK")
    assert down[1].startswith("unreachable: ")


async def test_through_the_runtime_an_expired_certificate_is_a_result(
    make_runtime, fake_llm, ca, serve
) -> None:
    base, _ = await serve(issue(ca, expired=True))
    fake_llm.script(
        fp.ToolCallsReply([fp.ToolCall("http_probe", {"url": f"{base}/ok"})]),
        fp.TextReply("The certificate on the status page has expired."),
    )
    async with trusting(ca) as client:
        allow = loopback_named(base)
        runtime = make_runtime(http_probe_tool(allow, client))
        inputs = (UserMessage(content="Why do browsers warn?", author="alice"),)
        outcome = await runtime.run(TurnRequest(session_id="probe", turn_id="t1", inputs=inputs))
    assert outcome.reason == "completed"
    [answer] = [m for m in await runtime.store.load("probe") if isinstance(m, ToolMessage)]
    assert answer.status is ToolStatus.OK
    assert answer.content == (
        f"GET {base}/ok at 127.0.0.1\nTLS verification failed: certificate has expired"
    )


async def test_a_header_trickled_a_byte_at_a_time_is_reported_at_the_probes_deadline() -> None:
    # Each byte arrives well within httpx's per-read timeout, so only a deadline for the whole
    # exchange ends it; without one the probe would hang until the batch's own timeout.
    sent = 0

    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal sent
        await reader.readuntil(b"\r\n\r\n")
        try:
            for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 10_000:
                writer.write(bytes([byte]))
                await writer.drain()
                sent += 1
                await asyncio.sleep(0.02)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(trickle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    allow = HostAllowlist.parse(f"127.0.0.1:{port}")
    try:
        async with httpx.AsyncClient() as client:
            tool = http_probe_tool(allow, client, probe_timeout_s=0.5)
            async with asyncio.timeout(8):
                lines = (
                    await tool.handler({"url": f"http://127.0.0.1:{port}/"}, Ctx())
                ).splitlines()
    finally:
        server.close()
    assert lines[1] == "no answer within 0.5 s (the response headers did not complete)"
    assert 0 < sent < 10_000
