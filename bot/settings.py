"""The one `Settings` object: every environment variable of the external contract.

Built once at start-up (`Settings()`); nothing else reads `os.environ`. A `.env` file in the
working directory is read too. Secrets are `SecretStr`, so they never appear in reprs or logs.
"""

from __future__ import annotations

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_core import ForcedTool, IntentCheck, ModelStreaming, ToolChoice
from bot.logs import LogFormat, LogLevel
from bot.people import People, parse_people
from bot.redis_topology import RedisTopology

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Configuration from the environment (names as in docs/design.md §External contract)."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    redis_url: str | None = Field(default=None, validation_alias="REDIS_URL")
    """Unset: an embedded Redis is started for local use."""
    redis_cluster: bool = Field(default=False, validation_alias="CHATOPS_REDIS_CLUSTER")
    """`REDIS_URL` names a node of a Redis Cluster: the processes use a cluster client
    (`bot.process.redis_pool`). Every key is in one slot (`bot.keys`), so any cluster works."""
    redis_sentinels: str = Field(default="", validation_alias="CHATOPS_REDIS_SENTINELS")
    """`host:port` of each Sentinel, comma-separated: the processes find the primary through
    them and follow a failover; `REDIS_URL` then gives only the database, user and password."""
    redis_sentinel_primary: str = Field(
        default="mymaster", min_length=1, validation_alias="CHATOPS_REDIS_SENTINEL_PRIMARY"
    )
    """The name the Sentinels monitor the primary under (`sentinel monitor <name> …`)."""
    redis_wait_replicas_setting: int | None = Field(
        default=None, ge=0, le=16, validation_alias="CHATOPS_REDIS_WAIT_REPLICAS"
    )
    """Replicas that must hold an event before the ingress acknowledges it (`WAIT`, at most
    200 ms; an event still unacknowledged then is accepted and counted). Unset: 1 with
    Sentinels, 0 otherwise. docs/reliability.md Q20."""
    redis_max_connections: int = Field(
        default=64, ge=4, le=10_000, validation_alias="CHATOPS_REDIS_MAX_CONNECTIONS"
    )
    """Redis connections one process (ingress, worker, scheduler) opens at most; a command finding
    them all busy waits for one (`bot.process.redis_pool`)."""
    redis_pool_timeout_s: float = Field(
        default=10.0, gt=0, le=300, validation_alias="CHATOPS_REDIS_POOL_TIMEOUT_S"
    )
    """Seconds a command waits for a free connection before it fails as Redis being unavailable."""
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    model: str = Field(default="gpt-4o-mini", validation_alias="CHATOPS_MODEL")
    tool_choice: ToolChoice | ForcedTool = Field(
        default=ToolChoice.AUTO, validation_alias="CHATOPS_TOOL_CHOICE"
    )
    """`tool_choice` of each model request that offers tools: `auto` (the model calls tools or
    answers), `required` (it must call one; the answer comes from the wrap-up after
    `CHATOPS_MAX_STEPS`), `omit` (no field, for providers that reject it), or
    `function:<tool name>` (OpenAI's named-function object, sent only with requests that offer
    that tool, which must call it; requests offering other tools only send no field; the way
    llama-cpp-python forces a call). An empty name or another value is refused at start-up.
    README §Models."""
    model_streaming: ModelStreaming = Field(
        default=ModelStreaming.AUTO, validation_alias="CHATOPS_MODEL_STREAMING"
    )
    """`auto`: stream, and once a streamed response with tools ends empty (a provider that
    cannot stream tool calls) or is cut before any data twice in a row, send requests with tools
    without streaming for the life of the process (one cut: asked again whole); `on`: always
    stream; `off`: never (`stream: false`). README §Models."""
    slack_bot_token: SecretStr | None = Field(default=None, validation_alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(
        default=None, validation_alias="SLACK_SIGNING_SECRET"
    )
    slack_app_token: SecretStr | None = Field(default=None, validation_alias="SLACK_APP_TOKEN")
    slack_api_url: str | None = Field(default=None, validation_alias="SLACK_API_URL")
    feishu_app_id: str | None = Field(default=None, validation_alias="FEISHU_APP_ID")
    feishu_app_secret: SecretStr | None = Field(default=None, validation_alias="FEISHU_APP_SECRET")
    feishu_verification_token: SecretStr | None = Field(
        default=None, validation_alias="FEISHU_VERIFICATION_TOKEN"
    )
    feishu_encrypt_key: SecretStr | None = Field(
        default=None, validation_alias="FEISHU_ENCRYPT_KEY"
    )
    feishu_domain: str | None = Field(default=None, validation_alias="FEISHU_DOMAIN")
    feishu_tenant_key: str | None = Field(default=None, validation_alias="FEISHU_TENANT_KEY")
    """Our Feishu tenant's `tenant_key`: events and card callbacks naming another tenant are
    acknowledged and dropped. Unset or empty: the tenant is not checked (the app id always is)."""
    console_token: SecretStr | None = Field(default=None, validation_alias="CHATOPS_CONSOLE_TOKEN")
    """Enables the console platform (`POST /console/events`, cards on a Redis stream): the
    bearer token its clients send. Unset or empty: the route answers 404 and no console cards
    are made."""
    body_read_timeout_s: float = Field(
        default=5.0, gt=0, le=60, validation_alias="CHATOPS_BODY_READ_TIMEOUT_S"
    )
    """Seconds the ingress waits for a request's whole body once its headers are in; a body
    still incomplete then is answered 408 and its connection closed (`bot.ingress.body_limits`)."""
    http_allowlist: str = Field(
        default="", validation_alias=AliasChoices("CHATOPS_HTTP_ALLOWLIST", "http_allowlist")
    )
    """Comma-separated entries the `http_get` and `http_probe` tools may reach: `host` (any
    port), `host:port`, an IP address or CIDR range (`10.0.0.7`, `10.0.0.0/8:9090`). A name's
    resolved address must be public, or named by an address or range entry (loopback, private,
    link-local and cloud metadata addresses are refused otherwise)."""
    tool_max_bytes: int = Field(
        default=1_048_576, ge=1024, le=64 * 1_048_576, validation_alias="CHATOPS_TOOL_MAX_BYTES"
    )
    """Bytes a tool reads of one answer at most (HTTP bodies counted on the wire and after
    gzip/deflate/brotli decoding, Prometheus answers, MCP results); past it, the result says it
    was truncated."""
    prometheus_url: str | None = Field(default=None, validation_alias="CHATOPS_PROMETHEUS_URL")
    """Root URL of the Prometheus server the `prometheus_query` tool reads (e.g.
    `http://prometheus:9090`); unset or empty: the agent has no Prometheus tool."""
    shell_allowlist: str = Field(default="", validation_alias="CHATOPS_SHELL_ALLOWLIST")
    """Comma-separated profiled commands the read-only `shell` tool may run, each a program and
    optionally its subcommands and absolute path roots (e.g. `kubectl get,kubectl logs,df,cat
    /var/log`); each runs only as its profile admits. Empty: the agent has no shell tool."""
    shell_profiles_file: str | None = Field(
        default=None, validation_alias="CHATOPS_SHELL_PROFILES_FILE"
    )
    """A TOML file of operators' shell profiles (schema in `agent_core.tools._shell_profiles`),
    adding programs to the shipped ones or replacing them; an invalid profile, or one admitting
    a never-admitted flag, stops the worker at start-up. Unset: the shipped profiles only."""
    mcp_servers: str = Field(default="", validation_alias="CHATOPS_MCP_SERVERS")
    """A JSON list of MCP servers whose tools the agent may call (format and safe defaults in
    `agent_core.tools._mcp.config`); empty: none."""
    instructions_file: str | None = Field(
        default=None, validation_alias="CHATOPS_INSTRUCTIONS_FILE"
    )
    """A Markdown file of the team's instructions (services, conventions, what never to
    suggest), read at worker start and appended to the system prompt (`bot.worker.prompt`); at
    most 32 KiB of UTF-8, or the worker refuses to start. Unset or empty: none."""
    runbooks_dir: str | None = Field(default=None, validation_alias="CHATOPS_RUNBOOKS_DIR")
    """A folder of Markdown runbooks (`*.md`, subfolders too) the read-only `search_runbooks`
    and `read_runbook` tools search and read, indexed at worker start and again whenever the
    folder changes; not a directory: the worker refuses to start. Unset or empty: no tools."""
    responders: str = Field(default="", validation_alias="CHATOPS_RESPONDERS")
    """Comma-separated qualified ids (`slack:U…`, `feishu:ou_…`, `console:<user>`) of the
    responder groups: the people who may approve a call that changes something. A bare id
    matches on Slack and Feishu, never the console, and is warned about (`bot.people`). Empty:
    nobody can approve, so every such call is denied or expires (approvals fail closed)."""
    admins: str = Field(default="", validation_alias="CHATOPS_ADMINS")
    """Comma-separated qualified ids of the admins (read as `CHATOPS_RESPONDERS`): the people
    who may pull the kill switch in chat (`@chatops killswitch on|off|status`). Empty: nobody
    can (it fails closed); the `chatops killswitch` command works regardless."""
    approval_timeout_s: float = Field(
        default=900.0, gt=0, le=86_400, validation_alias="CHATOPS_APPROVAL_TIMEOUT_S"
    )
    """How long a call waits for a decision before it expires (answered "approval expired")."""
    max_steps: int = Field(default=25, ge=1, validation_alias="CHATOPS_MAX_STEPS")
    """Model requests with tools in one turn; then one tool-less request for the answer."""
    max_tool_calls: int = Field(default=60, ge=1, validation_alias="CHATOPS_MAX_TOOL_CALLS")
    """Tool calls in one turn, admitted per whole batch."""
    max_identical_calls: int = Field(
        default=2, ge=1, validation_alias="CHATOPS_MAX_IDENTICAL_CALLS"
    )
    """Times one exact call (same tool, same arguments) may run in one turn."""
    token_budget: int = Field(default=0, ge=0, validation_alias="CHATOPS_TOKEN_BUDGET")
    """Prompt plus completion tokens of one turn; 0: no token budget."""
    thread_context_tokens: int = Field(
        default=4000, ge=0, validation_alias="CHATOPS_THREAD_CONTEXT_TOKENS"
    )
    """Tokens of a thread's earlier messages an analysis starts with; 0: none are read."""
    context_window_tokens: int = Field(
        default=128_000, ge=2_048, le=100_000_000, validation_alias="CHATOPS_CONTEXT_WINDOW_TOKENS"
    )
    """The model's context window: each request is compacted to fit it, less the reserve."""
    answer_reserve_tokens: int = Field(
        default=4_096, ge=0, validation_alias="CHATOPS_ANSWER_RESERVE_TOKENS"
    )
    """Tokens of the window kept free for the model's answer; less than half the window."""
    lease_ttl_s: float = Field(default=30.0, gt=0, validation_alias="CHATOPS_LEASE_TTL_S")
    production: bool = Field(default=False, validation_alias="CHATOPS_PRODUCTION")
    """Refuse to start against a Redis that would lose the queue on restart (no AOF)."""
    failpoints: str = Field(default="", validation_alias="CHATOPS_FAILPOINTS")
    """Test only: comma-separated points where a worker kills itself (`bot.process.failpoints`)."""
    steer_cancels_tools: bool = Field(default=True, validation_alias="CHATOPS_STEER_CANCELS_TOOLS")
    """A redirect cancels the interruptible tool calls still running (their results say so);
    false lets the batch finish first, and the redirect waits for it."""
    intent_check: IntentCheck = Field(
        default=IntentCheck.AFTER_REDIRECT, validation_alias="CHATOPS_INTENT_CHECK"
    )
    """`after_redirect`: once someone has redirected an analysis, each later batch's calls are
    first checked against the corrections (one small model request), and a call found
    inconsistent waits for approval, the card saying why; `always`: every batch; `off`: never.
    Any other value stops start-up."""
    price_prompt_per_mtok: float = Field(
        default=0.0, ge=0, validation_alias="CHATOPS_PRICE_PROMPT_PER_MTOK"
    )
    """Price of a million prompt tokens, for the cost booked with each turn (0: not tracked)."""
    price_completion_per_mtok: float = Field(
        default=0.0, ge=0, validation_alias="CHATOPS_PRICE_COMPLETION_PER_MTOK"
    )
    """Price of a million completion tokens."""
    worker_metrics_port: int = Field(
        default=0, ge=0, le=65_535, validation_alias="CHATOPS_WORKER_METRICS_PORT"
    )
    """Port of a worker's `GET /metrics` (Prometheus); 0: not served. `chatops worker
    --metrics-port` overrides it, `--metrics-host` sets the address (default all interfaces)."""
    public_url: str = Field(default="", validation_alias="CHATOPS_PUBLIC_URL")
    """The ingress's address as people reach it (e.g. `https://chatops.example.com`): the
    ingress serves each analysis's replay page at `GET /runs/{turn_id}` and every card links to
    it. Unset or empty: no replay pages and no links (the page shows tool results)."""
    audit_maxlen: int = Field(default=10_000, ge=1, validation_alias="CHATOPS_AUDIT_MAXLEN")
    """Audit events kept per session (the oldest are trimmed, approximately)."""
    audit_retention_s: int = Field(
        default=30 * 24 * 3600, ge=1, validation_alias="CHATOPS_AUDIT_RETENTION_S"
    )
    """How long a session's audit trail outlives its last event (seconds)."""
    scheduled_jobs: str = Field(default="", validation_alias="CHATOPS_SCHEDULED_JOBS")
    """A JSON list of cron jobs `chatops scheduler` runs as ordinary turns (format in
    `bot.ops.scheduled_jobs.ScheduledJob`); empty: none."""
    alert_token: SecretStr | None = Field(default=None, validation_alias="CHATOPS_ALERT_TOKEN")
    """The bearer token Alertmanager and Grafana send (`Authorization: Bearer <token>`), compared
    in constant time. Unset or empty: `POST /alerts/alertmanager` and `/alerts/grafana` answer
    404."""
    grafana_secret: SecretStr | None = Field(
        default=None, validation_alias="CHATOPS_GRAFANA_SECRET"
    )
    """The HMAC secret of a Grafana webhook contact point, when one is configured: each request's
    `X-Grafana-Alerting-Signature` is then checked too. Unset or empty: the token alone."""
    pagerduty_secret: SecretStr | None = Field(
        default=None, validation_alias="CHATOPS_PAGERDUTY_SECRET"
    )
    """A PagerDuty v3 webhook subscription's signing secret (`X-PagerDuty-Signature`). Unset or
    empty: `POST /alerts/pagerduty` answers 404."""
    alert_routes: str = Field(default="", validation_alias="CHATOPS_ALERT_ROUTES")
    """A JSON list of alert routes, first match wins (format in `bot.policy.alert_routes`): the
    matchers, the channel, the mode (`notify`, `triage`, `investigate`), the tools. An invalid
    route stops the ingress at start-up. Empty: every alert is unrouted (counted, dropped)."""
    alert_max_per_hour: int = Field(
        default=10, ge=1, le=10_000, validation_alias="CHATOPS_ALERT_MAX_PER_HOUR"
    )
    """New incidents one route opens in an hour at most; the rest are held back, and one notice
    in the route's channel says so."""
    alert_triage_steps: int = Field(default=4, ge=1, validation_alias="CHATOPS_ALERT_TRIAGE_STEPS")
    """`CHATOPS_MAX_STEPS` of an analysis a `triage` route starts."""
    memory_days: int = Field(default=90, ge=1, le=3650, validation_alias="CHATOPS_MEMORY_DAYS")
    """How far back `past_analyses` looks by default, and how long analyses are remembered."""
    scheduler_metrics_port: int = Field(
        default=0, ge=0, le=65_535, validation_alias="CHATOPS_SCHEDULER_METRICS_PORT"
    )
    """Port of the scheduler's `GET /metrics` (reaper sweeps, leadership); 0: not served.
    `chatops scheduler --metrics-port` overrides it."""
    log_format: LogFormat = Field(default="json", validation_alias="CHATOPS_LOG_FORMAT")
    """`json`: one JSON object per line (`bot.logs`); `text`: plain lines for a terminal."""
    log_level: LogLevel = Field(default="INFO", validation_alias="CHATOPS_LOG_LEVEL")
    """The lowest level logged, for every logger (case-insensitive)."""
    otel_endpoint: str | None = Field(default=None, validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT")
    """OpenTelemetry's standard variable: the base URL of an OTLP/HTTP collector (traces go to
    `{endpoint}/v1/traces`). Unset or empty: no traces, and OpenTelemetry is never imported. The
    exporter reads the other standard `OTEL_EXPORTER_OTLP_*` variables (headers, timeout)
    itself. Needs the `chatops[otel]` extra."""

    @property
    def responder_ids(self) -> People:
        """`CHATOPS_RESPONDERS` as a group matched against qualified ids."""
        return parse_people(self.responders)

    @property
    def admin_ids(self) -> People:
        """`CHATOPS_ADMINS` as a group matched against qualified ids."""
        return parse_people(self.admins)

    @model_validator(mode="after")
    def _one_topology(self) -> Settings:
        if self.redis_cluster and self.redis_sentinels.strip():
            raise ValueError("set CHATOPS_REDIS_CLUSTER or CHATOPS_REDIS_SENTINELS, not both")
        if self.redis_cluster and self.redis_wait_replicas:
            # redis-py sends a cluster's WAIT to a node of its choosing, not the connection
            # that wrote, and its cluster pipeline does not load scripts.
            raise ValueError("CHATOPS_REDIS_WAIT_REPLICAS is not supported with a Redis Cluster")
        return self

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinel_addresses(cls, value: str) -> str:
        _sentinel_pairs(value)
        return value

    @property
    def redis_wait_replicas(self) -> int:
        """`CHATOPS_REDIS_WAIT_REPLICAS`, or its default for the topology."""
        if self.redis_wait_replicas_setting is not None:
            return self.redis_wait_replicas_setting
        return 1 if self.redis_sentinels.strip() else 0

    @property
    def redis_topology(self) -> RedisTopology:
        """How `REDIS_URL` is reached: one address, a cluster's node, or through Sentinels."""
        sentinels = _sentinel_pairs(self.redis_sentinels)
        return RedisTopology(self.redis_cluster, sentinels, self.redis_sentinel_primary)

    @field_validator("responders", "admins")
    @classmethod
    def _people(cls, value: str) -> str:
        """An entry with an unknown platform (`slak:U0123`) is refused at start-up."""
        parse_people(value)
        return value

    @field_validator("answer_reserve_tokens")
    @classmethod
    def _reserve_within_window(cls, value: int, info: ValidationInfo) -> int:
        """A reserve of half the window or more leaves no room to send anything."""
        window = info.data.get("context_window_tokens")
        if isinstance(window, int) and value >= window // 2:
            raise ValueError(f"must be less than half CHATOPS_CONTEXT_WINDOW_TOKENS ({window})")
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, value: object) -> object:
        """`auto`, `required`, `omit` or `function:<tool name>`; anything else is refused."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        prefix, colon, name = text.partition(":")
        if colon and prefix.lower() == "function":
            if not name.strip():
                raise ValueError("function: needs a tool's name (function:<tool name>)")
            return ForcedTool(name.strip())
        try:
            return ToolChoice(text.lower())
        except ValueError:
            raise ValueError(
                f"{text[:80]!r} is not auto, required, omit or function:<tool name>"
            ) from None

    @field_validator(
        "console_token",
        "otel_endpoint",
        "alert_token",
        "grafana_secret",
        "pagerduty_secret",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        """`CHATOPS_CONSOLE_TOKEN=` (as in `.env.example`) leaves the console off."""
        return None if value == "" else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_upper(cls, value: object) -> object:
        """`CHATOPS_LOG_LEVEL=debug` is DEBUG."""
        return value.upper() if isinstance(value, str) else value


def _sentinel_pairs(value: str) -> tuple[tuple[str, int], ...]:
    """`CHATOPS_REDIS_SENTINELS` as `(host, port)` pairs; ValueError for one that is not."""
    pairs = []
    for address in filter(None, (part.strip() for part in value.split(","))):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"CHATOPS_REDIS_SENTINELS: {address!r} is not host:port")
        pairs.append((host, int(port)))
    return tuple(pairs)
