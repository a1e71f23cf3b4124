"""Secrets redaction (A7): a table of texts with secrets and of look-alikes without.

Why this way: `redact` is a pure function over text, so a table states its contract best: each
positive row names the secret that must vanish and the kind its marker must carry; each negative
row is a shape tool output is full of (hex ids, UUIDs, plain URLs) that must come back unchanged.
Fixture secrets are built from pieces so that no scanner mistakes this file for a leak.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core._redaction import redact

_B64 = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9w"
SLACK_BOT = "xoxb-" + "1234567890-0987654321-" + "AbCdEfGhIjKlMnOpQrStUvWx"
SLACK_APP = "xapp-" + "1-A0123456789-1234567890123-" + "abcdef0123456789"
AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
GITHUB_PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
OPENAI = "sk-" + "proj-" + "Abc123Def456Ghi789Jkl012Mno345"
JWT = "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".dozjgNryP4J3jVmNHl0w5N_XgL0n"
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + _B64 + "\n" + _B64 + "\n-----END RSA PRIVATE KEY-----"

POSITIVE: list[tuple[str, str, str]] = [
    # (text, secret that must vanish, kind of its marker)
    (f"token={SLACK_BOT} in env", SLACK_BOT, "slack_token"),
    (f"SLACK_APP_TOKEN {SLACK_APP}", SLACK_APP, "slack_token"),
    (f"using key {AWS_KEY} for s3", AWS_KEY, "aws_access_key"),
    (f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET, "aws_secret_key"),
    (f'"aws_secret_access_key": "{AWS_SECRET}"', AWS_SECRET, "aws_secret_key"),
    (f"git clone with {GITHUB}", GITHUB, "github_token"),
    (f"GH={GITHUB_PAT}", GITHUB_PAT, "github_token"),
    (f"OPENAI_API_KEY {OPENAI}", OPENAI, "openai_key"),
    (f"session cookie {JWT}; path=/", JWT, "jwt"),
    (f"config:\n{PEM}\nrest", _B64, "private_key"),
    (f"cut short:\n{PEM[:80]}", _B64[:20], "private_key"),
    ("Authorization: Bearer abc.def-ghi_jkl", "abc.def-ghi_jkl", "authorization"),
    ('{"authorization": "Basic dXNlcjpwYXNz"}', "dXNlcjpwYXNz", "authorization"),
    ("curl -H 'x' bearer 0123456789abcdef0123", "0123456789abcdef0123", "authorization"),
    (f"    client-key-data: {_B64}", _B64, "kubeconfig"),
    (
        "users:\n- name: ci\n  user:\n    token: kube-sa-0123456789abcdef",
        "kube-sa-01234",
        "credential",
    ),
    ("DB password=hunter2hunter2 host=db", "hunter2hunter2", "credential"),
    ('{"secret": "s3cr3t-value", "ok": true}', "s3cr3t-value", "credential"),
    ("GET /x?api_key=k-1234567&page=2", "k-1234567", "credential"),
    ("API-KEY: topsecretvalue", "topsecretvalue", "credential"),
    ("postgres://app:pa55w0rd@db.internal:5432/app", "pa55w0rd", "url_credentials"),
    ("see https://user:pass@host.example/x", "pass@", "url_credentials"),
]

NEGATIVE = [
    "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904 deployed",
    "request id 8c1f3a3e-6a7b-4c4b-9f3e-2d1c0b9a8e7f failed",
    "see https://status.example.com/incidents/123?page=2#top",
    "http://127.0.0.1:8080/health ok",
    "disk-usage 93%, task-runner sk-1 ok",
    "prompt_tokens: 10, tokens: 20",
    "password reset emails are delayed",
    "the secretary said secrets are fine",
    "eyJ is how a JWT starts",
    "AKIA is an AWS prefix",
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
]


@pytest.mark.parametrize(("text", "secret", "kind"), POSITIVE)
def test_secrets_are_redacted_with_their_kind(text: str, secret: str, kind: str) -> None:
    redacted = redact(text)
    assert secret not in redacted
    assert f"[REDACTED:{kind}]" in redacted


@pytest.mark.parametrize("text", NEGATIVE)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert redact(text) == text


def test_field_names_stay_and_only_values_go() -> None:
    assert redact("password=hunter2") == "password=[REDACTED:credential]"
    assert redact("https://user:pass@host/x") == "https://user:[REDACTED:url_credentials]@host/x"
    assert redact("Authorization: Bearer tok") == "Authorization: Bearer [REDACTED:authorization]"


@pytest.mark.parametrize(("text", "secret", "kind"), POSITIVE)
def test_redaction_is_idempotent_on_the_table(text: str, secret: str, kind: str) -> None:
    once = redact(text)
    assert redact(once) == once


@given(st.text())
def test_redaction_is_idempotent_and_keeps_plain_text(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_a_cards_tool_arguments_never_show_a_secret() -> None:
    """A7 on the card: a password in a probed URL is redacted in the step's argument line."""
    from agent_core import ToolCall
    from bot.analysis.progress import summarize_args

    call = ToolCall(
        id="c1", name="http_get", arguments='{"url": "https://ops:hunter2pass@db.internal/"}'
    )
    shown = summarize_args(call)
    assert "hunter2pass" not in shown and "db.internal" in shown


def test_nul_separated_assignments_are_each_redacted() -> None:
    """A process environment (/proc/<pid>/environ) separates its entries with NUL bytes."""
    environ = "A=1\x00SLACK_BOT_TOKEN=xoxb-1234567890-abcdefghij\x00DB_PASSWORD=hunter2-victim\x00"
    shown = redact(environ)
    assert "hunter2" not in shown and "xoxb-1234567890" not in shown
    assert shown.split("\x00")[0] == "A=1"
