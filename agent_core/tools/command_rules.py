"""The rules a `shell` command must pass before it runs (RELIABILITY A3), as pure checks.

Each check raises `ToolFailed` naming the reason; `agent_core.tools.shell` runs a command only
when `check_command` passes and its argv starts with an allowlist entry. The order and the
reasons are described in that module's docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from agent_core.errors import ToolFailed

__all__ = ["check_command", "check_syntax"]


# Longer tokens first, so `&&` is named rather than `&`.
_SHELL_SYNTAX: tuple[tuple[str, str], ...] = (
    ("\n", "a newline (a second command)"),
    ("\r", "a carriage return"),
    ("&&", "`&&` (command chaining)"),
    ("||", "`||` (command chaining)"),
    (";", "`;` (command chaining)"),
    ("|", "`|` (a pipe)"),
    ("$(", "`$(` (command substitution)"),
    ("${", "`${` (parameter expansion)"),
    ("`", "a backtick (command substitution)"),
    (">", "`>` (redirection)"),
    ("<", "`<` (redirection)"),
    ("&", "`&` (background job)"),
    ("\\", "a backslash (an escape)"),
)
_RUNNERS = frozenset(
    {
        "sudo", "su", "doas", "env", "xargs", "nohup", "timeout", "nice", "ionice", "setsid",
        "stdbuf", "chroot", "nsenter", "unshare", "watch", "time", "strace", "ltrace", "busybox",
        "sh", "bash", "dash", "zsh", "ksh", "fish", "python", "python3", "perl", "ruby", "node",
        "awk", "gawk", "ssh", "script", "flock", "chrt", "taskset", "runuser", "systemd-run",
    }
)  # fmt: skip
"""Programs whose arguments are another program to run; refused with any argument."""
_GUARDED = frozenset(
    {
        "kubectl", "oc", "k3s", "kubeadm", "helm", "systemctl", "service", "docker", "podman",
        "nerdctl", "crictl", "ctr", "argocd", "flux", "kustomize", "istioctl",
    }
)  # fmt: skip
"""Cluster and service tools whose argv is checked for mutating verbs."""
_MUTATING_VERBS = frozenset(
    {
        # kubectl / oc
        "delete", "apply", "edit", "patch", "replace", "scale", "autoscale", "exec", "cp",
        "port-forward", "proxy", "attach", "debug", "drain", "cordon", "uncordon", "taint",
        "label", "annotate", "create", "expose", "run", "set", "undo", "pause", "resume",
        "certificate", "wait",
        # helm
        "install", "uninstall", "upgrade", "rollback", "push", "pull", "add", "update",
        # systemctl / service
        "start", "stop", "restart", "reload", "try-restart", "reload-or-restart", "enable",
        "disable", "mask", "unmask", "isolate", "daemon-reload", "reset-failed", "set-property",
        "set-default", "reboot", "poweroff", "halt", "suspend", "hibernate", "kill",
        # docker / podman / crictl
        "rm", "rmi", "rmp", "prune", "build", "commit", "tag", "login", "logout", "rename",
        "load", "import", "save", "export", "unpause", "stopp", "runp",
    }
)  # fmt: skip
_FORBIDDEN_FLAGS: Mapping[str, str] = {
    "--kubeconfig": "picks another kubeconfig",
    "--token": "passes a credential",
    "--as": "impersonates another user",
    "--as-group": "impersonates another group",
    "--as-uid": "impersonates another user",
    "--username": "passes a credential",
    "--password": "passes a credential",
    "--client-key": "passes a credential",
    "--client-certificate": "passes a credential",
    "--server": "points the client at another server",
    "--insecure-skip-tls-verify": "disables TLS verification",
    "-exec": "runs another program",
    "-execdir": "runs another program",
    "-ok": "runs another program",
    "-okdir": "runs another program",
    "-delete": "deletes files",
    "-fprint": "writes a file",
    "-fprint0": "writes a file",
    "-fprintf": "writes a file",
    "-fls": "writes a file",
    "--in-place": "edits a file in place",
    "--rotate": "rotates the journal",
    "--vacuum-size": "deletes journal files",
    "--vacuum-time": "deletes journal files",
    "--vacuum-files": "deletes journal files",
    "--flush": "writes the journal",
    "--sync": "writes the journal",
    "--relinquish-var": "changes where the journal is written",
    "--setup-keys": "writes sealing keys",
}
"""Options refused for every program, with the reason the model reads."""
_LISTENERS = frozenset({"port-forward", "proxy"})
_ALL_INTERFACES = ("0.0.0.0", "::", "[::]")


def _program(token: str) -> str:
    return PurePosixPath(token).name


def check_syntax(command: str) -> None:
    """Refuse shell syntax in the raw command line (no shell runs it; see the module above)."""
    for needle, what in _SHELL_SYNTAX:
        if needle in command:
            raise ToolFailed(f"refused: the command contains {what}; no shell runs here")
    if any(ord(ch) < 0x20 and ch != "\t" for ch in command):
        raise ToolFailed("refused: the command contains a control character")


def _check_tokens(argv: list[str]) -> None:
    if _program(argv[0]) in _RUNNERS and len(argv) > 1:
        raise ToolFailed(f"refused: `{_program(argv[0])}` runs another program")
    for token in argv:
        if ".." in token.replace("=", "/").replace(":", "/").split("/"):
            raise ToolFailed(f"refused: {token!r} climbs out of a directory with `..`")
        flag = token.split("=", 1)[0]
        if flag in _FORBIDDEN_FLAGS:
            raise ToolFailed(f"refused: `{flag}` {_FORBIDDEN_FLAGS[flag]}")


def _check_verbs(argv: list[str]) -> None:
    guarded = [_program(t) for t in argv if _program(t) in _GUARDED]
    if not guarded:
        return
    if _LISTENERS.intersection(argv) and any(
        token.split("=", 1)[-1].strip("'\"") in _ALL_INTERFACES for token in argv
    ):
        raise ToolFailed("refused: listening on every interface (0.0.0.0) exposes the cluster")
    for token in argv[1:]:
        if token in _MUTATING_VERBS:
            raise ToolFailed(f"refused: `{token}` changes state; `{guarded[0]}` is read-only here")


def check_command(argv: list[str]) -> None:
    """Raise `ToolFailed` when `argv` breaks a read-only rule (all but the shell-syntax one)."""
    if not argv:
        raise ToolFailed("refused: the command is empty")
    _check_tokens(argv)
    _check_verbs(argv)
