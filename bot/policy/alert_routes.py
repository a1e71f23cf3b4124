r"""`CHATOPS_ALERT_ROUTES`: which channel an alert goes to, and what the bot does with it.

A JSON list of routes, first match wins:

    [{"name": "checkout",
      "matchers": ["alertname=\"CheckoutLatencyHigh\"", "severity=~\"critical|page\""],
      "platform": "slack", "channel": "C0123", "mode": "investigate",
      "tools": ["prometheus_query", "http_get"]}]

- `matchers`: Alertmanager's own matcher syntax (`name="value"`, `!=`, `=~`, `!~`; the value
  double-quoted with `\"`, `\\` and `\n` escapes, or bare as Alertmanager also accepts it). A
  regular expression is anchored at both ends, as Alertmanager anchors it, and runs on RE2, so
  matching is linear in the label's length whatever the pattern. A label an alert lacks matches
  as the empty string. An empty list matches every alert.
- `platform` and `channel`: a Slack channel id, a Feishu chat id, or a console channel name.
- `mode`: `notify` (post the alert only), `triage` (a short analysis), `investigate` (a full one,
  the default). `tools` narrows the analysis's tools (omitted: all of the worker's).
- `name` names the route in logs, metrics, its hourly limit and the card; default `route #N`.

A notification is matched on its common labels (for PagerDuty: `service`, `urgency`, `priority`,
`title`); when no route takes those, on each alert's own labels in turn, so a group whose alerts
differ in a label a route names still finds the route its first matching alert asks for.

Bounds: 200 routes, 50 matchers a route, a regular expression of 1 KiB, the first 20 alerts. An
invalid route stops start-up with a message naming it (`BotConfigError`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any

import re2  # type: ignore[import-untyped]
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainSerializer,
    StringConstraints,
    ValidationError,
)

from bot.alerts import AlertNotification
from bot.errors import BotConfigError
from bot.events import AlertMode, Platform

__all__ = ["AlertRoute", "Matcher", "parse_alert_routes", "parse_matcher", "route_for"]

MAX_ROUTES = 200
MAX_MATCHERS = 50
MAX_REGEX = 1024
FALLBACK_ALERTS = 20
"""Alerts whose own labels are tried when the common labels match no route."""
_OPS = ("=~", "!~", "!=", "=")
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n"}


class Matcher:
    """One Alertmanager matcher: a label name, an operator and a value (or an anchored RE2)."""

    __slots__ = ("_regex", "name", "op", "value")

    def __init__(self, name: str, op: str, value: str) -> None:
        """Compile the matcher.

        Raises:
            ValueError: An operator other than `=`, `!=`, `=~`, `!~`, or an invalid or too long
                regular expression.
        """
        if op not in _OPS:
            raise ValueError(f"unknown operator {op!r}")
        self.name, self.op, self.value = name, op, value
        self._regex: Any = None
        if op in ("=~", "!~"):
            if len(value) > MAX_REGEX:
                raise ValueError(f"regular expression longer than {MAX_REGEX} characters")
            options = re2.Options()
            options.log_errors = False
            try:
                self._regex = re2.compile(f"^(?:{value})$", options)
            except re2.error as exc:
                raise ValueError(f"invalid regular expression: {exc}") from None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether `labels` satisfy it (an absent label is the empty string)."""
        got = labels.get(self.name, "")
        if self._regex is not None:
            found = self._regex.fullmatch(got) is not None
            return found if self.op == "=~" else not found
        return (got == self.value) if self.op == "=" else (got != self.value)

    def __str__(self) -> str:
        escaped = self.value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'{self.name}{self.op}"{escaped}"'

    def __repr__(self) -> str:
        return f"Matcher({self})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Matcher) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def parse_matcher(text: str) -> Matcher:
    """Parse `name op value` as Alertmanager does (spaces around the parts allowed).

    Raises:
        ValueError: Not a matcher (the message says what is wrong).
    """
    text = text.strip()
    end = 0
    while end < len(text) and (text[end].isalnum() or text[end] in "_.:-"):
        end += 1
    name = text[:end]
    if not name or not (name[0].isalpha() or name[0] == "_"):
        raise ValueError(f"a matcher starts with a label name: {text[:80]!r}")
    rest = text[end:].lstrip()
    op = next((o for o in _OPS if rest.startswith(o)), None)
    if op is None:
        raise ValueError(f"expected =, !=, =~ or !~ after {name!r}")
    return Matcher(name, op, _value(rest[len(op) :].strip()))


def _value(raw: str) -> str:
    """A matcher's value: double-quoted with escapes, or bare (linear, one pass)."""
    if not raw.startswith('"'):
        if '"' in raw:
            raise ValueError("a bare value cannot contain a double quote")
        return raw
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            if i + 1 >= len(raw) or raw[i + 1] not in _ESCAPES:
                raise ValueError('a quoted value allows only the escapes \\", \\\\ and \\n')
            out.append(_ESCAPES[raw[i + 1]])
            i += 2
            continue
        if ch == '"':
            if raw[i + 1 :].strip():
                raise ValueError("text after the closing quote")
            return "".join(out)
        out.append(ch)
        i += 1
    raise ValueError("a quoted value is not closed")


def _matcher(value: object) -> Matcher:
    if isinstance(value, Matcher):
        return value
    if not isinstance(value, str):
        raise ValueError('a matcher is a string such as alertname="X"')
    return parse_matcher(value)


_MatcherField = Annotated[Matcher, BeforeValidator(_matcher), PlainSerializer(str, return_type=str)]
_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class AlertRoute(BaseModel):
    """One entry of `CHATOPS_ALERT_ROUTES`."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    name: _Text
    matchers: tuple[_MatcherField, ...] = ()
    platform: Platform
    channel: _Text
    mode: AlertMode = AlertMode.INVESTIGATE
    tools: tuple[_Text, ...] | None = None

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether every matcher holds for `labels`."""
        return all(m.matches(labels) for m in self.matchers)


_PLATFORMS = (Platform.SLACK, Platform.FEISHU, Platform.CONSOLE)


def parse_alert_routes(raw: str) -> tuple[AlertRoute, ...]:
    """Parse `CHATOPS_ALERT_ROUTES` (empty: no routes).

    Raises:
        BotConfigError: Not a JSON list of routes, or a route is invalid (named in the message).
    """
    if not raw.strip():
        return ()
    try:
        entries: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BotConfigError(f"CHATOPS_ALERT_ROUTES is not JSON: {exc}") from exc
    if not isinstance(entries, list):
        raise BotConfigError("CHATOPS_ALERT_ROUTES must be a JSON list of routes")
    if len(entries) > MAX_ROUTES:
        raise BotConfigError(f"CHATOPS_ALERT_ROUTES: more than {MAX_ROUTES} routes")
    routes: list[AlertRoute] = []
    for n, entry in enumerate(entries, start=1):
        routes.append(_route(entry, n))
        if any(r.name == routes[-1].name for r in routes[:-1]):
            raise BotConfigError(
                f"CHATOPS_ALERT_ROUTES: route {routes[-1].name!r} (#{n}) is defined twice"
            )
    return tuple(routes)


def _route(entry: object, n: int) -> AlertRoute:
    name = entry.get("name") if isinstance(entry, dict) else None
    label = f"route {name!r} (#{n})" if isinstance(name, str) and name.strip() else f"route #{n}"
    if not isinstance(entry, dict):
        raise BotConfigError(f"CHATOPS_ALERT_ROUTES: {label}: a route is a JSON object")
    values = {"name": f"route #{n}", **entry}
    if isinstance(values.get("matchers"), list) and len(values["matchers"]) > MAX_MATCHERS:
        raise BotConfigError(f"CHATOPS_ALERT_ROUTES: {label}: more than {MAX_MATCHERS} matchers")
    try:
        route = AlertRoute.model_validate(values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'route'}: {e['msg']}" for e in exc.errors()
        )
        raise BotConfigError(f"CHATOPS_ALERT_ROUTES: {label}: {problems}") from exc
    if route.platform not in _PLATFORMS:
        raise BotConfigError(
            f"CHATOPS_ALERT_ROUTES: {label}: platform must be slack, feishu or console"
        )
    return route


def route_for(routes: Sequence[AlertRoute], notification: AlertNotification) -> AlertRoute | None:
    """The route that takes `notification` (see the module docstring), or None."""
    common = dict(notification.common_labels)
    for route in routes:
        if route.matches(common):
            return route
    for alert in notification.alerts[:FALLBACK_ALERTS]:
        labels = dict(alert.labels)
        for route in routes:
            if route.matches(labels):
                return route
    return None
