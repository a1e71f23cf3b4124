"""The sender-neutral alert notification every alert receiver produces and the rest of `bot` reads.

The receivers (`bot.adapters.alerts`: Alertmanager, Grafana, PagerDuty) turn a sender's verified
payload into an `AlertNotification`; routing (`bot.policy.alert_routes`), the incidents' records
and the dispatcher never see a sender's payload. Like `ChatEvent`, it is a frozen pydantic model,
so it travels through Redis as validated JSON.

One notification concerns one incident (`incident`: Alertmanager's and Grafana's `groupKey`,
PagerDuty's incident id) and carries the alerts of that group as the sender last saw them: a
re-notification repeats them, a new alert joining the group adds one, a resolved notification
marks them resolved. What is new in a notification is decided against the incident's record
(fingerprints and start times), never by the receiver.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

__all__ = ["Alert", "AlertNotification", "AlertSender", "AlertStatus"]


class AlertSender(StrEnum):
    """Who sent the notification (the path it arrived on: `POST /alerts/<sender>`)."""

    ALERTMANAGER = "alertmanager"
    GRAFANA = "grafana"
    PAGERDUTY = "pagerduty"


class AlertStatus(StrEnum):
    """An alert's or a whole notification's state."""

    FIRING = "firing"
    RESOLVED = "resolved"
    ACKNOWLEDGED = "acknowledged"
    """PagerDuty only: a responder acknowledged the incident (it still fires)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Alert(_Frozen):
    """One alert of a notification, as the sender reported it (every text bounded)."""

    fingerprint: str
    """The sender's id of the alert (Alertmanager's label-set hash; PagerDuty: the incident)."""
    status: AlertStatus
    starts_at: str = ""
    """When it started firing, as the sender wrote it (RFC 3339). With the fingerprint, what
    makes a firing new: the same alert firing again later has a later start."""
    ends_at: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    generator_url: str = ""
    """Alertmanager `generatorURL` (the expression in Prometheus); PagerDuty's incident page."""
    dashboard_url: str = ""
    panel_url: str = ""
    silence_url: str = ""
    values: tuple[tuple[str, str], ...] = ()
    """Grafana's query values (`values`), as text."""

    def label(self, name: str) -> str:
        """The value of label `name` ("" when absent)."""
        return next((v for k, v in self.labels if k == name), "")

    def annotation(self, name: str) -> str:
        """The value of annotation `name` ("" when absent)."""
        return next((v for k, v in self.annotations if k == name), "")


class AlertNotification(_Frozen):
    """One verified notification from a sender, about one incident."""

    sender: AlertSender
    incident: str
    """Alertmanager's and Grafana's `groupKey`; PagerDuty's incident id."""
    status: AlertStatus
    """The notification's status: `firing` while any alert of the group fires (Alertmanager),
    `resolved` once all have; PagerDuty's event type mapped (`incident.triggered` firing,
    `incident.resolved` resolved, `incident.acknowledged` acknowledged)."""
    alerts: tuple[Alert, ...]
    group_labels: tuple[tuple[str, str], ...] = ()
    common_labels: tuple[tuple[str, str], ...] = ()
    """The labels every alert of the notification shares. For PagerDuty: `service`, `urgency`,
    `priority` and `title` of the incident (what routes match)."""
    common_annotations: tuple[tuple[str, str], ...] = ()
    title: str = ""
    """A one-line title when the sender gives one (Grafana `title`, PagerDuty's incident title)."""
    external_url: str = ""
    """Alertmanager's or Grafana's own address; PagerDuty's incident page."""
    event_id: str = ""
    """The sender's id of this delivery when it has one (PagerDuty's `event.id`)."""
    receiver: str = ""
    """The receiver (Alertmanager, Grafana) the notification was sent to."""

    def common(self, name: str) -> str:
        """The common label `name` ("" when the alerts do not share it)."""
        return next((v for k, v in self.common_labels if k == name), "")
