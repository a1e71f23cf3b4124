"""Which URLs the HTTP tools may reach: the host allowlist, the address check, the pinned target.

Contract (`CHATOPS_HTTP_ALLOWLIST`, comma-separated entries):

- `host` admits that name on any port, `host:port` on that port only (`[v6]:port` for IPv6).
- An IP literal (`10.0.0.7`, `10.0.0.7:8080`, `[fd00::7]:443`) or a CIDR range (`10.0.0.0/8`,
  `10.0.0.0/8:9090`, `[fd00::/8]:443`) admits that address or range, on any port or the one
  given: as a URL's host, and as the address an allowlisted name resolves to.

A name that passes is resolved (`Resolver`, off the event loop by default) and each answer is
checked: an address that is not publicly routable (loopback, link-local, RFC 1918 and other
private ranges, ULA `fc00::/7`, shared `100.64.0.0/10`, unspecified, multicast, reserved) or that
is a cloud metadata endpoint (`METADATA_ADDRESSES`) is refused unless an IP or CIDR entry names
it. IPv4-mapped, 6to4 and NAT64 IPv6 forms are judged by the IPv4 address they carry. The first
admitted answer is the one connected to: `Target` requests that address, with the `Host` header
and TLS (SNI and certificate verification, through httpcore's `sni_hostname` request extension)
on the original name, so no second lookup happens between the check and the connection (no DNS
rebinding window). A URL with no admitted answer is a `ToolFailed` naming the addresses and why.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from agent_core._errors import ConfigError, ToolFailed

__all__ = [
    "METADATA_ADDRESSES",
    "HostAllowlist",
    "Resolver",
    "Target",
    "refusal_reason",
    "resolve_target",
    "system_resolver",
    "url_argument",
]


def url_argument() -> dict[str, Any]:
    """The argument schema of a tool that takes one URL to a checked address (a fresh copy)."""
    return {
        "type": "object",
        "properties": {"url": {"type": "string", "description": "http:// or https:// URL"}},
        "required": ["url"],
        "additionalProperties": False,
    }


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""`(host, port) -> addresses`: the IP addresses a name resolves to, in the order to try."""

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
"""Cloud instance metadata endpoints (AWS/GCP/Azure/OpenStack, AWS over IPv6, Alibaba Cloud):
named apart from their ranges so that a refusal says what was at stake."""

RESOLVE_TIMEOUT_S = 5.0
"""Longest wait for a name to resolve; the tools' own timeouts are longer."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SHARED = ipaddress.ip_network("100.64.0.0/10")


@dataclass(frozen=True)
class HostAllowlist:
    """Hosts (any port), host:port pairs, and addresses or ranges the HTTP tools may reach."""

    any_port: frozenset[str]
    exact: frozenset[tuple[str, int]]
    networks: frozenset[tuple[IPNetwork, int | None]] = field(default=frozenset())
    """IP and CIDR entries, with their port (None: any port)."""

    @classmethod
    def parse(cls, spec: str | Iterable[str]) -> HostAllowlist:
        """Parse `"a.example, b.example:8080, 10.0.0.0/8"` (or a list of such entries).

        Raises:
            ConfigError: An entry is neither a host, a host:port, an address nor a range.
        """
        entries = spec.split(",") if isinstance(spec, str) else list(spec)
        any_port: set[str] = set()
        exact: set[tuple[str, int]] = set()
        networks: set[tuple[IPNetwork, int | None]] = set()
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            host, port = _split_entry(entry)
            if (network := _network(host, entry)) is not None:
                networks.add((network, port))
            elif port is None:
                any_port.add(host)
            else:
                exact.add((host, port))
        return cls(frozenset(any_port), frozenset(exact), frozenset(networks))

    def allows(self, host: str, port: int) -> bool:
        """Return True when a URL naming `host:port` may be requested (before resolution)."""
        host = host.lower().strip("[]")
        if host in self.any_port or (host, port) in self.exact:
            return True
        address = _address(host)
        return address is not None and self.names(address, port)

    def names(self, address: IPAddress, port: int) -> bool:
        """Return True when an IP or CIDR entry names `address` (at `port`) explicitly."""
        return any(
            address.version == network.version
            and address in network
            and (allowed is None or allowed == port)
            for network, allowed in self.networks
        )


def _split_entry(entry: str) -> tuple[str, int | None]:
    """Split `host`, `host:port`, `[v6]` or `[v6]:port` into host and optional port."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else None
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        host, port = entry, None  # a bare name, or a bare IPv6 address or range
    if not host or (port is not None and not port.isdigit()):
        raise ConfigError(f"allowlist entry {entry!r} is neither host nor host:port")
    return host, int(port) if port is not None else None


def _network(host: str, entry: str) -> IPNetwork | None:
    """The address or range an entry names, or None for a host name."""
    if "/" not in host and _address(host) is None:
        return None
    try:
        return ipaddress.ip_network(host)  # strict: `10.0.0.1/8` is a typo, not a range
    except ValueError as exc:
        raise ConfigError(f"allowlist entry {entry!r} is not a valid address or range") from exc


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _carried(address: IPAddress) -> IPAddress:
    """The IPv4 address an IPv4-mapped, 6to4 or NAT64 IPv6 address carries, else itself."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def refusal_reason(address: IPAddress) -> str | None:
    """Why `address` may not be reached without an explicit entry, or None when it is public."""
    inner = _carried(address)
    checks = (
        (address in METADATA_ADDRESSES or inner in METADATA_ADDRESSES, "a cloud metadata address"),
        (inner.is_loopback, "loopback"),
        (inner.is_link_local, "link-local"),
        (inner.is_unspecified, "unspecified"),
        (inner.is_multicast, "multicast"),
        (inner in _SHARED, "shared address space (RFC 6598)"),
        (inner.is_private, "private"),
        (inner.is_reserved, "reserved"),
        (not inner.is_global, "not globally routable"),
    )
    return next((why for hit, why in checks if hit), None)


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The system's answers for `host`, from `loop.getaddrinfo` (a thread, off the loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class Target:
    """A checked URL and how to request it: at the checked address, named as the URL names it."""

    url: str
    """The URL as the model gave it (for messages)."""
    host: str
    """The URL's host: a name, or an address."""
    address: str
    """The address that was checked and that the request connects to."""
    request_url: httpx.URL
    """`url` with its host replaced by `address`."""
    headers: dict[str, str]
    """The `Host` header of the original name."""
    extensions: dict[str, Any]
    """`sni_hostname` for https: the TLS handshake and certificate check use the original name."""


def _parsed(url: object, allowlist: HostAllowlist) -> tuple[str, str, int]:
    """The URL, its host and port, when the allowlist names them; else `ToolFailed`."""
    if not isinstance(url, str) or not url:
        raise ToolFailed("`url` must be a non-empty string")
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ToolFailed(f"refused {url!r}: only http:// and https:// URLs with a host are allowed")
    try:
        port = parts.port or _DEFAULT_PORTS[parts.scheme]
    except ValueError as exc:
        raise ToolFailed(f"refused {url!r}: invalid port") from exc
    if not allowlist.allows(parts.hostname, port):
        raise ToolFailed(
            f"refused {url!r}: host {parts.hostname}:{port} is not in CHATOPS_HTTP_ALLOWLIST"
        )
    return url, parts.hostname, port


async def _answers(host: str, port: int, resolver: Resolver) -> list[IPAddress]:
    if (literal := _address(host)) is not None:
        return [literal]
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            answers = await resolver(host, port)
    except TimeoutError as exc:
        raise ToolFailed(
            f"could not resolve {host}: no answer within {RESOLVE_TIMEOUT_S:g} s", retryable=True
        ) from exc
    except OSError as exc:  # socket.gaierror: EAI_AGAIN is the resolver's transient failure
        transient = getattr(exc, "errno", None) == socket.EAI_AGAIN
        raise ToolFailed(f"could not resolve {host}: {exc}", retryable=transient) from exc
    addresses = [a for a in map(_address, answers) if a is not None]
    if not addresses:
        raise ToolFailed(f"could not resolve {host}: no address")
    return addresses


async def resolve_target(
    url: object, allowlist: HostAllowlist, resolver: Resolver = system_resolver
) -> Target:
    """Check `url` against the allowlist, resolve it, check its addresses; the request to send.

    Raises:
        ToolFailed: The URL is malformed, not allowlisted, does not resolve, or resolves only to
            addresses that are refused (the message names them and why).
    """
    checked, host, port = _parsed(url, allowlist)
    refused: list[str] = []
    for address in await _answers(host, port, resolver):
        why = None if allowlist.names(address, port) else refusal_reason(address)
        if why is None:
            return _target(checked, host, address)
        refused.append(f"{address} ({why})")
    raise ToolFailed(
        f"refused {checked!r}: {host} resolves to {', '.join(refused)}, which"
        " CHATOPS_HTTP_ALLOWLIST does not name (add the address or its range to allow it)"
    )


def _target(url: str, host: str, address: IPAddress) -> Target:
    original = httpx.URL(url)
    extensions: dict[str, Any] = {}
    if original.scheme == "https" and _address(host) is None:
        extensions["sni_hostname"] = host
    return Target(
        url=url,
        host=host,
        address=str(address),
        request_url=original.copy_with(host=str(address)),
        headers={"Host": original.netloc.decode("ascii")},
        extensions=extensions,
    )
