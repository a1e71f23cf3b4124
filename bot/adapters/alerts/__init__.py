"""The alert senders: Alertmanager, Grafana and PagerDuty webhooks verified and read.

Pure: bytes and headers in, an `AlertNotification` out (or a `RequestRejected`). The routes
that call these are `bot.ingress.alert_webhooks`.
"""

from bot.adapters.alerts.pagerduty import parse_pagerduty
from bot.adapters.alerts.payloads import parse_alertmanager, parse_grafana
from bot.adapters.alerts.verify import verify_bearer, verify_grafana, verify_pagerduty

__all__ = [
    "parse_alertmanager",
    "parse_grafana",
    "parse_pagerduty",
    "verify_bearer",
    "verify_grafana",
    "verify_pagerduty",
]
