"""The built-in `http_get` tool: a read-only HTTP probe limited to allowlisted hosts.

Contract (DESIGN.md §5): one argument `url`; read-only; interruptible; only hosts named in
`CHATOPS_HTTP_ALLOWLIST` (comma-separated entries, `host` for any port or `host:port`); a refused
URL is a clear tool error the model reads, never an exception that ends the turn.

Retries (`RETRY`): a GET is idempotent, so a failure that says nothing about the service is tried
again: a connection that could not be made, and a gateway's 502 or 504 (the proxy got no answer
from the app). A 500 or 503 is the app's own answer, usually the diagnosis itself (a health check
naming its failing dependency), so the model reads it at once, as it is; a read timeout is not
retried either (a hung backend would only hang again).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from agent_core.errors import ConfigError, ToolFailed
from agent_core.redaction import redact
from agent_core.tools.base import Interruptibility, RetryPolicy, Risk, Tool, ToolContext

__all__ = ["HostAllowlist", "http_get_tool"]

TIMEOUT_S = 10.0
"""Per-call timeout; the tool's own timeout in the batch matches it."""
MAX_BODY_CHARS = 4_000
"""Bodies are truncated to this many characters before the model sees them."""

RETRY = RetryPolicy(attempts=3, base_delay_s=0.5, max_delay_s=2.0)
"""Three tries for connection failures and gateway errors, with a jittered wait under 2 s."""
RETRYABLE_STATUSES = frozenset({502, 504})
"""Gateway errors: the proxy got no answer from the app, so the response holds no diagnosis."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class HostAllowlist:
    """Hosts (any port) and host:port pairs the tool may reach."""

    any_port: frozenset[str]
    exact: frozenset[tuple[str, int]]

    @classmethod
    def parse(cls, spec: str | Iterable[str]) -> HostAllowlist:
        """Parse `"a.example, b.example:8080"` (or a list of such entries)."""
        entries = spec.split(",") if isinstance(spec, str) else list(spec)
        any_port: set[str] = set()
        exact: set[tuple[str, int]] = set()
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            host, port = _split_entry(entry)
            if port is None:
                any_port.add(host)
            else:
                exact.add((host, port))
        return cls(frozenset(any_port), frozenset(exact))

    def allows(self, host: str, port: int) -> bool:
        """Return True when `host:port` may be reached."""
        host = host.lower()
        return host in self.any_port or (host, port) in self.exact


def _split_entry(entry: str) -> tuple[str, int | None]:
    """Split `host`, `host:port`, `[v6]` or `[v6]:port` into host and optional port."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":") if rest.startswith(":") else None
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    else:
        host, port = entry, None  # a bare name, or a bare IPv6 address
    if not host or (port is not None and not port.isdigit()):
        raise ConfigError(f"allowlist entry {entry!r} is neither host nor host:port")
    return host, int(port) if port is not None else None


def _checked_url(url: object, allowlist: HostAllowlist) -> str:
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
    return url


def http_get_tool(allowlist: HostAllowlist, client: httpx.AsyncClient) -> Tool:
    """Build the `http_get` tool over an injected HTTP client."""

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        url = _checked_url(args.get("url"), allowlist)
        try:
            response = await client.get(url, timeout=TIMEOUT_S, follow_redirects=False)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ToolFailed(
                f"GET {url} failed: {type(exc).__name__}: {exc}", retryable=True
            ) from exc
        except httpx.TimeoutException as exc:
            raise ToolFailed(f"GET {url} timed out after {TIMEOUT_S:g} s") from exc
        except httpx.HTTPError as exc:
            raise ToolFailed(f"GET {url} failed: {type(exc).__name__}: {exc}") from exc
        if response.status_code in RETRYABLE_STATUSES:
            raise ToolFailed(f"GET {url} answered {_render(response)}", retryable=True)
        return _render(response)

    return Tool(
        name="http_get",
        description=(
            "Fetch a URL with HTTP GET (read-only) and return the status line and body. "
            "Only allowlisted hosts can be reached."
        ),
        parameters={
            "type": "object",
            "properties": {"url": {"type": "string", "description": "http:// or https:// URL"}},
            "required": ["url"],
            "additionalProperties": False,
        },
        handler=handler,
        interruptibility=Interruptibility.ABORTABLE,
        timeout_s=TIMEOUT_S,
        risk=Risk.READ_ONLY,
        idempotent=True,
        retry=RETRY,
    )


def _render(response: httpx.Response) -> str:
    """The status line and the body, redacted whole, then truncated to `MAX_BODY_CHARS`.

    Redacting before the cut matters: a secret cut in half at the limit would be too short to
    be recognised afterwards, and its first characters would reach the model.
    """
    full = redact(response.text)
    body = full
    if len(body) > MAX_BODY_CHARS:
        body = body[:MAX_BODY_CHARS] + f"\n… [truncated {len(full) - MAX_BODY_CHARS}"
        body += " characters]"
    return f"HTTP {response.status_code} {response.reason_phrase}\n{body}"
