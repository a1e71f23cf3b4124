"""A Prometheus server for the `prometheus_query` tests: the real HTTP API over fixed series.

It answers `GET`/`POST /api/v1/query` and `/api/v1/query_range` (POST with a form body) in the
documented envelope (`status`, `data.resultType`/`data.result`, `errorType`/`error`, `warnings`,
`infos`), and it evaluates what it is asked rather than echoing canned text. The PromQL it
understands is a small, honest subset:

- a number (`scalar`) or a double-quoted string (`string`);
- a vector selector, `name`, `name{label="v", label!="v", label=~"re", label!~"re"}` or
  `{__name__="name"}`, with Prometheus' 5-minute lookback;
- `rate(selector[duration])`, from the first and last samples in the window (exact for the
  linear counters here).

Anything else is a `400 bad_data` parse error, worded like Prometheus'. A query that would load
more than `max_samples` samples is a `422 execution` error, as with `--query.max-samples`; a range
over more than 11,000 steps, a bad timestamp or step, or a string in a range query is `bad_data`.
`unavailable(n)` makes the next n requests answer `503 Service Unavailable` in plain text, as
Prometheus does while its TSDB is not ready yet.

Series are functions of time scraped every 15 s: `up` for three targets (`api-2` stops at
`DOWN_AT`), `http_requests_total` counters with constant rates, and `process_open_fds` for 40 pods
(for the output caps).
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.fakes.loopback_server import LoopbackServer

__all__ = ["DOWN_AT", "REQUEST_RATES", "SCRAPE_INTERVAL_S", "FakePrometheus", "Seen"]

SCRAPE_INTERVAL_S = 15.0
LOOKBACK_S = 300.0
MAX_RESOLUTION = 11_000
DOWN_AT = 1_700_000_000.0
"""Unix time at which `up{instance="api-2:8080"}` turns 0 (its target stops answering)."""
REQUEST_RATES = {
    ("api-1:8080", "200"): 12.5,
    ("api-1:8080", "500"): 0.25,
    ("api-2:8080", "200"): 4.0,
}
"""Per-second rates of the `http_requests_total` counters, by (instance, code)."""

Labels = dict[str, str]
Vector = list[tuple[Labels, float]]


@dataclass(frozen=True)
class _Series:
    labels: Labels
    value_at: Callable[[float], float]


def _constant(value: float) -> Callable[[float], float]:
    return lambda t: value


def _counter(per_s: float) -> Callable[[float], float]:
    """A counter growing at `per_s` since its process started (well before any test time)."""
    return lambda t: per_s * (t - 1.6e9)


def _series() -> list[_Series]:
    out = [
        _Series({"__name__": "up", "job": "api", "instance": "api-1:8080"}, _constant(1.0)),
        _Series(
            {"__name__": "up", "job": "api", "instance": "api-2:8080"},
            lambda t: 0.0 if t >= DOWN_AT else 1.0,
        ),
        _Series({"__name__": "up", "job": "db", "instance": "db-1:9187"}, _constant(1.0)),
    ]
    for (instance, code), per_s in REQUEST_RATES.items():
        labels = {"__name__": "http_requests_total", "job": "api", "instance": instance}
        out.append(_Series({**labels, "code": code}, _counter(per_s)))
    for n in range(40):
        labels = {"__name__": "process_open_fds", "job": "api", "pod": f"api-{n:02d}"}
        out.append(_Series(labels, _constant(float(100 + n))))
    return out


class _BadData(Exception):
    """400 bad_data."""


class _Execution(Exception):
    """422 execution."""


_TOKEN = re.compile(
    r"\s*(?:(?P<num>[0-9]+(?:\.[0-9]+)?)|(?P<str>\"[^\"]*\")|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)"
    r"|(?P<op>=~|!~|!=|=|[{}(),\[\]]))"
)
_DURATION = re.compile(r"([0-9]+)(ms|s|m|h|d|w|y)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _duration_s(text: str) -> float | None:
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _UNITS[u] for n, u in parts)


@dataclass
class _Parser:
    """Recursive descent over the subset; builds an evaluator `(t, budget) -> result`."""

    text: str
    pos: int = 0

    def fail(self, what: str) -> _BadData:
        return _BadData(f'invalid parameter "query": 1:{self.pos + 1}: parse error: {what}')

    def peek(self) -> tuple[str, str] | None:
        match = _TOKEN.match(self.text, self.pos)
        if match is None or match.lastgroup is None:
            rest = self.text[self.pos :].strip()
            if rest:
                raise self.fail(f"unexpected character: {rest[0]!r}")
            return None
        return match.lastgroup, match.group(match.lastgroup)

    def take(self, kind: str, value: str | None = None) -> str:
        token = self.peek()
        if token is None or token[0] != kind or (value is not None and token[1] != value):
            got = "end of input" if token is None else repr(token[1])
            raise self.fail(f"unexpected {got}, expected {value or kind}")
        match = _TOKEN.match(self.text, self.pos)
        assert match is not None
        self.pos = match.end()
        return token[1]

    def parse(self) -> Callable[[float, list[int]], tuple[str, Any]]:
        if not self.text.strip():
            raise _BadData('invalid parameter "query": 1:1: parse error: no expression found')
        expr = self.expr()
        extra = self.peek()
        if extra is not None:
            raise self.fail(f"unexpected {extra[1]!r}")
        return expr

    def expr(self) -> Callable[[float, list[int]], tuple[str, Any]]:
        token = self.peek()
        if token is None:
            raise self.fail("unexpected end of input")
        kind, value = token
        if kind == "num":
            number = float(self.take("num"))
            return lambda t, budget: ("scalar", number)
        if kind == "str":
            text = self.take("str")[1:-1]
            return lambda t, budget: ("string", text)
        if kind == "name" and value == "rate":
            self.take("name")
            self.take("op", "(")
            matchers = self.selector()
            self.take("op", "[")
            window = _duration_s(self.take("name") if self.peek_is("name") else self._range())
            self.take("op", "]")
            self.take("op", ")")
            if not window:
                raise self.fail("bad duration in range selector")
            return lambda t, budget: ("vector", _rate(matchers, t, window, budget))
        matchers = self.selector()
        return lambda t, budget: ("vector", _select(matchers, t, budget))

    def peek_is(self, kind: str) -> bool:
        token = self.peek()
        return token is not None and token[0] == kind

    def _range(self) -> str:
        # A duration such as `5m` tokenizes as a number followed by a name.
        number = self.take("num")
        return number + self.take("name")

    def selector(self) -> list[tuple[str, str, str]]:
        matchers: list[tuple[str, str, str]] = []
        if self.peek_is("name"):
            matchers.append(("__name__", "=", self.take("name")))
        token = self.peek()
        if token == ("op", "{"):
            self.take("op", "{")
            while not self.peek() == ("op", "}"):
                label = self.take("name")
                op = self.peek()
                if op is None or op[1] not in ("=", "!=", "=~", "!~"):
                    raise self.fail("expected a label matching operator")
                self.take("op", op[1])
                matchers.append((label, op[1], self.take("str")[1:-1]))
                if self.peek() == ("op", ","):
                    self.take("op", ",")
            self.take("op", "}")
        if not matchers:
            raise self.fail("expected a vector selector")
        return matchers


def _matches(labels: Labels, matchers: list[tuple[str, str, str]]) -> bool:
    return all(_match(labels.get(name, ""), op, want) for name, op, want in matchers)


def _match(have: str, op: str, want: str) -> bool:
    if op in ("=~", "!~"):
        return (re.fullmatch(want, have) is not None) is (op == "=~")
    return (have == want) is (op == "=")


def _last_scrape(t: float) -> float:
    return math.floor(t / SCRAPE_INTERVAL_S) * SCRAPE_INTERVAL_S


def _select(matchers: list[tuple[str, str, str]], t: float, budget: list[int]) -> Vector:
    found = [s for s in _series() if _matches(s.labels, matchers)]
    _spend(budget, len(found))
    scrape = _last_scrape(t)
    return [(dict(s.labels), s.value_at(scrape)) for s in found if t - scrape <= LOOKBACK_S]


def _rate(
    matchers: list[tuple[str, str, str]], t: float, window: float, budget: list[int]
) -> Vector:
    found = [s for s in _series() if _matches(s.labels, matchers)]
    first, last = _last_scrape(t - window) + SCRAPE_INTERVAL_S, _last_scrape(t)
    samples = int((last - first) / SCRAPE_INTERVAL_S) + 1
    _spend(budget, samples * len(found))
    if samples < 2:
        return []
    out: Vector = []
    for s in found:
        labels = {k: v for k, v in s.labels.items() if k != "__name__"}
        out.append((labels, (s.value_at(last) - s.value_at(first)) / (last - first)))
    return out


def _spend(budget: list[int], samples: int) -> None:
    budget[0] -= samples
    if budget[0] < 0:
        raise _Execution(
            "query processing would load too many samples into memory in query execution"
        )


def _format(value: float) -> str:
    """Like Go's strconv.FormatFloat(v, 'f', -1, 64), which Prometheus uses for sample values."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if value.is_integer() else repr(value)


def _timestamp(params: Mapping[str, str], name: str, default: float | None = None) -> float:
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise _BadData(f'invalid parameter "{name}": cannot parse "" to a valid timestamp')
        return default
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise _BadData(
            f'invalid parameter "{name}": cannot parse "{raw}" to a valid timestamp'
        ) from None


def _step(raw: str | None) -> float:
    seconds: float | None
    try:
        seconds = float(raw or "")
    except ValueError:
        seconds = _duration_s(raw or "")
    if seconds is None:
        raise _BadData(f'invalid parameter "step": cannot parse "{raw}" to a valid duration')
    if seconds <= 0:
        raise _BadData(
            "zero or negative query resolution step widths are not accepted. Try a positive integer"
        )
    return seconds


@dataclass(frozen=True)
class Seen:
    """One API request as received."""

    method: str
    path: str
    params: dict[str, str]


@dataclass(eq=False)
class _State:
    max_samples: int = 50_000_000
    unavailable_left: int = 0
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakePrometheus(LoopbackServer):
    """The fake Prometheus; `base_url` is what `CHATOPS_PROMETHEUS_URL` would hold."""

    _thread_name = "fake-prometheus"

    def __init__(self) -> None:
        self._state = _State()
        routes = [
            Route("/api/v1/query", self._query, methods=["GET", "POST"]),
            Route("/api/v1/query_range", self._query_range, methods=["GET", "POST"]),
        ]
        super().__init__(Starlette(routes=routes))

    @property
    def base_url(self) -> str:
        """The server's root URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def seen(self) -> list[Seen]:
        """Every API request received so far, in order."""
        with self._state.lock:
            return list(self._state.seen)

    def unavailable(self, requests: int) -> None:
        """Answer the next `requests` requests with a plain-text 503 (TSDB not ready)."""
        with self._state.lock:
            self._state.unavailable_left = requests

    def limit_samples(self, max_samples: int) -> None:
        """Set the `--query.max-samples` limit."""
        with self._state.lock:
            self._state.max_samples = max_samples

    async def _params(self, request: Request) -> tuple[dict[str, str], Response | None]:
        params = dict(request.query_params)
        if request.method == "POST":
            form = await request.form()
            params.update({k: v for k, v in form.items() if isinstance(v, str)})
        with self._state.lock:
            self._state.seen.append(Seen(request.method, request.url.path, params))
            if self._state.unavailable_left > 0:
                self._state.unavailable_left -= 1
                return params, PlainTextResponse("Service Unavailable", status_code=503)
        return params, None

    async def _query(self, request: Request) -> Response:
        params, refusal = await self._params(request)
        if refusal is not None:
            return refusal
        return self._answer(lambda: self._instant(params))

    async def _query_range(self, request: Request) -> Response:
        params, refusal = await self._params(request)
        if refusal is not None:
            return refusal
        return self._answer(lambda: self._range(params))

    def _answer(self, evaluate: Callable[[], dict[str, Any]]) -> Response:
        try:
            data = evaluate()
        except _BadData as exc:
            return _error(400, "bad_data", str(exc))
        except _Execution as exc:
            return _error(422, "execution", str(exc))
        body: dict[str, Any] = {"status": "success", "data": data}
        infos = data.pop("_infos", [])
        if infos:
            body["infos"] = infos
        return JSONResponse(body)

    def _instant(self, params: Mapping[str, str]) -> dict[str, Any]:
        expr = _Parser(params.get("query", "")).parse()
        at = _timestamp(params, "time", default=time.time())
        kind, value = expr(at, [self._state.max_samples])
        data: dict[str, Any] = {"resultType": kind, "_infos": _infos(params["query"])}
        if kind == "vector":
            data["result"] = [{"metric": m, "value": [at, _format(v)]} for m, v in value]
        elif kind == "scalar":
            data["result"] = [at, _format(value)]
        else:
            data["result"] = [at, value]
        return data

    def _range(self, params: Mapping[str, str]) -> dict[str, Any]:
        expr = _Parser(params.get("query", "")).parse()
        start, end = _timestamp(params, "start"), _timestamp(params, "end")
        step = _step(params.get("step"))
        if end < start:
            raise _BadData("end timestamp must not be before start time")
        if (end - start) / step > MAX_RESOLUTION:
            raise _BadData(
                "exceeded maximum resolution of 11,000 points per timeseries. "
                "Try decreasing the query resolution (?step=XX)"
            )
        budget = [self._state.max_samples]
        series: dict[tuple[tuple[str, str], ...], list[list[Any]]] = {}
        t = start
        while t <= end:
            kind, value = expr(t, budget)
            if kind == "string":
                raise _BadData(
                    'invalid expression type "string" for range query, '
                    "must be Scalar or instant Vector"
                )
            points = [({}, value)] if kind == "scalar" else value
            for metric, v in points:
                series.setdefault(tuple(sorted(metric.items())), []).append([t, _format(v)])
            t += step
        result = [{"metric": dict(key), "values": values} for key, values in series.items()]
        return {"resultType": "matrix", "result": result, "_infos": _infos(params["query"])}


def _infos(query: str) -> list[str]:
    """Prometheus' annotation for `rate()` over a metric not named like a counter."""
    match = re.match(r"\s*rate\(\s*([A-Za-z_:][A-Za-z0-9_:]*)", query)
    if match is None or match.group(1).endswith(("_total", "_sum", "_count", "_bucket")):
        return []
    return [
        "PromQL info: metric might not be a counter, name does not end in "
        f'_total/_sum/_count/_bucket: "{match.group(1)}"'
    ]


def _error(status: int, error_type: str, message: str) -> JSONResponse:
    body = {"status": "error", "errorType": error_type, "error": message}
    return JSONResponse(body, status_code=status)
