r"""Redacting secrets from text before the model, the audit trail, a card or a log sees it.

Contract (docs/reliability.md X1, X5, X6): `redact(text)` replaces every secret a rule
recognises with `[REDACTED:<kind>]` and leaves everything else as it was; it is idempotent
(`redact(redact(t)) == redact(t)`) and runs in time linear in `len(text)` whatever the text.
Where a secret is the value of a named field (`DB_PASSWORD=…`, `Authorization: Bearer …`, a
URL's `user:pass@`, a Kubernetes env `value:` or Secret `data:`), the name stays and only the
value goes, so the model still knows what was there. Ordinary SRE output (hex ids, UUIDs, plain
URLs, kubectl tables, PromQL answers) comes back unchanged;
`tests/agent_core/test_redaction_corpus.py` measures both sides against the secret-scanning
projects' rule families.

Why RE2 (`google-re2`) and not `re`: Python's `re` backtracks, and the shapes of secrets
(`\s*` around a separator, an optional quote, a lazy block body) are exactly where that goes
super-linear: the rules this package replaced took 34 s on 2,000 newlines (cubic). Possessive
quantifiers and atomic groups (3.11) can make each pattern linear by construction, but only
pattern by pattern, by review, for every rule anyone adds later; RE2 makes it a property of the
engine, and refuses at import a pattern it cannot run in linear time. It is also faster: the old
rule set rewritten possessively in `re` scrubbed 1 MB in 300-750 ms, the same rules in RE2 in
33-45 ms (`/tmp` comparison script, reported with issue 15; `bench/hygiene.py` measures this
package). RE2's missing look-around is replaced by checks in the replacement function
(`_engine.is_placeholder`).

Why not a maintained detector: detect-secrets reports a secret's value and line number, not its
span, scans line by line, and its keyword plugin runs backtracking `re` patterns with
back-references (`detect_secrets/plugins/keyword.py`); gitleaks is a Go binary. Their rule
families are the source of the rules here instead (`_rules.py`, `_names.py`).
"""

from __future__ import annotations

from agent_core._redaction._engine import MARKER, compile_any
from agent_core._redaction._rules import RULES

__all__ = ["MARKER", "redact"]

_ANY_RULE = compile_any(rule.pattern.pattern for rule in RULES)
"""Found in a text exactly when some rule's pattern is: most texts hold no secret, and one
search of the union costs what one rule does, not 84 (bench/hygiene.py)."""


def redact(text: str) -> str:
    """Replace every recognised secret in `text` with `[REDACTED:<kind>]`.

    A text in which no rule's pattern is found is returned as it is, after one search: no
    rule could change it (a rule only rewrites its own matches), so that is what the rules
    one by one would return.
    """
    if _ANY_RULE.search(text) is None:
        return text
    for rule in RULES:
        text = rule.apply(text)
    return text
