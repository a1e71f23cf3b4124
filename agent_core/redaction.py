"""Redacting secrets from text before the model or a chat sees it (RELIABILITY A7).

Contract: `redact(text)` replaces every secret a rule below recognises with `[REDACTED:<kind>]`
and leaves everything else as it was; it is idempotent (`redact(redact(t)) == redact(t)`). Where
a secret is the value of a named field (`password=…`, `Authorization: Bearer …`, a URL's
`user:pass@`), the name stays and only the value goes, so the model still knows what was there.

The rules favour precision on shapes that are not secrets and that tool output is full of: hex
ids (commit SHAs, request ids), UUIDs and plain URLs are never touched. Shapes come from each
issuer's documented token formats (Slack `xox?-`, AWS `AKIA`, GitHub `ghp_`/`github_pat_`,
OpenAI `sk-`); a PEM private key block with no END line (the output was cut) is redacted to the
end of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MARKER", "redact"]

MARKER = "[REDACTED:{kind}]"
"""What replaces a secret; `kind` names the rule that found it."""

_NOT_REDACTED = r"(?!\[REDACTED:)"
"""A value that is already a marker is left alone (idempotence)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    """Matches a secret; when it has a `value` group, only that group is replaced."""

    def apply(self, text: str) -> str:
        return self.pattern.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        marker = MARKER.format(kind=self.kind)
        if "value" not in self.pattern.groupindex:
            return marker
        start, end = match.span("value")
        whole = match.group(0)
        offset = match.start(0)
        return whole[: start - offset] + marker + whole[end - offset :]


def _rule(kind: str, pattern: str, flags: int = 0) -> _Rule:
    return _Rule(kind, re.compile(pattern, flags))


_RULES: tuple[_Rule, ...] = (
    # Multi-line first, so no single-line rule sees half a key.
    _rule(
        "private_key",
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----"
        r"[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
    ),
    _rule(
        "authorization",
        rf"\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic|token)\s+)?+"
        rf"{_NOT_REDACTED}(?P<value>[^\s\"',;]+)",
        re.IGNORECASE,
    ),
    _rule("authorization", rf"\bbearer\s+{_NOT_REDACTED}(?P<value>[A-Za-z0-9._~+/=-]{{16,}})"),
    _rule(
        "url_credentials", rf"\b[a-z][a-z0-9+.-]*://[^\s/@:]+:{_NOT_REDACTED}(?P<value>[^\s/@]+)@"
    ),
    _rule("slack_token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    _rule("slack_token", r"\bxapp-[0-9]+-[A-Za-z0-9-]{10,}"),
    _rule("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    _rule(
        "aws_secret_key",
        rf"\baws_secret_access_key[\"']?\s*[:=]\s*[\"']?{_NOT_REDACTED}(?P<value>[A-Za-z0-9/+=]{{20,}})",
        re.IGNORECASE,
    ),
    _rule("github_token", r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
    _rule("github_token", r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    _rule("openai_key", r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}"),
    _rule("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    _rule(
        "kubeconfig",
        rf"(?m)^\s*-?\s*(?:client-key-data|token|id-token|refresh-token)\s*:\s*[\"']?"
        rf"{_NOT_REDACTED}(?P<value>[^\s\"']{{8,}})",
    ),
    _rule(
        "credential",
        r"\b(?:password|passwd|pwd|secret|client_secret|api[_-]?key|access[_-]?token"
        rf"|auth[_-]?token)[\"']?\s*[:=]\s*[\"']?{_NOT_REDACTED}(?P<value>[^\s\"'&,;}}]+)",
        re.IGNORECASE,
    ),
)


def redact(text: str) -> str:
    """Replace every recognised secret in `text` with `[REDACTED:<kind>]`."""
    for rule in _RULES:
        text = rule.apply(text)
    return text
