"""`CHATOPS_ALERT_ROUTES`: Alertmanager's matcher syntax, first match wins, errors name routes."""

from __future__ import annotations

import json

import pytest

from bot.alerts import Alert, AlertNotification, AlertSender, AlertStatus
from bot.errors import BotConfigError
from bot.policy.alert_routes import AlertRoute, parse_alert_routes, parse_matcher, route_for

EXAMPLE = json.dumps(
    [
        {
            "name": "checkout",
            "matchers": ['alertname="CheckoutLatencyHigh"', 'severity=~"critical|page"'],
            "platform": "slack",
            "channel": "C0123",
            "mode": "investigate",
        },
        {"name": "rest", "matchers": [], "platform": "feishu", "channel": "oc_1", "mode": "notify"},
    ]
)


def note(common: dict[str, str], *alerts: dict[str, str]) -> AlertNotification:
    return AlertNotification(
        sender=AlertSender.ALERTMANAGER,
        incident="{}:{}",
        status=AlertStatus.FIRING,
        alerts=tuple(
            Alert(fingerprint=str(n), status=AlertStatus.FIRING, labels=tuple(a.items()))
            for n, a in enumerate(alerts)
        ),
        common_labels=tuple(common.items()),
    )


def test_the_issue_example_routes_first_match_and_falls_through_to_the_catch_all() -> None:
    routes = parse_alert_routes(EXAMPLE)
    hit = route_for(routes, note({"alertname": "CheckoutLatencyHigh", "severity": "page"}))
    assert hit is not None and hit.name == "checkout"
    other = route_for(routes, note({"alertname": "CheckoutLatencyHigh", "severity": "warning"}))
    assert other is not None and other.name == "rest" and other.mode == "notify"


def test_without_a_catch_all_an_alert_is_unrouted() -> None:
    routes = parse_alert_routes(EXAMPLE)[:1]
    assert route_for(routes, note({"alertname": "DiskFull"})) is None


@pytest.mark.parametrize(
    ("matcher", "labels", "expected"),
    [
        ('severity=~"crit"', {"severity": "critical"}, False),  # anchored like Alertmanager
        ('severity=~"crit.*"', {"severity": "critical"}, True),
        ('severity!~"warn|info"', {"severity": "critical"}, True),
        ('severity!="page"', {}, True),  # an absent label is ""
        ('team=""', {}, True),
        ('team=~".+"', {}, False),
        ("job = api", {"job": "api"}, True),  # a bare value, spaces around the operator
        ('msg="say \\"hi\\"\\n"', {"msg": 'say "hi"\n'}, True),
    ],
)
def test_matchers_read_as_alertmanager_reads_them(
    matcher: str, labels: dict[str, str], expected: bool
) -> None:
    assert parse_matcher(matcher).matches(labels) is expected


def test_a_pathological_pattern_is_linear_on_a_long_hostile_value() -> None:
    m = parse_matcher('x=~"(a+)+b"')
    assert not m.matches({"x": "a" * 100_000})


def test_an_alerts_own_labels_are_tried_when_the_common_ones_match_no_route() -> None:
    routes = parse_alert_routes(EXAMPLE)[:1]
    mixed = note(
        {"alertname": "CheckoutLatencyHigh"},
        {"alertname": "CheckoutLatencyHigh", "severity": "warning"},
        {"alertname": "CheckoutLatencyHigh", "severity": "critical"},
    )
    hit = route_for(routes, mixed)
    assert hit is not None and hit.name == "checkout"


def test_a_route_survives_its_json_round_trip() -> None:
    (route, _) = parse_alert_routes(EXAMPLE)
    assert AlertRoute.model_validate_json(route.model_dump_json()) == route


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("{not json", "not JSON"),
        ('{"a": 1}', "JSON list"),
        ('[{"name": "db", "platform": "subagent", "channel": "x"}]', "route 'db' (#1): platform"),
        ('[{"platform": "slack", "channel": ""}]', "route #1: channel"),
        ('[{"platform": "slack", "channel": "C", "mode": "panic"}]', "route #1: mode"),
        (
            '[{"name": "r", "platform": "slack", "channel": "C", "matchers": ["x=~\\"(\\""]}]',
            "route 'r' (#1): matchers.0",
        ),
        ('[{"platform": "slack", "channel": "C", "matchers": ["=x"]}]', "label name"),
        ('[{"platform": "slack", "channel": "C", "color": "red"}]', "color"),
        (
            '[{"name": "a", "platform": "slack", "channel": "C"},'
            ' {"name": "a", "platform": "slack", "channel": "D"}]',
            "route 'a' (#2) is defined twice",
        ),
    ],
)
def test_an_invalid_route_is_refused_naming_it(raw: str, says: str) -> None:
    with pytest.raises(BotConfigError, match=None) as caught:
        parse_alert_routes(raw)
    assert says in str(caught.value)
