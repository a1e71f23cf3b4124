"""The `http_probe` tool: is an endpoint up, how fast does it answer, and is its TLS healthy?

Contract: one argument `url`; read-only, idempotent, interruptible; only URLs the same
`CHATOPS_HTTP_ALLOWLIST` admits as for `http_get` (the same check, `resolve_target`, so the two
can never disagree: the name resolved, its address checked and connected to). It sends one GET
without following redirects and reports the status line (with the address connected to when the
URL names a host), the latency to the response headers in milliseconds, a redirect's `Location`,
and for https the TLS version and the server certificate: subject and issuer, not-after date and
days left (flagged within `EXPIRY_WARNING_DAYS`). The body is never read: the response is closed
after its headers, whose size h11 bounds (64 KiB by default).

What the probe finds is its result, never an exception: a certificate that fails verification
("TLS verification failed: certificate has expired"), a refused connection or a timeout is
reported as text the model reads, because for a probe that is the finding. Only a refused URL
(not allowlisted, not http(s)) is a tool error. For the same reason nothing is retried: a retry
would hide the flap the probe was asked to see.

Latency includes DNS, connect and the TLS handshake when the client opens a new connection for
the probe; the worker gives this tool a client that keeps no idle connections, so every probe
does.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx

from agent_core.tools._address_policy import (
    HostAllowlist,
    Resolver,
    Target,
    resolve_target,
    system_resolver,
    url_argument,
)
from agent_core.tools._base import Interruptibility, Risk, Tool, ToolContext
from agent_core.tools._connections import ConnectionSlots, held

__all__ = ["http_probe_tool"]

TIMEOUT_S = 10.0
"""The tool's timeout in the batch."""
PROBE_TIMEOUT_S = 8.0
"""The probe's own deadline, for the whole exchange up to the end of the headers: under the
tool's, so a hung endpoint is reported by the probe ("no answer within 8 s") instead of ending as
a bare tool timeout. httpx's timeouts are per read, so a server trickling its header a byte at a
time never trips them; the deadline is an `asyncio.timeout` around the request as well."""
EXPIRY_WARNING_DAYS = 14
"""A certificate expiring within this many days is flagged."""
_MAX_CHAIN = 8


def http_probe_tool(
    allowlist: HostAllowlist,
    client: httpx.AsyncClient,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    resolver: Resolver = system_resolver,
    probe_timeout_s: float = PROBE_TIMEOUT_S,
    slots: ConnectionSlots | None = None,
) -> Tool:
    """Build the `http_probe` tool over an injected HTTP client.

    Args:
        allowlist: The hosts that may be probed.
        client: Sends the probe; it must verify certificates (httpx does by default).
        clock: The time now, for the days a certificate has left.
        resolver: Resolves a host name to the addresses that are checked and connected to.
        probe_timeout_s: The probe's own deadline (`PROBE_TIMEOUT_S`); under the tool's.
        slots: The connections `client` may hold at once; a probe waits for one off its clock
            (and before its latency is timed).
    """

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        target = await resolve_target(args.get("url"), allowlist, resolver)
        heading = f"GET {target.url}"
        if target.address != target.host:
            heading += f" at {target.address}"
        async with held(slots, heading):
            lines = await _probe(client, target, clock(), probe_timeout_s)
        return "\n".join([heading, *lines])

    return Tool(
        name="http_probe",
        description=(
            "Probe a URL (read-only): HTTP status, latency in ms and, for https, the TLS "
            "certificate's expiry, subject and issuer, or why verification failed. "
            "Only allowlisted hosts can be reached."
        ),
        parameters=url_argument(),
        handler=handler,
        interruptibility=Interruptibility.ABORTABLE,
        timeout_s=TIMEOUT_S,
        risk=Risk.READ_ONLY,
        idempotent=True,
    )


async def _probe(
    client: httpx.AsyncClient, target: Target, now: datetime, deadline_s: float
) -> list[str]:
    started = time.perf_counter()
    try:
        async with (
            asyncio.timeout(deadline_s),
            client.stream(
                "GET",
                target.request_url,
                headers=target.headers,
                extensions=target.extensions,
                timeout=deadline_s,
                follow_redirects=False,
            ) as response,
        ):
            elapsed_ms = (time.perf_counter() - started) * 1000
            lines = [f"HTTP {response.status_code} {response.reason_phrase} in {elapsed_ms:.0f} ms"]
            if response.is_redirect:
                lines.append(f"Location: {response.headers.get('location', '(none)')}")
            if response.url.scheme == "https":
                lines += _tls(response, now)
            return lines
    except httpx.ConnectError as exc:
        return [_connect_failure(exc)]
    except httpx.TimeoutException as exc:
        return [f"no answer within {deadline_s:g} s ({type(exc).__name__})"]
    except TimeoutError:  # the deadline: the headers were still arriving (or not at all)
        return [f"no answer within {deadline_s:g} s (the response headers did not complete)"]
    except httpx.HTTPError as exc:
        return [f"failed: {type(exc).__name__}: {exc}"]


def _tls(response: httpx.Response, now: datetime) -> list[str]:
    """The TLS version and certificate of the connection the response came over.

    Read from httpcore's `network_stream` extension (its `ssl_object`), not from a second
    connection of our own: it is the very handshake the request used, so a load balancer cannot
    route the check to another backend, and the endpoint sees one connection, not two. The
    parsed certificate (`getpeercert()`) is there because the client verified it; a
    verification failure never gets this far (see `_connect_failure`).
    """
    stream = response.extensions.get("network_stream")
    ssl_object = stream.get_extra_info("ssl_object") if stream is not None else None
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return ["TLS: details unavailable from this connection"]
    cert = ssl_object.getpeercert()
    if not cert:
        return [f"TLS {ssl_object.version()}: certificate not verified by this client"]
    lines = [
        f"TLS {ssl_object.version()}: subject {_name(cert.get('subject', ()))}, "
        f"issuer {_name(cert.get('issuer', ()))}"
    ]
    not_after = datetime.fromtimestamp(ssl.cert_time_to_seconds(str(cert["notAfter"])), tz=UTC)
    days = (not_after - now).days
    expiry = f"certificate not after {not_after.isoformat().replace('+00:00', 'Z')}"
    if days < 0:
        lines.append(f"{expiry}: EXPIRED {-days} days ago")
    elif days < EXPIRY_WARNING_DAYS:
        lines.append(f"{expiry}: {days} days left, EXPIRES SOON (within {EXPIRY_WARNING_DAYS})")
    else:
        lines.append(f"{expiry}: {days} days left")
    return lines


def _name(dn: Any) -> str:
    """`CN=…` of a distinguished name as `getpeercert()` gives it, else its `O=…`."""
    fields = dict(pair for rdn in dn for pair in rdn)
    if "commonName" in fields:
        return f"CN={fields['commonName']}"
    if "organizationName" in fields:
        return f"O={fields['organizationName']}"
    return "(unnamed)"


def _connect_failure(exc: httpx.ConnectError) -> str:
    """Why the connection failed, naming OpenSSL's verify reason when the certificate did.

    httpx raises `ConnectError` from httpcore's, itself raised from the `ssl` error of the
    handshake: the reason (`verify_message`, e.g. "certificate has expired") is down the chain.
    """
    cause: BaseException | None = exc
    for _ in range(_MAX_CHAIN):
        if cause is None:
            break
        if isinstance(cause, ssl.SSLCertVerificationError):
            return f"TLS verification failed: {cause.verify_message}"
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake failed: {cause.reason or cause}"
        cause = cause.__cause__ or cause.__context__
    return f"unreachable: {exc}"
