"""Proving an alert notification comes from its sender, before anything of it is parsed.

- Alertmanager and Grafana: `Authorization: Bearer <CHATOPS_ALERT_TOKEN>` (Alertmanager's
  `http_config.authorization`, Grafana's contact point "Authorization header"), compared in
  constant time. Basic authentication is not accepted: one secret, one scheme.
- Grafana's optional HMAC (grafana/alerting `http/hmac.go`): the hex HMAC-SHA256 of the body
  under the contact point's secret, in `X-Grafana-Alerting-Signature`; when the contact point
  names a timestamp header, the signed text is `<unix seconds>:<body>`. Its name is the
  operator's choice; `X-Grafana-Alerting-Timestamp` is read, and a timestamp more than five
  minutes from our clock is refused.
- PagerDuty v3: `X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the raw body>`, several
  comma-separated while a secret is rotated; any one of them matching passes.

Headers are looked up by name whatever their case (Starlette's `Headers` already are; a plain
mapping is scanned once). An empty token or secret never verifies anything: a misconfiguration
must not turn `Authorization: Bearer ` into a pass.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from bot.errors import NotAuthentic

__all__ = [
    "GRAFANA_SIGNATURE",
    "GRAFANA_TIMESTAMP",
    "verify_bearer",
    "verify_grafana",
    "verify_pagerduty",
]

GRAFANA_SIGNATURE = "x-grafana-alerting-signature"
GRAFANA_TIMESTAMP = "x-grafana-alerting-timestamp"
GRAFANA_WINDOW_S = 300
PAGERDUTY_SIGNATURE = "x-pagerduty-signature"
MAX_SIGNATURES = 8


def _header(headers: Mapping[str, str], name: str) -> str:
    """The value of header `name` (lower case), whatever case the mapping spells it in."""
    value = headers.get(name)
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), "")
    return value


def _require(secret: str, what: str) -> None:
    if not secret:
        raise NotAuthentic(f"no {what} configured")


def verify_bearer(headers: Mapping[str, str], token: str) -> None:
    """Raises: NotAuthentic: No `Authorization: Bearer <token>`, another token, or no token."""
    _require(token, "alert token")
    scheme, _, given = _header(headers, "authorization").strip().partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), token.encode()
    ):
        raise NotAuthentic("no valid bearer token")


def _hex_hmac(secret: str, *parts: bytes) -> str:
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    for part in parts:
        mac.update(part)
    return mac.hexdigest()


def verify_grafana(body: bytes, headers: Mapping[str, str], secret: str, *, now: float) -> None:
    """Raises: NotAuthentic: The signature is missing, wrong, or its timestamp is stale."""
    _require(secret, "grafana secret")
    given = _header(headers, GRAFANA_SIGNATURE).strip().lower()
    if not given:
        raise NotAuthentic(f"no {GRAFANA_SIGNATURE} header")
    stamp = _header(headers, GRAFANA_TIMESTAMP).strip()
    if stamp:
        if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12):
            raise NotAuthentic("grafana timestamp is not unix seconds")
        if abs(now - int(stamp)) > GRAFANA_WINDOW_S:
            raise NotAuthentic("grafana timestamp outside the window")
        expected = _hex_hmac(secret, stamp.encode(), b":", body)
    else:
        expected = _hex_hmac(secret, body)
    if not hmac.compare_digest(given.encode(), expected.encode()):
        raise NotAuthentic("grafana signature mismatch")


def verify_pagerduty(body: bytes, headers: Mapping[str, str], secret: str) -> None:
    """Raises: NotAuthentic: No `v1=` signature of the body under `secret`."""
    _require(secret, "pagerduty secret")
    raw = _header(headers, PAGERDUTY_SIGNATURE)
    expected = "v1=" + _hex_hmac(secret, body)
    given = [s.strip() for s in raw.split(",", MAX_SIGNATURES)[:MAX_SIGNATURES]]
    if not any(hmac.compare_digest(s.encode(), expected.encode()) for s in given if s):
        raise NotAuthentic("no valid pagerduty signature")
