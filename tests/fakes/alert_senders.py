"""Requests exactly as the alert senders write them: Alertmanager, Grafana, PagerDuty.

- Alertmanager (prometheus/alertmanager `notify/webhook`): version 4 JSON, the group's
  `template.Data` (`receiver`, `status`, `alerts[]` with `status`, `labels`, `annotations`,
  `startsAt`, `endsAt` (`0001-01-01T00:00:00Z` while firing), `generatorURL`, `fingerprint`;
  `groupLabels`, `commonLabels` and `commonAnnotations` the labels every alert shares,
  `externalURL`), then `version`, `groupKey`, `truncatedAlerts`; `Authorization: Bearer` from
  `http_config.authorization`.
- Grafana (grafana/alerting `receivers/webhook`): the same with `orgId`, `title`, `state`,
  `message`, and per alert `silenceURL`, `dashboardURL`, `panelURL`, `values`, `valueString`;
  the optional HMAC (`http/hmac.go`): hex HMAC-SHA256 of the body (or `<ts>:<body>` with the
  timestamp header) in `X-Grafana-Alerting-Signature`.
- PagerDuty v3 webhooks: `{"event": {...}}` with the incident as `data`, signed
  `X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the body>`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

__all__ = [
    "alertmanager_payload",
    "alertmanager_request",
    "am_alert",
    "grafana_payload",
    "grafana_request",
    "pagerduty_payload",
    "pagerduty_request",
]

NOT_ENDED = "0001-01-01T00:00:00Z"


def am_alert(
    name: str,
    *,
    fingerprint: str,
    starts_at: str = "2026-12-02T10:00:00Z",
    status: str = "firing",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One alert of an Alertmanager notification."""
    return {
        "status": status,
        "labels": {"alertname": name, **(labels or {})},
        "annotations": annotations or {"summary": f"{name} is firing"},
        "startsAt": starts_at,
        "endsAt": NOT_ENDED if status == "firing" else "2026-12-02T10:30:00Z",
        "generatorURL": f"http://prometheus.example:9090/graph?g0.expr=ALERTS%7Balertname%3D%22{name}%22%7D",
        "fingerprint": fingerprint,
    }


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def alertmanager_payload(
    *,
    group_key: str,
    alerts: list[dict[str, Any]],
    status: str = "firing",
    common_labels: dict[str, str] | None = None,
    receiver: str = "chatops",
    external_url: str = "http://alertmanager.example:9093",
) -> dict[str, Any]:
    """A version 4 notification of one group (common labels computed as Alertmanager does)."""
    common = common_labels if common_labels is not None else _common([a["labels"] for a in alerts])
    return {
        "receiver": receiver,
        "status": status,
        "alerts": alerts,
        "groupLabels": {k: v for k, v in common.items() if k == "alertname"},
        "commonLabels": common,
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": external_url,
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
    }


def grafana_payload(
    *, group_key: str, alerts: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    """Grafana's webhook notification: Alertmanager's shape and Grafana's own fields."""
    body = alertmanager_payload(group_key=group_key, alerts=alerts, **extra)
    body["version"] = "1"
    for alert in alerts:
        alert.setdefault("silenceURL", "http://grafana.example:3000/alerting/silence/new")
        alert.setdefault("dashboardURL", "http://grafana.example:3000/d/checkout")
        alert.setdefault("panelURL", "http://grafana.example:3000/d/checkout?viewPanel=2")
        alert.setdefault("values", {"A": 2.5})
        alert.setdefault("valueString", "[ var='A' labels={} value=2.5 ]")
    body.update(orgId=1, title="[FIRING:1] checkout", state="alerting", message="checkout")
    return body


def alertmanager_request(payload: dict[str, Any], token: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    return body, {
        "content-type": "application/json",
        "user-agent": "Alertmanager/0.28.1",
        "authorization": f"Bearer {token}",
    }


def grafana_request(
    payload: dict[str, Any], token: str, secret: str | None = None, now: float | None = None
) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    headers = {
        "content-type": "application/json",
        "user-agent": "Grafana",
        "authorization": f"Bearer {token}",
    }
    if secret is not None:
        mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
        if now is not None:
            stamp = str(int(now))
            headers["x-grafana-alerting-timestamp"] = stamp
            mac.update(f"{stamp}:".encode())
        mac.update(body)
        headers["x-grafana-alerting-signature"] = mac.hexdigest()
    return body, headers


def pagerduty_payload(
    event_type: str,
    *,
    incident_id: str,
    title: str,
    service: str = "checkout",
    urgency: str = "high",
    priority: str | None = "P1",
) -> dict[str, Any]:
    """A v3 webhook event about one incident."""
    status = event_type.removeprefix("incident.")
    return {
        "event": {
            "id": f"01D{incident_id}{status[:4].upper()}",
            "event_type": event_type,
            "resource_type": "incident",
            "occurred_at": "2026-12-02T10:00:05.000Z",
            "agent": {
                "html_url": "https://acme.pagerduty.com/users/PLH1HKV",
                "id": "PLH1HKV",
                "self": "https://api.pagerduty.com/users/PLH1HKV",
                "summary": "Tenex Engineer",
                "type": "user_reference",
            },
            "client": None,
            "data": {
                "id": incident_id,
                "type": "incident",
                "self": f"https://api.pagerduty.com/incidents/{incident_id}",
                "html_url": f"https://acme.pagerduty.com/incidents/{incident_id}",
                "number": 2,
                "status": status,
                "incident_key": "d3640fbd41094207a1c11e58e46b1662",
                "created_at": "2026-12-02T10:00:00Z",
                "title": title,
                "service": {
                    "html_url": "https://acme.pagerduty.com/services/PF9KMXH",
                    "id": "PF9KMXH",
                    "self": "https://api.pagerduty.com/services/PF9KMXH",
                    "summary": service,
                    "type": "service_reference",
                },
                "assignees": [],
                "escalation_policy": {
                    "id": "PUS0KTE",
                    "summary": "Default",
                    "type": "escalation_policy_reference",
                },
                "teams": [],
                "priority": None
                if priority is None
                else {"id": "PSO75BM", "summary": priority, "type": "priority_reference"},
                "urgency": urgency,
                "conference_bridge": None,
                "resolve_reason": None,
            },
        }
    }


def pagerduty_request(payload: dict[str, Any], secret: str) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return body, {
        "content-type": "application/json; charset=utf-8",
        "user-agent": "PagerDuty-Webhook/V3.0",
        "x-pagerduty-signature": f"v1={signature}",
        "x-webhook-id": "de2b2c5a-0e60-4a13-8c55-0d3d4b2e1f4a",
        "x-webhook-subscription": "PY1OQ0G",
    }
