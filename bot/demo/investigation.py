"""The rehearsal model's script: the next reply, decided only from a request's `messages`.

Stateless on purpose: a resumed turn, or a request repeated after a worker died mid-stream, gets
the same kind of answer, because nothing but the conversation decides it. The steps:

1. No tool result yet: say so and probe `/health`, `/logs` and `/metrics` in parallel.
2. The last message is a person's (role `user`) and tool results came before it: a redirect.
   Follow it: "deploy" → `/deploys`; "database", "db" or "payments" → the `payments-db`
   dependency; anything else → `/deploys` (the usual first suspect).
3. Otherwise (tool results are the latest news): a final answer that quotes what the results
   said (the failing dependency, the key log line, the pool metrics, the suspicious deploy) and
   ends with a concrete next step.

The intent check (`agent_core._intent_check`, on after a redirect by default) is a request of its
own: a system message and one user message listing the proposed calls, one JSON object a line.
The rehearsal's calls follow the redirect, so it answers every call consistent.

A steer reaches the model as a user message that starts
`[Correction from NAME, sent while you were working. ...]` (`agent_core._llm.convert`); the
bracketed header is ignored when looking for keywords, and NAME is echoed back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ScriptedReply", "next_reply"]

FIRST_PROBES = ("/health", "/logs", "/metrics")
"""Paths probed in parallel by the first request of an analysis."""
DEPLOYS = "/deploys"
DATABASE = "/dependencies/payments-db"

_DEPLOY_WORDS = re.compile(r"\bdeploy", re.IGNORECASE)
_DATABASE_WORDS = re.compile(r"\b(database|db|payments)\b", re.IGNORECASE)
_CORRECTION = re.compile(r"^\[Correction from (?P<who>[^,\]]+)[^\]]*\]\s*")
_FRAMED = re.compile(r'<tool_output tool="[^"]*">\n(?P<body>.*)\n</tool_output>\s*\Z', re.DOTALL)
"""A result as `agent_core.tools._hygiene` frames it; the script reads what is inside."""
_STEP_LABEL = re.compile(r"\n\[step \d+\]\s*\Z")
"""The runtime's last line on every result it sends (`[step 3]`); the script reads past it."""

Wire = Mapping[str, Any]


@dataclass(frozen=True)
class ScriptedReply:
    """One assistant reply: text, then an `http_get` call per URL (none: a final answer)."""

    text: str
    """The assistant text (without the rehearsal label)."""
    urls: tuple[str, ...] = ()
    """URLs to fetch with parallel `http_get` calls, in call order."""


def next_reply(messages: Sequence[Wire], service_url: str) -> ScriptedReply:
    """Decide the rehearsal's reply to a chat-completions request.

    Args:
        messages: The request's `messages` (OpenAI wire dicts).
        service_url: Base URL of the demo service, e.g. `http://127.0.0.1:8081`.

    Returns:
        The reply to stream or send.
    """
    base = service_url.rstrip("/")
    if (check := _intent_check(messages)) is not None:
        return check
    has_results = any(m.get("role") == "tool" for m in messages)
    if not has_results:
        text = "Checking health, logs and metrics in parallel."
        return ScriptedReply(text, tuple(base + path for path in FIRST_PROBES))
    if messages and messages[-1].get("role") == "user":
        return _follow_redirect(_text(messages[-1]), base)
    return ScriptedReply(_final_answer(_results(messages), base))


def _intent_check(messages: Sequence[Wire]) -> ScriptedReply | None:
    """Every call consistent, when the request is the intent check; else None."""
    if len(messages) != 2 or messages[0].get("role") != "system":
        return None
    labels = []
    for line in _text(messages[1]).splitlines():
        if not line.startswith('{"call_id": '):
            continue
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and isinstance(item.get("call_id"), str):
            labels.append(item["call_id"])
    if not labels:
        return None
    reason = "it follows the redirect"
    verdicts = [{"call_id": label, "consistent": True, "reason": reason} for label in labels]
    return ScriptedReply(json.dumps({"verdicts": verdicts}))


def _text(message: Wire) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _follow_redirect(text: str, base: str) -> ScriptedReply:
    header = _CORRECTION.match(text)
    who = header.group("who").strip() if header else "you"
    said = text[header.end() :] if header else text
    if _DEPLOY_WORDS.search(said):
        path = DEPLOYS
    elif _DATABASE_WORDS.search(said):
        path = DATABASE
    else:
        path = DEPLOYS
    owner = "your" if who == "you" else f"{who}'s"
    return ScriptedReply(f"Following {owner} redirect: checking {path}.", (base + path,))


def _results(messages: Sequence[Wire]) -> list[tuple[str, str]]:
    """(URL called, tool result) for every tool message, in history order."""
    urls: dict[str, str] = {}
    found: list[tuple[str, str]] = []
    for message in messages:
        for call in message.get("tool_calls") or ():
            urls[str(call.get("id"))] = _url_of(call)
        if message.get("role") == "tool":
            found.append((urls.get(str(message.get("tool_call_id")), "?"), _text(message)))
    return found


def _url_of(call: Wire) -> str:
    function = call.get("function") or {}
    try:
        args = json.loads(function.get("arguments") or "{}")
    except ValueError:
        return "?"
    return str(args.get("url", "?")) if isinstance(args, dict) else "?"


@dataclass
class _Findings:
    """What the tool results said, as sentences, plus the facts the conclusion needs."""

    sentences: list[str]
    service: str = "The service"
    failing: str = ""
    deploy: Mapping[str, Any] | None = None


def _final_answer(results: Sequence[tuple[str, str]], base: str) -> str:
    findings = _Findings([])
    for url, content in results:
        _note(findings, urlsplit(url).path or url, content)
    if findings.failing:
        headline = f"{findings.service} is degraded because {findings.failing} is failing."
    else:
        headline = "Here is what the probes showed."
    return " ".join([headline, *findings.sentences, _next_step(findings, base)])


def _note(findings: _Findings, path: str, content: str) -> None:
    content = _STEP_LABEL.sub("", content)
    framed = _FRAMED.search(content)
    status, _, body = (framed["body"] if framed else content).partition("\n")
    if not status.startswith("HTTP "):
        findings.sentences.append(f"{path} gave no answer ({status.rstrip('.')}).")
        return
    status = status.removeprefix("HTTP ")
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if isinstance(data, dict):
        _note_json(findings, path, status, data)
    else:
        findings.sentences.append(_text_sentence(path, status, body))


def _note_json(findings: _Findings, path: str, status: str, data: Mapping[str, Any]) -> None:
    if data.get("failing"):
        findings.service = str(data.get("service") or findings.service)
        findings.failing = ", ".join(str(d) for d in data["failing"])
        sentence = f"{path} answered {status}, failing: {findings.failing}."
    elif isinstance(data.get("pool"), dict):
        pool, error = data["pool"], data.get("last_error") or {}
        findings.failing = findings.failing or str(data.get("name", ""))
        sentence = (
            f"{path}: {pool.get('active_connections')}/{pool.get('max_connections')} "
            f"connections active, {data.get('waiting_clients')} clients waiting, last error "
            f'"{error.get("message", "none")}".'
        )
    elif data.get("deploys"):
        findings.deploy = data["deploys"][0]
        sentence = (
            f"{path}: the last deploy, {findings.deploy.get('version')} at "
            f"{findings.deploy.get('at')}, changed: {findings.deploy.get('change')}."
        )
    else:
        sentence = f"{path} answered {status}."
    findings.sentences.append(sentence)


def _text_sentence(path: str, status: str, body: str) -> str:
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    errors = [line for line in lines if " ERROR " in line]
    if errors:
        key = next((line for line in reversed(errors) if "pool" in line), errors[-1])
        return f'{path} answered {status}; key log line: "{key}".'
    samples = [line.split() for line in lines if not line.startswith("#")]
    if samples:
        values = ", ".join(f"{s[0].partition('{')[0]} = {s[-1]}" for s in samples if len(s) > 1)
        return f"{path} answered {status}: {values}."
    return f"{path} answered {status}."


def _next_step(findings: _Findings, base: str) -> str:
    if findings.deploy is not None:
        return (
            f"Next step: roll back {findings.deploy.get('version')} (or revert its pool "
            "settings), then watch the pool usage fall below 100% and the 5xx rate recover."
        )
    if findings.failing:
        return (
            f"Next step: GET {base}{DEPLOYS} to see whether a recent change touched the "
            f"{findings.failing} pool, and roll it back if it did."
        )
    return f"Next step: probe {base}/health again and check {base}{DEPLOYS} for recent changes."
