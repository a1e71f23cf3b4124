"""What an incident's messages say: its root message, the notices in its thread, the model's task.

Pure, but for the quoting (`aquote_untrusted`, in a thread for a large text). Everything an alert
carries (names, labels, annotations, URLs) was written by alert rules and the systems they watch:
the messages people read are rendered by `cards` (escaped, mentions defused, links http(s) only),
and what the model reads of an alert is quoted as untrusted data (`QuoteKind.ALERT`); the task's
own sentences contain no text of the alert's.
"""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import quote

from agent_core import QuoteKind, aquote_untrusted
from bot.alerts import Alert, AlertNotification, AlertSender, AlertStatus
from bot.events import AlertMode, AlertOrigin
from bot.policy.alert_routes import AlertRoute
from cards import Notice

__all__ = [
    "alert_name",
    "alert_ids",
    "held_notice",
    "joined_notice",
    "notice_text",
    "origin_of",
    "resolved_notice",
    "root_notice",
    "severity",
    "task_text",
]

MAX_FIELDS = 8
"""Key labels a root message shows."""
MAX_LISTED = 10
"""Alerts a message lists by name; the rest are counted."""
_SKIPPED_LABELS = frozenset({"alertname", "severity"})
_SUMMARY_ANNOTATIONS = ("summary", "description", "message")


def alert_name(n: AlertNotification) -> str:
    """The incident's name: the alerts' shared `alertname`, else the first's, else the title."""
    if name := n.common("alertname"):
        return name
    if n.alerts and (name := n.alerts[0].label("alertname")):
        return name
    return n.title or "alert"


def severity(n: AlertNotification) -> str:
    """The shared `severity` label; PagerDuty: the priority, else the urgency."""
    if n.sender is AlertSender.PAGERDUTY:
        return n.common("priority") or n.common("urgency")
    return n.common("severity") or (n.alerts[0].label("severity") if n.alerts else "")


def alert_ids(alerts: tuple[Alert, ...] | list[Alert], status: AlertStatus) -> list[str]:
    """`fingerprint|startsAt` of the alerts in `status` (`|status` added unless firing)."""
    tail = "" if status is AlertStatus.FIRING else f"|{status}"
    return [f"{a.fingerprint}|{a.starts_at}{tail}" for a in alerts if a.status is status]


def _key_labels(n: AlertNotification) -> tuple[tuple[str, str], ...]:
    labels = n.common_labels or (n.alerts[0].labels if n.alerts else ())
    return tuple((k, v) for k, v in labels if k not in _SKIPPED_LABELS)[:MAX_FIELDS]


def _summary(n: AlertNotification, alert: Alert | None = None) -> str:
    for name in _SUMMARY_ANNOTATIONS:
        found = alert.annotation(name) if alert else ""
        found = found or next((v for k, v in n.common_annotations if k == name), "")
        if not found and n.alerts:
            found = n.alerts[0].annotation(name)
        if found:
            return found
    return n.title


def _silence_url(n: AlertNotification) -> str:
    """Grafana's own silence link; Alertmanager's new-silence page filtered on the group."""
    if n.alerts and n.alerts[0].silence_url:
        return n.alerts[0].silence_url
    if n.sender is not AlertSender.ALERTMANAGER or not n.external_url or not n.group_labels:
        return ""
    matchers = ",".join(f'{k}="{v}"' for k, v in n.group_labels)
    return f"{n.external_url.rstrip('/')}/#/silences/new?filter={quote('{' + matchers + '}')}"


def _links(n: AlertNotification) -> tuple[tuple[str, str], ...]:
    first = n.alerts[0] if n.alerts else None
    pagerduty = n.sender is AlertSender.PAGERDUTY
    found = [
        ("PagerDuty incident" if pagerduty else "Source", first.generator_url if first else ""),
        ("Dashboard", first.dashboard_url if first else ""),
        ("Panel", first.panel_url if first else ""),
        ("Silence", _silence_url(n)),
        ("Runbook", (first.annotation("runbook_url") if first else "") or _common_runbook(n)),
    ]
    return tuple((label, url) for label, url in found if url)


def _common_runbook(n: AlertNotification) -> str:
    return next((v for k, v in n.common_annotations if k == "runbook_url"), "")


def root_notice(n: AlertNotification, route: AlertRoute) -> Notice:
    """The incident's root message: title, severity, summary, key labels, links."""
    firing = [a for a in n.alerts if a.status is AlertStatus.FIRING]
    lines = [_summary(n)] if _summary(n) else []
    if len(firing) > 1:
        lines.append(f"{len(firing)} alerts firing")
    if route.mode is not AlertMode.NOTIFY:
        lines.append("An analysis starts in this thread: reply to redirect it, or stop it.")
    return Notice(
        title=f"Firing: {alert_name(n)}",
        severity=severity(n),
        lines=tuple(lines),
        fields=_key_labels(n),
        links=_links(n),
    )


def _listed(alerts: list[Alert]) -> tuple[str, ...]:
    lines = []
    for a in alerts[:MAX_LISTED]:
        labels = ", ".join(f"{k}={v}" for k, v in a.labels if k != "alertname")
        lines.append(f"{a.label('alertname') or 'alert'} {{{labels}}} since {a.starts_at}")
    if len(alerts) > MAX_LISTED:
        lines.append(f"and {len(alerts) - MAX_LISTED} more")
    return tuple(lines)


def joined_notice(n: AlertNotification, joined: list[Alert]) -> Notice:
    """Posted in the thread when alerts join the incident."""
    return Notice(
        title=f"{len(joined)} more alert{'s' if len(joined) > 1 else ''} in this incident",
        severity=severity(n),
        lines=_listed(joined),
        links=_links(n),
    )


def resolved_notice(n: AlertNotification, when: float) -> Notice:
    """Posted in the thread once the sender says the incident resolved."""
    return Notice(title=f"Resolved at {_time(when)}: {alert_name(n)}", lines=(), links=_links(n))


def acknowledged_notice(n: AlertNotification, when: float) -> Notice:
    """Posted in the thread when PagerDuty says a responder acknowledged the incident."""
    return Notice(title=f"Acknowledged at {_time(when)} in PagerDuty: {alert_name(n)}")


def held_notice(route: AlertRoute, limit: int, n: AlertNotification) -> Notice:
    """Posted once an hour in a route's channel when its limit holds incidents back."""
    return Notice(
        title=f"Alert route '{route.name}': new incidents held back ({limit} in the last hour)",
        lines=(
            f"New incidents on this route are held back (CHATOPS_ALERT_MAX_PER_HOUR={limit}): "
            "no message and no analysis for them while the route is at its limit; an "
            "Alertmanager or Grafana group the senders notify again later opens then (a "
            "PagerDuty incident is not notified again).",
            f"First held back: {alert_name(n)}",
        ),
    )


def _time(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _alert_block(n: AlertNotification, alerts: list[Alert]) -> str:
    """The alerts as the model reads them (inside the untrusted quote)."""
    lines = [f"sender: {n.sender}", f"name: {alert_name(n)}", f"status: {n.status}"]
    if n.title:
        lines.append(f"title: {n.title}")
    lines += [f"label {k}: {v}" for k, v in n.common_labels]
    lines += [f"annotation {k}: {v}" for k, v in n.common_annotations]
    for a in alerts[:MAX_LISTED]:
        lines.append(f"- alert {a.fingerprint} {a.status} since {a.starts_at}")
        lines += [f"  label {k}: {v}" for k, v in a.labels]
        lines += [f"  annotation {k}: {v}" for k, v in a.annotations]
        lines += [f"  value {k}: {v}" for k, v in a.values]
        lines += [f"  {label}: {url}" for label, url in _links_of(a)]
    if len(alerts) > MAX_LISTED:
        lines.append(f"- and {len(alerts) - MAX_LISTED} more alerts")
    return "\n".join(lines)


def _links_of(a: Alert) -> list[tuple[str, str]]:
    found = [("source", a.generator_url), ("dashboard", a.dashboard_url), ("panel", a.panel_url)]
    return [(label, url) for label, url in found if url]


async def task_text(
    n: AlertNotification, route: AlertRoute, *, past: int, days: int, steps: int | None
) -> str:
    """The task of the analysis an alert starts (its details quoted as untrusted data)."""
    firing = [a for a in n.alerts if a.status is AlertStatus.FIRING]
    short = route.mode is AlertMode.TRIAGE
    ask = (
        f"Triage it in at most {steps} steps: how bad it is, what is affected, the most likely "
        "cause, and who should look next."
        if short
        else "Investigate it: what is failing and since when, what it affects, the likely cause "
        "with the evidence for it, and what to do next."
    )
    memory = (
        f"{past} earlier analys{'is' if past == 1 else 'es'} of this alert from the last {days} "
        "days are on record: read them with the past_analyses tool (the alert's name as the "
        "query) before concluding, and say what is the same and what differs this time."
        if past
        else f"No earlier analysis of this alert is on record from the last {days} days."
    )
    quoted = await aquote_untrusted(f"{n.sender}", _alert_block(n, firing), kind=QuoteKind.ALERT)
    return (
        f"An alert from {n.sender} opened this incident; it is quoted below. {ask}\n{memory}\n\n"
        f"{quoted}"
    )


async def notice_text(n: AlertNotification, what: str, alerts: list[Alert]) -> str:
    """What a running analysis reads of a later notification (alerts joining, resolved)."""
    quoted = await aquote_untrusted(f"{n.sender}", _alert_block(n, alerts), kind=QuoteKind.ALERT)
    return (
        f"Notice from {n.sender} about this incident: {what}. Take it into account; the task "
        f"stands.\n\n{quoted}"
    )


def origin_of(
    n: AlertNotification, route: AlertRoute, *, root_link: str, fingerprints: list[str]
) -> AlertOrigin:
    """The incident as its analysis's events carry it (the card names it)."""
    return AlertOrigin(
        sender=str(n.sender),
        incident=n.incident[:500],
        alert_name=alert_name(n)[:200],
        route=route.name,
        mode=route.mode,
        severity=severity(n)[:100],
        labels=tuple((k[:100], v[:200]) for k, v in _key_labels(n)),
        fingerprints=tuple(f[:100] for f in fingerprints[:50]),
        root_link=root_link,
    )
