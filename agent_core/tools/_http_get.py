"""The built-in `http_get` tool: a read-only HTTP GET limited to allowlisted hosts and addresses.

Contract (docs/design.md §External contract): one argument `url`; read-only; interruptible; only
URLs that `CHATOPS_HTTP_ALLOWLIST` admits (host names, `host:port`, IP addresses and CIDR ranges;
see `agent_core.tools._address_policy`), connected at the address that was checked; a refused URL is
a clear tool error the model reads, never an exception that ends the turn. Redirects are not
followed.

Bounded: the body is streamed and at most `BodyLimit.max_bytes` (`CHATOPS_TOOL_MAX_BYTES`) are
read, counted on the wire and after decoding gzip, deflate or brotli (`bounded_body`); the result
says when the body was longer. Of what was read, the model sees `MAX_BODY_CHARS` characters.

Retries (`RETRY`): a GET is idempotent, so a failure that says nothing about the service is tried
again: a connection that could not be made, and a gateway's 502 or 504 (the proxy got no answer
from the app). A 500 or 503 is the app's own answer, usually the diagnosis itself (a health check
naming its failing dependency), so the model reads it at once, as it is; a read timeout is not
retried either (a hung backend would only hang again).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from agent_core._errors import ToolFailed
from agent_core._redaction import redact
from agent_core.tools._address_policy import (
    HostAllowlist,
    Resolver,
    Target,
    resolve_target,
    system_resolver,
    url_argument,
)
from agent_core.tools._base import Interruptibility, RetryPolicy, Risk, Tool, ToolContext
from agent_core.tools._bounded_body import ACCEPT_ENCODING, Body, BodyError, BodyLimit, read_body
from agent_core.tools._connections import ConnectionSlots, held

__all__ = ["HostAllowlist", "http_get_tool"]

TIMEOUT_S = 10.0
"""Per-call timeout; the tool's own timeout in the batch matches it."""
MAX_BODY_CHARS = 4_000
"""Bodies are truncated to this many characters before the model sees them."""
REDACTION_MARGIN_CHARS = 16_000
"""Characters past the cut that are redacted with the shown part: a secret that starts before
the cut is recognised whole (none of the shapes redaction knows comes near this length), and
the rest of a 1 MiB body is never scanned for a view that shows 4,000 characters."""

RETRY = RetryPolicy(attempts=3, base_delay_s=0.5, max_delay_s=2.0)
"""Three tries for connection failures and gateway errors, with a jittered wait under 2 s."""
RETRYABLE_STATUSES = frozenset({502, 504})
"""Gateway errors: the proxy got no answer from the app, so the response holds no diagnosis."""


def http_get_tool(
    allowlist: HostAllowlist,
    client: httpx.AsyncClient,
    *,
    limit: BodyLimit | None = None,
    resolver: Resolver = system_resolver,
    slots: ConnectionSlots | None = None,
) -> Tool:
    """Build the `http_get` tool over an injected HTTP client.

    Args:
        allowlist: The hosts, addresses and ranges that may be reached.
        client: Sends the request. Give it no keep-alive connections when two allowlisted https
            names may share an address: a pooled connection is keyed by address, so another
            name's request could reuse a TLS session verified for the first.
        limit: How much of a body is read (default `BodyLimit()`: 1 MiB).
        resolver: Resolves a host name to the addresses that are checked and connected to.
        slots: The connections `client` may hold at once; a call waits for one off its clock.
    """
    bound = limit or BodyLimit()

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        target = await resolve_target(args.get("url"), allowlist, resolver)
        with _mapped_errors(target):
            async with (
                held(slots, f"GET {target.url}"),
                client.stream(
                    "GET",
                    target.request_url,
                    headers={**target.headers, "Accept-Encoding": ACCEPT_ENCODING},
                    extensions=target.extensions,
                    timeout=TIMEOUT_S,
                    follow_redirects=False,
                ) as response,
            ):
                body = await read_body(response, bound)
        shown = _render(response, body)
        if response.status_code in RETRYABLE_STATUSES:
            raise ToolFailed(f"GET {target.url} answered {shown}", retryable=True)
        return shown

    return Tool(
        name="http_get",
        description=(
            "Fetch a URL with HTTP GET (read-only) and return the status line and body. "
            "Only allowlisted hosts can be reached."
        ),
        parameters=url_argument(),
        handler=handler,
        interruptibility=Interruptibility.ABORTABLE,
        timeout_s=TIMEOUT_S,
        risk=Risk.READ_ONLY,
        idempotent=True,
        retry=RETRY,
    )


@contextmanager
def _mapped_errors(target: Target) -> Iterator[None]:
    """Failures of httpx and of the body reader as tool errors; a failed connect is retryable."""
    url = target.url
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise ToolFailed(
            f"GET {url} ({target.address}) failed: {type(exc).__name__}: {exc}", retryable=True
        ) from exc
    except httpx.TimeoutException as exc:
        raise ToolFailed(f"GET {url} timed out after {TIMEOUT_S:g} s") from exc
    except httpx.HTTPError as exc:
        raise ToolFailed(f"GET {url} failed: {type(exc).__name__}: {exc}") from exc
    except BodyError as exc:
        raise ToolFailed(f"GET {url}: the body could not be read: {exc}") from exc


def _render(response: httpx.Response, body: Body) -> str:
    """The status line and the body, redacted, then cut to `MAX_BODY_CHARS`.

    Redacting before the cut matters: a secret cut in half at the limit would be too short to
    be recognised afterwards, and its first characters would reach the model.
    """
    text = body.text(response.charset_encoding)
    window = MAX_BODY_CHARS + REDACTION_MARGIN_CHARS
    shown = redact(text[:window])
    left = len(shown) - MAX_BODY_CHARS + max(0, len(text) - window)
    if left > 0:
        shown = shown[:MAX_BODY_CHARS] + f"\n… [truncated {left} characters]"
    if notice := body.notice():
        shown += f"\n{notice}"
    return f"HTTP {response.status_code} {response.reason_phrase}\n{shown}"
