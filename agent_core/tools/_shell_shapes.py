"""Value shapes of the `shell` tool's grammar: what a flag's value or a positional may look like.

Contract (docs/reliability.md X7, X8): a shape is a pure check of one argv token that returns
None when the token fits, or the reason it does not. Every token is length-capped before any
pattern runs, and every pattern here is a single character class with a bounded repeat, or
alternatives that cannot overlap, so matching is linear in the token's length (the rule for any
regex over untrusted text). `path` also refuses the files a read-only diagnostic must never
show: the service-account token, kubeconfigs, `/proc/<pid>/environ` and the like, both as
written and after resolving symlinks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import PurePosixPath

__all__ = ["SHAPES", "Shape", "path_reason", "rev_reason", "sensitive_reason"]

Shape = Callable[[str], str | None]
"""A check of one token: None when it fits, else the reason (completing "… is …")."""

_MAX_TOKEN = 512
"""No flag value or positional is longer than this (a log pattern, a label selector)."""

_SENSITIVE_PREFIXES: tuple[tuple[str, str], ...] = (
    ("/var/run/secrets", "the pod's mounted secrets (service-account token)"),
    ("/run/secrets", "the pod's mounted secrets (service-account token)"),
    ("/etc/kubernetes", "the node's kubeconfigs and cluster keys"),
    ("/etc/shadow", "the password hashes"),
    ("/etc/gshadow", "the group password hashes"),
    ("/etc/sudoers", "the sudo rules"),
    ("/etc/ssh", "the host's SSH keys"),
    ("/root", "root's home directory"),
    ("/etc/ssl/private", "TLS private keys"),
    ("/var/lib/kubelet/pods", "pods' volumes (mounted secrets)"),
    ("/var/lib/etcd", "the cluster's datastore"),
    ("/proc/kcore", "the kernel's memory"),
    ("/dev", "device files (raw disks, memory)"),
)
_SENSITIVE_PARTS: Mapping[str, str] = {
    ".kube": "a kubeconfig directory",
    ".ssh": "SSH keys",
    ".aws": "cloud credentials",
    ".gnupg": "private keys",
    ".docker": "registry credentials",
    ".git-credentials": "git credentials",
    ".netrc": "stored credentials",
    ".pgpass": "database passwords",
    "kubeconfig": "a kubeconfig",
}
_PROC_PRIVATE = frozenset({"environ", "mem", "root", "cwd", "fd", "map_files", "auxv", "exe"})
"""Entries of `/proc/<pid>/` that expose another process's secrets or filesystem view."""


def sensitive_reason(path: str) -> str | None:
    """Why `path` (absolute, normalized) must not be read, or None."""
    for prefix, what in _SENSITIVE_PREFIXES:
        if path == prefix or path.startswith(prefix + "/"):
            return f"{what} ({prefix})"
    parts = PurePosixPath(path).parts
    for part in parts:
        if part in _SENSITIVE_PARTS:
            return _SENSITIVE_PARTS[part]
    if len(parts) >= 4 and parts[1] == "proc" and parts[3] in _PROC_PRIVATE:
        return f"another process's private state (/proc/{parts[2]}/{parts[3]})"
    if len(parts) >= 6 and parts[1] == "proc" and parts[3] == "task" and parts[5] in _PROC_PRIVATE:
        return f"another process's private state (/proc/{parts[2]}/task/{parts[4]}/{parts[5]})"
    return None


def path_reason(token: str, cwd: str | None = None) -> str | None:
    """Check a path operand: no `..`, no URL, no `~`, nothing sensitive (also via symlinks)."""
    if "://" in token:
        return "a URL, not a local path"
    if ":" in token.split("/", 1)[0]:
        return "a remote `host:path` (tar and rsync reach other hosts so), not a local path"
    if token == "-" or token.startswith("~"):
        return "not a plain path (`-` is stdin, `~` is not expanded without a shell)"
    if ".." in PurePosixPath(token).parts:
        return "a path that climbs out of a directory with `..`"
    base = cwd or os.getcwd()
    written = os.path.normpath(os.path.join(base, token))
    for candidate in (written, os.path.realpath(written)):
        if what := sensitive_reason(candidate):
            return f"a path to {what}, never readable here"
    return None


def rev_reason(token: str, cwd: str | None = None) -> str | None:
    """Check a git revision operand: one that names a file is refused.

    Outside a work tree `git diff a b` compares two files as `--no-index` would, so an operand
    taken for a revision must not be a path; paths go after `--`, where `path` checks them.
    """
    if os.path.lexists(os.path.join(cwd or os.getcwd(), token)):
        return "the name of a file (write paths after `--`)"
    return None


def _pattern(regex: str, what: str) -> Shape:
    compiled = re.compile(regex)

    def check(token: str) -> str | None:
        return None if compiled.fullmatch(token) else what

    return check


def _int(token: str) -> str | None:
    return None if token.isascii() and token.isdigit() and len(token) <= 9 else "not a count"


def _count(token: str) -> str | None:
    return _int(token[1:] if token.startswith("+") else token)


def _duration(token: str) -> str | None:
    # `5m`, `1h30m`, `90s`, `250ms`: digits, then a unit; the units share no prefix with digits,
    # so this is one left-to-right pass.
    if re.fullmatch(r"(?:[0-9]{1,6}(?:ms|s|m|h))+|[0-9]{1,9}", token) and len(token) <= 32:
        return None
    return "not a duration such as `10m` or `1h30m`"


def _resource(token: str) -> str | None:
    if not re.fullmatch(
        r"[a-z0-9][a-z0-9.,-]{0,252}(?:/[A-Za-z0-9][A-Za-z0-9._:-]{0,252})?", token
    ):
        return "not a resource such as `pods`, `deploy/api` or `pods,svc`"
    kinds = token.split("/", 1)[0].split(",")
    if any(kind.split(".", 1)[0] in {"secret", "secrets"} for kind in kinds):
        return "Secrets, whose values this tool never reads"
    return None


_SIMPLE: Mapping[str, Shape] = {
    "name": _pattern(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,252}", "not a name"),
    "names": _pattern(r"[A-Za-z0-9][A-Za-z0-9._:@,-]{0,252}", "not a comma-separated name list"),
    "selector": _pattern(
        r"[A-Za-z0-9!(][A-Za-z0-9._/=!,() -]{0,255}", "not a selector such as `app=api,tier!=db`"
    ),
    "time": _pattern(r"[A-Za-z0-9+-][A-Za-z0-9 :.+-]{0,39}", "not a time such as `-1h`"),
    "text": _pattern(r"[^-][^\x00-\x1f]{0,511}", "not a pattern (it may not start with `-`)"),
    "unit": _pattern(r"[A-Za-z0-9@*?][A-Za-z0-9@._:*?\[\]-]{0,255}", "not a systemd unit name"),
    "rev": _pattern(r"[A-Za-z0-9_@^~][A-Za-z0-9_./~^@{}:-]{0,255}", "not a git revision"),
    "field": _pattern(r"[A-Za-z0-9.%{}\[\]_:-]{1,128}", "not a field or sort key"),
    "format": _pattern(r"[A-Za-z0-9%,=:_+ -]{1,256}", "not a format list"),
    "dns_name": _pattern(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}", "not a DNS name or address"),
    "int": _int,
    "count": _count,
    "duration": _duration,
    "resource": _resource,
}


def _bounded(shape: Shape) -> Shape:
    def check(token: str) -> str | None:
        if not token or len(token) > _MAX_TOKEN:
            return f"empty or longer than {_MAX_TOKEN} characters"
        return shape(token)

    return check


SHAPES: Mapping[str, Shape] = {
    **{name: _bounded(shape) for name, shape in _SIMPLE.items()},
    "path": _bounded(path_reason),
}
"""Every shape a profile may name, besides `none` (a flag without a value) and `enum`."""
