"""The alert senders' requests verified and read: exact payloads, forged proofs, hostile bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.adapters.alerts import (
    parse_alertmanager,
    parse_grafana,
    parse_pagerduty,
    verify_bearer,
    verify_grafana,
    verify_pagerduty,
)
from bot.adapters.alerts.bounded import MAX_ALERTS, MAX_LABELS, MAX_VALUE
from bot.alerts import AlertSender, AlertStatus
from bot.errors import MalformedRequest, NotAuthentic
from tests.fakes import alert_senders as senders

TOKEN, SECRET = "token-0123456789", "secret-0123456789"


def am() -> dict[str, Any]:
    return senders.alertmanager_payload(
        group_key='{}:{alertname="CheckoutLatencyHigh"}',
        alerts=[
            senders.am_alert(
                "CheckoutLatencyHigh",
                fingerprint="c5a1b2",
                labels={"severity": "critical", "service": "checkout"},
                annotations={"summary": "p99 over 2 s", "runbook_url": "https://rb/checkout"},
            )
        ],
    )


def test_alertmanagers_version_4_payload_is_read_as_it_is_sent() -> None:
    body, headers = senders.alertmanager_request(am(), TOKEN)
    verify_bearer(headers, TOKEN)
    n = parse_alertmanager(body)
    assert (n.sender, n.incident, n.status) == (
        AlertSender.ALERTMANAGER,
        '{}:{alertname="CheckoutLatencyHigh"}',
        AlertStatus.FIRING,
    )
    (alert,) = n.alerts
    assert alert.fingerprint == "c5a1b2" and alert.starts_at == "2026-12-02T10:00:00Z"
    assert alert.label("severity") == "critical" and alert.annotation("runbook_url")
    assert n.common("service") == "checkout" and n.external_url.startswith("http://")


def test_a_payload_of_another_version_or_shape_is_a_400_naming_the_field() -> None:
    wrong = {**am(), "version": "3"}
    with pytest.raises(MalformedRequest, match="version"):
        parse_alertmanager(json.dumps(wrong).encode())
    with pytest.raises(MalformedRequest, match="alerts"):
        parse_alertmanager(json.dumps({**am(), "alerts": 7}).encode())
    with pytest.raises(MalformedRequest, match="groupKey"):
        parse_alertmanager(json.dumps({k: v for k, v in am().items() if k != "groupKey"}).encode())
    with pytest.raises(MalformedRequest):
        parse_alertmanager(b"not json")
    with pytest.raises(MalformedRequest):
        parse_alertmanager(b'{"version": "4", "groupKey": "\\ud800", "alerts": []}')
    with pytest.raises(MalformedRequest):
        parse_alertmanager(b"[1, 2]")


def test_hostile_sizes_are_bounded() -> None:
    many = am()
    many["alerts"] = [
        senders.am_alert("X", fingerprint=str(n), labels={"v": "y" * 20_000}) for n in range(500)
    ]
    n = parse_alertmanager(json.dumps(many).encode())
    assert len(n.alerts) == MAX_ALERTS
    assert all(len(a.label("v")) == MAX_VALUE for a in n.alerts)
    deep = b'{"version": "4", "groupKey": "g", "alerts": [' + b"[" * 5000 + b"]" * 5000 + b"]}"
    with pytest.raises(MalformedRequest):
        parse_alertmanager(deep)


@pytest.mark.parametrize(
    "authorization", ["", "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x", "Bearer"]
)
def test_a_missing_or_wrong_bearer_token_is_refused(authorization: str) -> None:
    with pytest.raises(NotAuthentic):
        verify_bearer({"authorization": authorization}, TOKEN)


def test_grafanas_payload_and_hmac_with_and_without_its_timestamp() -> None:
    payload = senders.grafana_payload(
        group_key='{}/{}:{alertname="X"}',
        alerts=[senders.am_alert("X", fingerprint="g1")],
    )
    body, headers = senders.grafana_request(payload, TOKEN, SECRET)
    verify_grafana(body, headers, SECRET, now=0)
    stamped_body, stamped = senders.grafana_request(payload, TOKEN, SECRET, now=1_800_000_000)
    verify_grafana(stamped_body, stamped, SECRET, now=1_800_000_100)
    with pytest.raises(NotAuthentic):  # replayed ten minutes later
        verify_grafana(stamped_body, stamped, SECRET, now=1_800_000_600)
    with pytest.raises(NotAuthentic):
        verify_grafana(body + b" ", headers, SECRET, now=0)
    with pytest.raises(NotAuthentic):
        verify_grafana(body, {}, SECRET, now=0)
    for stamp in ("²", "9" * 5000, "-1"):  # never a 500: each is just not unix seconds
        with pytest.raises(NotAuthentic):
            verify_grafana(body, {**headers, "x-grafana-alerting-timestamp": stamp}, SECRET, now=0)
    n = parse_grafana(body)
    assert n.sender is AlertSender.GRAFANA and n.title == "[FIRING:1] checkout"
    assert n.alerts[0].dashboard_url and n.alerts[0].values == (("A", "2.5"),)


def test_pagerduty_signatures_valid_rotated_and_forged() -> None:
    payload = senders.pagerduty_payload("incident.triggered", incident_id="PGR0VU2", title="Down")
    body, headers = senders.pagerduty_request(payload, SECRET)
    verify_pagerduty(body, headers, SECRET)
    rotated = {"x-pagerduty-signature": "v1=" + "0" * 64 + "," + headers["x-pagerduty-signature"]}
    verify_pagerduty(body, rotated, SECRET)
    for forged in ({}, {"x-pagerduty-signature": "v1=" + "0" * 64}, {"x-pagerduty-signature": ""}):
        with pytest.raises(NotAuthentic):
            verify_pagerduty(body, forged, SECRET)
    with pytest.raises(NotAuthentic):
        verify_pagerduty(body, headers, "another secret")


def test_pagerduty_events_map_to_the_incidents_status_and_labels() -> None:
    for event, status in [
        ("incident.triggered", AlertStatus.FIRING),
        ("incident.acknowledged", AlertStatus.ACKNOWLEDGED),
        ("incident.resolved", AlertStatus.RESOLVED),
    ]:
        payload = senders.pagerduty_payload(event, incident_id="PGR0VU2", title="Checkout down")
        n = parse_pagerduty(json.dumps(payload).encode())
        assert n is not None and n.status is status and n.incident == "PGR0VU2"
        assert dict(n.common_labels) == {
            "service": "checkout",
            "urgency": "high",
            "priority": "P1",
            "title": "Checkout down",
        }
    ping = {"event": {"id": "1", "event_type": "pagey.ping", "data": {}}}
    assert parse_pagerduty(json.dumps(ping).encode()) is None
    with pytest.raises(MalformedRequest, match="id"):
        bad = {"event": {"event_type": "incident.triggered", "data": {"title": "no id"}}}
        parse_pagerduty(json.dumps(bad).encode())


def test_headers_are_read_whatever_their_case_and_an_empty_secret_never_verifies() -> None:
    verify_bearer({"Authorization": f"Bearer {TOKEN}"}, TOKEN)
    payload = senders.pagerduty_payload("incident.resolved", incident_id="PGR0VU2", title="Down")
    body, headers = senders.pagerduty_request(payload, SECRET)
    verify_pagerduty(body, {"X-PagerDuty-Signature": headers["x-pagerduty-signature"]}, SECRET)
    grafana = senders.grafana_payload(
        group_key="{}:{}", alerts=[senders.am_alert("X", fingerprint="g")]
    )
    g_body, g_headers = senders.grafana_request(grafana, TOKEN, SECRET, now=1_800_000_000)
    verify_grafana(g_body, {k.title(): v for k, v in g_headers.items()}, SECRET, now=1_800_000_000)
    with pytest.raises(NotAuthentic):
        verify_bearer({"authorization": "Bearer "}, "")
    _, unsigned = senders.pagerduty_request(payload, "")
    with pytest.raises(NotAuthentic):
        verify_pagerduty(body, unsigned, "")
    with pytest.raises(NotAuthentic):
        verify_grafana(g_body, g_headers, "", now=1_800_000_000)


def test_many_labels_keep_the_first_keys_in_order_and_a_400_names_fields_bounded() -> None:
    many = am()
    many["alerts"][0]["labels"] = {f"k{n:04}": "v" for n in range(1000, 0, -1)}
    kept = parse_alertmanager(json.dumps(many).encode()).alerts[0].labels
    assert [k for k, _ in kept] == [f"k{n:04}" for n in range(1, MAX_LABELS + 1)]
    hostile = am()
    hostile["alerts"][0]["labels"] = {"x" * 10_000: 1}
    with pytest.raises(MalformedRequest) as refused:
        parse_alertmanager(json.dumps(hostile).encode())
    assert "alerts.0.labels" in refused.value.detail and len(refused.value.detail) < 400
    with pytest.raises(MalformedRequest, match="body"):
        parse_pagerduty(b"[]")
    with pytest.raises(MalformedRequest, match="event.data"):
        parse_pagerduty(b'{"event": {"event_type": "incident.triggered", "data": []}}')
