"""Rewrites for secrets that are several values in one match: cookies and Kubernetes blocks.

Contract: each function takes the matched value and the marker and returns the value with each
secret part replaced by the marker and every name kept, in time linear in the value (plain
string splitting and one RE2 pass, no backtracking patterns).
"""

from __future__ import annotations

from agent_core._redaction._engine import compile_pattern, is_placeholder

__all__ = ["cookie_values", "json_object_values", "yaml_block_values"]

_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "samesite", "secure", "httponly", "priority"}
    | {"partitioned", "version", "comment"}
)
"""Set-Cookie attributes (RFC 6265 §4.1): their values are not secrets."""

_JSON_MEMBER = compile_pattern(r'("[^"\n]*"[ \t]*:[ \t]*)"(?P<value>[^"\n]*)"')


def cookie_values(header: str, marker: str) -> str:
    """A Cookie / Set-Cookie header value with each cookie's value replaced."""
    parts = []
    for part in header.split(";"):
        name, eq, value = part.partition("=")
        secret = eq and name.strip().lower() not in _COOKIE_ATTRIBUTES and value.strip()
        parts.append(f"{name}={marker}" if secret else part)
    return ";".join(parts)


def json_object_values(members: str, marker: str) -> str:
    """The members of a JSON object (`"k": "v", …`) with each string value replaced."""

    def replace(match: object) -> str:
        whole: str = match.group(0)  # type: ignore[attr-defined]
        value: str = match.group(2)  # type: ignore[attr-defined]
        if not value or is_placeholder(value):
            return whole
        return f'{match.group(1)}"{marker}"'  # type: ignore[attr-defined]

    return _JSON_MEMBER.sub(replace, members)


def yaml_block_values(block: str, marker: str) -> str:
    """YAML lines with each value under a `data:` or `stringData:` line replaced.

    A block is the lines after such a line indented deeper than it; keys and indentation stay.
    A block scalar's continuation lines (after `key: |`) are replaced whole.
    """
    out = []
    parent = -1
    scalar = -1
    for line in block.split("\n"):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" \t"))
        if parent >= 0 and stripped and indent <= parent:
            parent = -1
        if parent < 0:
            if stripped in ("data:", "stringData:"):
                parent, scalar = indent, -1
            out.append(line)
        elif scalar >= 0 and indent > scalar and stripped:
            out.append(line[:indent] + marker)
        else:
            key, colon, value = line.partition(":")
            bare = value.strip()
            scalar = indent if bare[:1] in ("|", ">") else -1
            keep = not colon or not bare or scalar >= 0 or is_placeholder(bare)
            out.append(line if keep else f"{key}: {marker}")
    return "\n".join(out)
