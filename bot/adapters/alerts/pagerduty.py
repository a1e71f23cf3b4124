"""PagerDuty v3 webhooks (`incident.triggered`, `.acknowledged`, `.resolved`) as a notification.

The payload is `{"event": {"id", "event_type", "resource_type", "occurred_at", "data": <the
incident>}}` (PagerDuty's V3 webhook docs); the incident is the group (`incident` = its id), and
its one alert carries its id as fingerprint and its `created_at` as start. What routes match,
`service`, `urgency`, `priority` and `title`, are its common labels. Other event types (the
subscription's `pagey.ping`, notes, reassignments) are acknowledged and ignored (None).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.adapters.alerts.bounded import cut, invalid_fields, pairs
from bot.adapters.untrusted_json import loads
from bot.alerts import Alert, AlertNotification, AlertSender, AlertStatus
from bot.errors import MalformedRequest

__all__ = ["parse_pagerduty"]

_STATUS = {
    "incident.triggered": AlertStatus.FIRING,
    "incident.acknowledged": AlertStatus.ACKNOWLEDGED,
    "incident.resolved": AlertStatus.RESOLVED,
}


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore")


class _Reference(_Loose):
    summary: str = ""


class _Incident(_Loose):
    id: str
    title: str = ""
    html_url: str = ""
    created_at: str = ""
    urgency: str = ""
    service: _Reference | None = None
    priority: _Reference | None = None


class _Event(_Loose):
    id: str = ""
    event_type: str
    data: dict[str, Any] = {}


class _Payload(_Loose):
    event: _Event


def parse_pagerduty(body: bytes) -> AlertNotification | None:
    """The notification of an incident event; None for an event type nothing is done with.

    Raises:
        MalformedRequest: Not a PagerDuty v3 webhook payload.
    """
    raw: Any = loads(body)
    try:
        event = _Payload.model_validate(raw).event
    except ValidationError as exc:
        fields = invalid_fields(exc)
        raise MalformedRequest(f"pagerduty payload: invalid or missing {fields}") from None
    status = _STATUS.get(event.event_type)
    if status is None:
        return None
    try:
        incident = _Incident.model_validate(event.data)
    except ValidationError as exc:
        fields = invalid_fields(exc)
        raise MalformedRequest(f"pagerduty incident: invalid or missing {fields}") from None
    if not incident.id:
        raise MalformedRequest("pagerduty incident: empty event.data.id")
    labels = pairs(
        {
            "service": incident.service.summary if incident.service else "",
            "urgency": incident.urgency,
            "priority": incident.priority.summary if incident.priority else "",
            "title": incident.title,
        }
    )
    alert = Alert(
        fingerprint=cut(incident.id, 128),
        status=status,
        starts_at=cut(incident.created_at, 64),
        labels=labels,
        generator_url=cut(incident.html_url),
    )
    return AlertNotification(
        sender=AlertSender.PAGERDUTY,
        incident=cut(incident.id, 128),
        status=status,
        alerts=(alert,),
        common_labels=labels,
        title=cut(incident.title, 500),
        external_url=cut(incident.html_url),
        event_id=cut(event.id, 128),
    )
