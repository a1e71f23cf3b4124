"""Alertmanager's and Grafana's webhook payloads, read into an `AlertNotification`.

Alertmanager's is its version 4 payload (prometheus/alertmanager `notify/webhook`: the
`template.Data` of the group plus `version`, `groupKey`, `truncatedAlerts`); Grafana's webhook
contact point sends the same shape with `orgId`, `title`, `state`, `message`, and per alert
`silenceURL`, `dashboardURL`, `panelURL` and `values` (grafana/alerting `receivers/webhook`).
Fields the senders add later are ignored; a field of the wrong type is a 400 naming it. Every
text is bounded (`bounded.py`), and parsing is linear in the body.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.adapters.alerts.bounded import MAX_ALERTS, cut, invalid_fields, pairs
from bot.adapters.untrusted_json import loads
from bot.alerts import Alert, AlertNotification, AlertSender, AlertStatus
from bot.errors import MalformedRequest

__all__ = ["parse_alertmanager", "parse_grafana"]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Alert(_Loose):
    status: str = "firing"
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    startsAt: str = ""
    endsAt: str = ""
    generatorURL: str = ""
    fingerprint: str = ""
    silenceURL: str = ""
    dashboardURL: str = ""
    panelURL: str = ""
    values: dict[str, float | int | str | None] | None = None


class _Payload(_Loose):
    version: str
    groupKey: str
    status: str = "firing"
    receiver: str = ""
    alerts: list[_Alert]
    groupLabels: dict[str, str] = {}
    commonLabels: dict[str, str] = {}
    commonAnnotations: dict[str, str] = {}
    externalURL: str = ""
    title: str = ""


def _status(value: str) -> AlertStatus:
    return AlertStatus.RESOLVED if value.strip().lower() == "resolved" else AlertStatus.FIRING


def _fingerprint(alert: _Alert) -> str:
    if alert.fingerprint:
        return cut(alert.fingerprint, 128)
    labels = "\x1f".join(f"{k}={v}" for k, v in sorted(alert.labels.items()))
    return hashlib.sha256(labels.encode()).hexdigest()[:16]


def _alert(alert: _Alert) -> Alert:
    return Alert(
        fingerprint=_fingerprint(alert),
        status=_status(alert.status),
        starts_at=cut(alert.startsAt, 64),
        ends_at=cut(alert.endsAt, 64),
        labels=pairs(alert.labels),
        annotations=pairs(alert.annotations),
        generator_url=cut(alert.generatorURL),
        dashboard_url=cut(alert.dashboardURL),
        panel_url=cut(alert.panelURL),
        silence_url=cut(alert.silenceURL),
        values=pairs({k: "" if v is None else str(v) for k, v in (alert.values or {}).items()}),
    )


def _read(body: bytes, sender: AlertSender) -> _Payload:
    raw: Any = loads(body)
    if not isinstance(raw, dict):
        raise MalformedRequest("the body is not a JSON object")
    alerts = raw.get("alerts")
    if isinstance(alerts, list) and len(alerts) > MAX_ALERTS:
        raw = {**raw, "alerts": alerts[:MAX_ALERTS]}  # what Alertmanager's max_alerts would keep
    try:
        payload = _Payload.model_validate(raw)
    except ValidationError as exc:
        fields = invalid_fields(exc)
        raise MalformedRequest(f"{sender} payload: invalid or missing {fields}") from None
    if sender is AlertSender.ALERTMANAGER and payload.version != "4":
        raise MalformedRequest("alertmanager payload: version must be 4")
    if not payload.groupKey:
        raise MalformedRequest(f"{sender} payload: empty groupKey")
    return payload


def _notification(payload: _Payload, sender: AlertSender) -> AlertNotification:
    return AlertNotification(
        sender=sender,
        incident=cut(payload.groupKey, 1024),
        status=_status(payload.status),
        alerts=tuple(_alert(a) for a in payload.alerts),
        group_labels=pairs(payload.groupLabels),
        common_labels=pairs(payload.commonLabels),
        common_annotations=pairs(payload.commonAnnotations),
        title=cut(payload.title, 500),
        external_url=cut(payload.externalURL),
        receiver=cut(payload.receiver, 256),
    )


def parse_alertmanager(body: bytes) -> AlertNotification:
    """Raises: MalformedRequest: Not Alertmanager's version 4 payload."""
    return _notification(_read(body, AlertSender.ALERTMANAGER), AlertSender.ALERTMANAGER)


def parse_grafana(body: bytes) -> AlertNotification:
    """Raises: MalformedRequest: Not Grafana's webhook payload."""
    return _notification(_read(body, AlertSender.GRAFANA), AlertSender.GRAFANA)
