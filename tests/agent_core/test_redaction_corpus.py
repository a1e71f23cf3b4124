"""Redaction measured against a corpus: secret shapes from the field's rule sets, and SRE output.

Why this way: the rules in `agent_core._redaction` are derived from the families of gitleaks
(`config/gitleaks.toml`) and detect-secrets (`detect_secrets/plugins/`); a corpus of realistic
lines, as tools print them, measures them from both sides at once. `secrets.txt` holds the
secret shapes (at least 80, each with its secret parts marked), `ordinary/` whole outputs that
must come back byte for byte. The random parts of the secrets are generated from a fixed seed,
so the data files hold no token a scanner would flag and every run sees the same texts.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent_core._redaction import redact
from tests.paths import TESTS

DATA = TESTS / "data" / "redaction"
_CLASSES = {
    "A": string.ascii_letters + string.digits,
    "H": "0123456789ABCDEF",
    "h": "0123456789abcdef",
    "B": string.ascii_letters + string.digits + "+/",
    "D": string.digits,
    "L": string.ascii_lowercase,
    "U": string.ascii_uppercase + string.digits,
    "W": string.ascii_letters + string.digits + "_-",
}


@dataclass(frozen=True)
class Shape:
    name: str
    text: str
    secrets: tuple[str, ...]


def _fill(template: str, rng: random.Random) -> str:
    out, rest = [], template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        spec, close, after = tail.partition("}")
        cls, colon, count = spec.partition(":")
        if not (close and colon and cls in _CLASSES and count.isdigit()):
            out.append(head + "{")
            rest = tail
            continue
        out.append(head + "".join(rng.choice(_CLASSES[cls]) for _ in range(int(count))))
        rest = after
    return "".join(out) + rest


def _shape(name: str, body: str, rng: random.Random) -> Shape:
    text, secrets, rest = [], [], _fill(body, rng)
    while "⟦" in rest:
        head, _, tail = rest.partition("⟦")
        secret, _, rest = tail.partition("⟧")
        text.append(head + secret)
        secrets.append(secret)
    return Shape(name, "".join(text) + rest, tuple(secrets))


def _load_shapes() -> list[Shape]:
    rng = random.Random(15)
    shapes: list[Shape] = []
    name, body = "", list[str]()
    for line in (DATA / "secrets.txt").read_text().splitlines():
        if line.startswith("#") and not name:
            continue
        if line.startswith("=== "):
            if name:
                shapes.append(_shape(name, "\n".join(body), rng))
            name, body = line[4:], []
        else:
            body.append(line)
    shapes.append(_shape(name, "\n".join(body), rng))
    return shapes


SHAPES = _load_shapes()
ORDINARY = sorted((DATA / "ordinary").iterdir())


def test_the_corpus_has_at_least_80_distinct_secret_shapes() -> None:
    """X5: the corpus is as wide as the issue asks, and every shape names its secrets."""
    assert len({s.name for s in SHAPES}) == len(SHAPES) >= 80
    assert all(s.secrets and all(s.secrets) for s in SHAPES)


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_no_secret_shape_leaks(shape: Shape) -> None:
    """X5: each secret part is gone and a marker stands in the text."""
    redacted = redact(shape.text)
    leaked = [secret for secret in shape.secrets if secret in redacted]
    assert not leaked, redacted
    assert "[REDACTED:" in redacted


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_redacting_a_shape_twice_changes_nothing(shape: Shape) -> None:
    """X5: redaction is idempotent on every shape."""
    once = redact(shape.text)
    assert redact(once) == once


@pytest.mark.parametrize("path", ORDINARY, ids=[p.name for p in ORDINARY])
def test_ordinary_sre_output_comes_out_unchanged(path: Path) -> None:
    """X6: kubectl tables, logs, PromQL answers, HTML pages and host tools are not touched."""
    text = path.read_text()
    assert redact(text) == text


def test_names_stay_and_only_values_go() -> None:
    """X5: the field name survives, so the reader still knows what was there."""
    assert redact("DB_PASSWORD=hunter2") == "DB_PASSWORD=[REDACTED:credential]"
    assert redact("redis://:pw123456@redis:6379/0") == (
        "redis://:[REDACTED:url_credentials]@redis:6379/0"
    )
    assert redact("- name: DB_PASSWORD\n  value: hunter2") == (
        "- name: DB_PASSWORD\n  value: [REDACTED:kubernetes_env]"
    )
    assert redact("Cookie: sid=abc; theme=dark").startswith("Cookie: sid=[REDACTED:cookie]; theme=")


def _rule_by_rule(text: str) -> str:
    from agent_core._redaction._rules import RULES

    for rule in RULES:
        text = rule.apply(text)
    return text


def test_the_union_of_the_rules_skips_only_texts_no_rule_would_change() -> None:
    """`redact` searches the union of the rules first, yet answers as the rules one by one.

    Checked on each secret shape, each ordinary output, and each shape cut at every eighth of
    its length (a secret's prefix alone must give the same answer both ways).
    """
    texts = [s.text for s in SHAPES] + [p.read_text() for p in ORDINARY]
    texts += [t[: len(t) * k // 8] for t in [s.text for s in SHAPES] for k in range(1, 8)]
    for text in texts:
        assert redact(text) == _rule_by_rule(text), text[:80]
