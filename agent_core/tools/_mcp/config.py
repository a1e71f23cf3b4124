"""What an operator declares about one MCP server, and how `CHATOPS_MCP_SERVERS` is parsed.

The setting is a JSON list with one object per server:

```json
[{"name": "k8s", "transport": "stdio", "command": "kubectl-mcp", "args": ["--read-only"],
  "env": {"KUBECONFIG": "/etc/chatops/kubeconfig"}, "risk": "read_only",
  "tools": ["pod_logs", "describe_pod"], "timeout_s": 20},
 {"name": "grafana", "transport": "http", "url": "http://grafana-mcp:8000/mcp", "tools": ["*"]}]
```

Safe readings, by design:

- `risk` is the operator's word for every tool of the server; the server's own hints
  (`readOnlyHint`, `destructiveHint`) are not trusted, since a server describes itself. Undeclared,
  it is `side_effect`: such tools are not idempotent, are never retried, run to their end when a
  stop arrives, and each call waits for a person's approval (the runtime gates every tool that is
  not read-only). Only `read_only` makes a server's tools run at once, abortable and idempotent.
- `tools` is an allowlist: only the tools it names are offered to the model. An empty or missing
  list offers none (a new server exposes nothing until someone chooses what it may do); `"*"`
  offers every tool the server lists.

Pydantic parses these (rather than a plain dataclass) because they come from operator-written JSON
and each mistake should name its field.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from agent_core._errors import ConfigError
from agent_core.tools._base import Risk

__all__ = [
    "ALL_TOOLS",
    "DEFAULT_TIMEOUT_S",
    "HttpServerConfig",
    "McpServerConfig",
    "StdioServerConfig",
    "parse_mcp_servers",
]

ALL_TOOLS = "*"
"""The allowlist entry that offers every tool a server lists."""
DEFAULT_TIMEOUT_S = 30.0
"""A call still running after this long answers a timeout (and is cancelled on the server)."""
MAX_TIMEOUT_S = 600.0
"""No call may hold a turn longer than ten minutes."""


class _ServerBase(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,32}$")
    """Prefix of the server's tool names (`<name>__<tool>`); unique among the servers."""
    risk: Risk = Risk.SIDE_EFFECT
    """What every tool of the server may change; `side_effect` unless declared."""
    tools: tuple[str, ...] = ()
    """The tools offered to the model; empty offers none, `"*"` offers all."""
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=MAX_TIMEOUT_S)
    """Per-call timeout."""

    def allows(self, tool_name: str) -> bool:
        """True when the allowlist offers `tool_name` (the server's own name for it)."""
        return ALL_TOOLS in self.tools or tool_name in self.tools


class StdioServerConfig(_ServerBase):
    """A server the worker starts as a subprocess and talks to over its stdin and stdout.

    The subprocess inherits only a few harmless variables (`HOME`, `PATH`, `USER`, …: the `mcp`
    package's default) plus `env`, never the worker's own secrets.
    """

    transport: Literal["stdio"]
    command: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)


class HttpServerConfig(_ServerBase):
    """A server reached over MCP's streamable HTTP transport."""

    transport: Literal["http"]
    url: str = Field(pattern=r"^https?://")
    """The endpoint, e.g. `http://grafana-mcp:8000/mcp`."""


McpServerConfig = StdioServerConfig | HttpServerConfig
"""One configured MCP server, told apart by `transport` (`stdio` or `http`)."""

_SERVERS: TypeAdapter[list[McpServerConfig]] = TypeAdapter(
    list[Annotated[McpServerConfig, Field(discriminator="transport")]]
)


def parse_mcp_servers(text: str) -> tuple[McpServerConfig, ...]:
    """Parse the JSON list of `CHATOPS_MCP_SERVERS`; blank text means no servers.

    Raises:
        ConfigError: The text is not JSON, not a list of server objects, has an invalid or
            unknown field, or names two servers alike.
    """
    if not text.strip():
        return ()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"not valid JSON ({exc.msg} at {exc.pos})") from exc
    try:
        servers = _SERVERS.validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from exc
    names = [server.name for server in servers]
    if duplicates := sorted({name for name in names if names.count(name) > 1}):
        raise ConfigError(f"two servers are named {duplicates[0]!r}")
    return tuple(servers)


def _describe(exc: ValidationError) -> str:
    """Each problem as `[index].field: message`.

    Values are never echoed: they may be secrets from `env`.
    """
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in error["loc"]
        )
        problems.append(f"{where or 'value'}: {error['msg']}")
    return "; ".join(problems)
