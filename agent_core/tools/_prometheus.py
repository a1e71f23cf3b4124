"""The `prometheus_query` tool: read-only PromQL over the Prometheus HTTP API.

Contract: the server is fixed by configuration (`CHATOPS_PROMETHEUS_URL`, its root, with any path
prefix); the model chooses only the query and its times. Arguments:

- `query` (required): a PromQL expression.
- `time`: evaluate an instant query at this time instead of now.
- `start`, `end`, `step`: giving `start` makes it a range query (`/api/v1/query_range`); `end`
  defaults to now and `step` to whatever gives about `DEFAULT_POINTS` points.

A time is RFC 3339 (`2024-05-01T12:00:00Z`, with an offset), unix seconds (`1714564800`), `now`,
or relative to now: `-30s`, `-15m`, `-1h`, `-2d`, `-1w`. Relative times are resolved here, against
the tool's clock, because Prometheus accepts only absolute ones. A step is a duration (`30s`,
`5m`, `1h`) or a number of seconds; a range of more than `MAX_RANGE_POINTS` steps is refused
before anything is sent (Prometheus itself allows 11,000, far more than the model can read).

The request is a form-encoded POST, which the API accepts like a GET and which keeps a long
query clear of server-side URL length limits. Prometheus is also sent the API's own `timeout`
(`QUERY_TIMEOUT_SHARE` of the tool's timeout, in milliseconds: `4000ms` of 5 s), so it stops
evaluating a query at about the time we would stop waiting for it, and its answer saying so
still arrives within the tool's timeout. Prometheus caps it at its `--query.timeout` (default
2 min). Its `503 timeout` ("query timed out in expression evaluation") and the `422 execution`
of a deadline passed while selecting series are a tool error saying the query was too heavy,
not retried: the same query would only time out again.

Answers are read bounded as they stream (`read_body`, as `http_get` reads): at most
`BodyLimit.max_bytes` (`CHATOPS_TOOL_MAX_BYTES`) of JSON, counted on the wire and after
decoding, and the connection is closed at the cap, so a huge answer costs the cap, not its size.
A longer answer cannot be parsed (cut JSON is no result), so it is a tool error naming the cap
and saying how to ask for less (aggregate, narrow the selector, a coarser step), never a
partial result; an error body is read under the same bound, and its text shown cut.

The result is rendered as text (series labels in PromQL notation, values as Prometheus
wrote them), capped at `MAX_SERIES` series and, for a range, `MAX_RUNS` runs of equal values per
series, saying how much was left out; `warnings` and `infos` follow. A `400 bad_data` or
`422 execution` error is a tool error the model reads, not retried: the query itself is wrong.
A `502`/`503`/`504` (a proxy without an answer, or Prometheus not ready or overloaded), other
than Prometheus' own `timeout`, and a connection that could not be made are retried (`RETRY`).
A read timeout is not: the same query would only time out again.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from agent_core._errors import ConfigError, ToolFailed
from agent_core._redaction import redact
from agent_core.tools._base import Interruptibility, RetryPolicy, Risk, Tool, ToolContext
from agent_core.tools._bounded_body import ACCEPT_ENCODING, Body, BodyError, BodyLimit, read_body
from agent_core.tools._connections import ConnectionSlots, held

__all__ = ["prometheus_tool"]

TIMEOUT_S = 5.0
"""Per-call timeout, as for other API tools; the tool's own timeout in the batch matches it."""
QUERY_TIMEOUT_SHARE = 0.8
"""Prometheus' own evaluation timeout as a share of ours: under it, so its 503 reaches us before
we give up (4 s of 5 s leaves a second for the answer to be written and read)."""
RETRY = RetryPolicy(attempts=3, base_delay_s=0.5, max_delay_s=2.0)
"""Three tries for connection failures and 502/503/504, with a jittered wait under 2 s."""
RETRYABLE_STATUSES = frozenset({502, 503, 504})
DEFAULT_POINTS = 60
"""A range query without `step` gets about this many points."""
MAX_RANGE_POINTS = 1_000
"""Steps per range query at most: more would be cut from the output anyway."""
MAX_SERIES = 20
"""Series shown at most; the rest are counted."""
MAX_RUNS = 20
"""Runs of equal consecutive values shown per range series, the latest; the rest are counted."""
MAX_OUTPUT_CHARS = 8_000
"""The whole text is cut to this length, after redaction."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_RELATIVE = re.compile(r"-(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>s|m|h|d|w)")
_DURATION = re.compile(r"(?P<n>[0-9]+(?:\.[0-9]+)?)(?P<unit>ms|s|m|h|d|w)")

_TIME_SCHEMA = {
    "type": ["string", "number"],
    "description": "RFC 3339 with offset, unix seconds, `now`, or relative like `-15m`, `-1h`",
}
PARAMETERS: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1, "description": "PromQL expression"},
        "time": {**_TIME_SCHEMA, "description": "Instant query: evaluation time (default now)"},
        "start": {**_TIME_SCHEMA, "description": "Range query: start time; makes it a range"},
        "end": {**_TIME_SCHEMA, "description": "Range query: end time (default now)"},
        "step": {
            "type": ["string", "number"],
            "description": "Range query: resolution, `30s`, `5m`, `1h` or seconds",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}


def prometheus_tool(
    base_url: str,
    client: httpx.AsyncClient,
    *,
    clock: Callable[[], float] = time.time,
    limit: BodyLimit | None = None,
    timeout_s: float = TIMEOUT_S,
    slots: ConnectionSlots | None = None,
) -> Tool:
    """Build the `prometheus_query` tool for the server at `base_url`.

    Args:
        base_url: The server's root, e.g. `http://prometheus:9090` or `https://host/prometheus`.
        client: The HTTP client requests go through.
        clock: Unix time now; relative times and the default `end` are resolved against it.
        limit: How much of an answer is read (default `BodyLimit()`: 1 MiB).
        timeout_s: The tool's timeout; Prometheus is sent `QUERY_TIMEOUT_SHARE` of it.
        slots: The connections `client` may hold at once; a query waits for one off its clock.

    Raises:
        ConfigError: `base_url` is not an http(s) URL with a host, or `timeout_s` is not positive.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"Prometheus URL {base_url!r} is not an http:// or https:// URL")
    if not timeout_s > 0 or math.isinf(timeout_s):
        raise ConfigError(
            f"a Prometheus timeout must be a positive number of seconds, not {timeout_s!r}"
        )
    root = base_url.rstrip("/")
    bound = limit or BodyLimit()
    query_timeout = f"{max(1, round(timeout_s * QUERY_TIMEOUT_SHARE * 1000))}ms"

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        endpoint, form, header = _request(args, clock(), query_timeout)
        try:
            async with (
                held(slots, "the Prometheus query"),
                client.stream(
                    "POST",
                    f"{root}/api/v1/{endpoint}",
                    data=form,
                    headers={"Accept-Encoding": ACCEPT_ENCODING},
                    timeout=timeout_s,
                ) as response,
            ):
                body = await read_body(response, bound)
        except BodyError as exc:
            raise ToolFailed(f"Prometheus answered a body that could not be read: {exc}") from exc
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise ToolFailed(
                f"Prometheus at {root} unreachable: {type(exc).__name__}: {exc}", retryable=True
            ) from exc
        except httpx.TimeoutException as exc:
            raise ToolFailed(
                f"Prometheus did not answer within {timeout_s:g} s; narrow the query"
            ) from exc
        except httpx.HTTPError as exc:
            raise ToolFailed(f"Prometheus request failed: {type(exc).__name__}: {exc}") from exc
        return _bounded(_render(header, _envelope(response, body, bound, query_timeout)))

    return Tool(
        name="prometheus_query",
        description=(
            "Run a PromQL query against Prometheus (read-only). Instant by default (at `time`, "
            "default now); give `start` (and optionally `end`, `step`) for a range query. "
            "Times: RFC 3339, unix seconds, `now`, or relative like `-1h`."
        ),
        parameters=PARAMETERS,
        handler=handler,
        interruptibility=Interruptibility.ABORTABLE,
        timeout_s=timeout_s,
        risk=Risk.READ_ONLY,
        idempotent=True,
        retry=RETRY,
    )


def _request(
    args: Mapping[str, Any], now: float, query_timeout: str
) -> tuple[str, dict[str, str], str]:
    """The endpoint, the form to post and a header line describing the query."""
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolFailed("`query` must be a non-empty PromQL expression")
    form = {"query": query, "timeout": query_timeout}
    if args.get("start") is None:
        if args.get("end") is not None or args.get("step") is not None:
            raise ToolFailed("`end` and `step` belong to a range query: give `start` too")
        if args.get("time") is None:
            return "query", form, f"instant query {query}"
        at = _time(args["time"], now, "time")
        return "query", form | {"time": _number(at)}, f"instant query {query} at {_iso(at)}"
    if args.get("time") is not None:
        raise ToolFailed("`time` is for an instant query; a range query takes `start`/`end`")
    start = _time(args["start"], now, "start")
    end = _time(args.get("end", "now"), now, "end")
    if start >= end:
        raise ToolFailed(f"`start` ({_iso(start)}) must be before `end` ({_iso(end)})")
    step = _step(args.get("step"), end - start)
    if (end - start) / step > MAX_RANGE_POINTS:
        points, least = math.ceil((end - start) / step), math.ceil((end - start) / MAX_RANGE_POINTS)
        raise ToolFailed(
            f"a step of {_number(step)} s gives {points} points per series;"
            f" use a step of at least {least} s"
        )
    form |= {"start": _number(start), "end": _number(end), "step": _number(step)}
    header = f"range query {query} from {_iso(start)} to {_iso(end)}, step {_number(step)} s"
    return "query_range", form, header


def _time(value: object, now: float, name: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _in_range(float(value), name)
    text = value.strip() if isinstance(value, str) else ""
    if text == "now":
        return now
    if match := _RELATIVE.fullmatch(text):
        return now - float(match["n"]) * _UNITS[match["unit"]]
    try:
        return _in_range(float(text), name)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ToolFailed(
            f"`{name}` {value!r} is not a time: use RFC 3339 with an offset"
            " (2024-05-01T12:00:00Z), unix seconds, `now`, or relative like `-1h`"
        )
    return parsed.timestamp()


def _in_range(ts: float, name: str) -> float:
    """Unix seconds between 1970 and 5138 (beyond, a date cannot be printed): a typo otherwise."""
    if not 0 <= ts < 1e11:
        raise ToolFailed(f"`{name}` {ts!r} is not a plausible unix time in seconds")
    return ts


def _step(value: object, span: float) -> float:
    if value is None:
        return float(max(1, math.ceil(span / DEFAULT_POINTS)))
    seconds: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value.strip())
        if match:
            seconds = float(match["n"]) * _UNITS[match["unit"]]
        else:
            try:
                seconds = float(value)
            except ValueError:
                seconds = None
    if seconds is None or not seconds > 0 or math.isinf(seconds):
        raise ToolFailed(f"`step` {value!r} is not a positive duration like `30s`, `5m` or 60")
    return seconds


def _envelope(
    response: httpx.Response, body: Body, limit: BodyLimit, query_timeout: str
) -> Mapping[str, Any]:
    """The parsed success envelope; any error becomes a `ToolFailed`, retryable when transient."""
    status, text = response.status_code, body.text(response.charset_encoding)
    if status == 200 and body.truncated:
        raise ToolFailed(
            f"Prometheus answered more than the {limit.max_bytes} bytes a tool reads"
            " (CHATOPS_TOOL_MAX_BYTES); reading stopped there: aggregate (sum by (...), topk),"
            " narrow the selector, or use a coarser step"
        )
    parsed = _json(body)
    error = ""
    if isinstance(parsed, dict) and parsed.get("status") == "error":
        error = f"{parsed.get('errorType', 'error')}: {parsed.get('error', '')}"
        if _timed_out(parsed):
            raise ToolFailed(
                f"Prometheus stopped the query at its {query_timeout} timeout (HTTP {status})"
                f" {error}; it is too heavy: a shorter range, a coarser step, or fewer series"
            )
    if status in RETRYABLE_STATUSES:
        detail = error or text[:200].strip()
        raise ToolFailed(
            f"Prometheus answered HTTP {status} {response.reason_phrase}: {detail}", retryable=True
        )
    if error:
        raise ToolFailed(f"Prometheus refused the query (HTTP {status}) {error}")
    if status != 200 or not isinstance(parsed, dict) or parsed.get("status") != "success":
        hint = " (is CHATOPS_PROMETHEUS_URL the server's root?)" if status == 404 else ""
        raise ToolFailed(
            f"not a Prometheus API answer: HTTP {status} {response.reason_phrase}{hint}: "
            f"{text[:200].strip()}"
        )
    return parsed


def _timed_out(parsed: Mapping[str, Any]) -> bool:
    """Prometheus' own timeout: `503 timeout`, or a deadline passed while selecting series."""
    if parsed.get("errorType") == "timeout":
        return True
    message = parsed.get("error")
    return (
        parsed.get("errorType") == "execution"
        and isinstance(message, str)
        and (message.endswith("context deadline exceeded"))
    )


def _json(body: Body) -> Any:
    """The body as JSON, or None when it is not JSON (or was cut)."""
    if body.truncated:
        return None
    try:
        return json.loads(body.data)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the stack
        return None


def _render(header: str, body: Mapping[str, Any]) -> str:
    data = body.get("data")
    if not isinstance(data, dict) or "result" not in data:
        raise ToolFailed("Prometheus answered success without a result")
    kind = data.get("resultType")
    try:
        lines = _result(kind, data["result"])
    except (KeyError, TypeError, ValueError, IndexError, OverflowError) as exc:
        raise ToolFailed(f"Prometheus answered a malformed {kind} result") from exc
    for key in ("warnings", "infos"):
        notes = body.get(key)
        lines += [f"{key[:-1]}: {note}" for note in notes] if isinstance(notes, list) else []
    return "\n".join([header, *lines])


def _result(kind: object, result: Any) -> list[str]:
    match kind:
        case "vector":
            return _vector(result)
        case "matrix":
            return _matrix(result)
        case "scalar" | "string":
            return [f"{kind} {result[1]} at {_iso(float(result[0]))}"]
        case _:
            raise ToolFailed(f"Prometheus answered an unknown resultType {kind!r}")


def _vector(result: Sequence[Mapping[str, Any]]) -> list[str]:
    if not result:
        return ["instant vector: no series (nothing matched)"]
    at = _iso(float(result[0]["value"][0]))
    lines = [f"instant vector at {at}, {len(result)} series:"]
    lines += [f"{_labels(s['metric'])} {s['value'][1]}" for s in result[:MAX_SERIES]]
    return lines + _left_out(len(result))


def _matrix(result: Sequence[Mapping[str, Any]]) -> list[str]:
    if not result:
        return ["range vector: no series (nothing matched)"]
    lines = [f"range vector, {len(result)} series:"]
    for series in result[:MAX_SERIES]:
        values: Sequence[Sequence[Any]] = series["values"]
        lines.append(f"{_labels(series['metric'])}: {_summary(values)}")
        runs = _runs(values)
        if len(runs) > MAX_RUNS:
            lines.append(f"  … {len(runs) - MAX_RUNS} earlier runs left out")
        lines += [f"  {run}" for run in runs[-MAX_RUNS:]]
    return lines + _left_out(len(result))


def _summary(values: Sequence[Sequence[Any]]) -> str:
    """Point count, and min, max and last value as Prometheus wrote them."""
    text = f"{len(values)} points"
    finite = [(float(v), v) for _, v in values if math.isfinite(float(v))]
    if finite:
        low, high = min(finite)[1], max(finite)[1]
        text += f", min {low}, max {high}"
    return f"{text}, last {values[-1][1]}" if values else text


def _runs(values: Sequence[Sequence[Any]]) -> list[str]:
    """Consecutive equal values folded into one line: a status flip reads as two lines."""
    runs: list[list[Any]] = []  # [first time, last time, value, count]
    for ts, value in values:
        if runs and runs[-1][2] == value:
            runs[-1][1], runs[-1][3] = ts, runs[-1][3] + 1
        else:
            runs.append([ts, ts, value, 1])
    return [
        f"{_iso(float(first))} {value}"
        if count == 1
        else f"{_iso(float(first))} to {_iso(float(last))} {value} ({count} points)"
        for first, last, value, count in runs
    ]


def _left_out(total: int) -> list[str]:
    if total <= MAX_SERIES:
        return []
    return [f"… {total - MAX_SERIES} more series left out; narrow the selector or aggregate"]


def _labels(metric: Mapping[str, str]) -> str:
    """`name{a="x", b="y"}` as PromQL writes a series."""
    name = metric.get("__name__", "")
    pairs = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{pairs}}}" if pairs or not name else name


def _bounded(text: str) -> str:
    """Redacted whole, then cut: a secret cut in half at the limit would go unrecognised."""
    full = redact(text)
    if len(full) <= MAX_OUTPUT_CHARS:
        return full
    return full[:MAX_OUTPUT_CHARS] + f"\n… [truncated {len(full) - MAX_OUTPUT_CHARS} characters]"


def _iso(ts: float) -> str:
    spec = "seconds" if ts == int(ts) else "milliseconds"
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:.3f}"
