"""Flags no `shell` profile may admit, and programs no profile may describe (X8).

Contract: this table is code, not data, so an operator's profile file cannot loosen it. Every
profile, shipped or an operator's, is checked against it when it loads (`check_flag`): a flag
that is listed, that matches a listed `prefix-*`, or that abbreviates a listed long flag by
stopping inside a word (getopt and git expand any unambiguous prefix, so admitting `--out` would
admit `--output`; `--output` itself is no abbreviation of `--output-file`) is a
`ConfigError` naming the profile. At run time the same table only words the refusal: the
grammar refuses every flag its profile does not spell, listed here or not.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["NEVER_ADMIT", "UNPROFILABLE", "abbreviated", "check_flag", "never_admit_reason"]

_SERVER = "chooses another server"
_IDENTITY = "chooses another identity"
_CREDENTIAL = "passes a credential"
_CONFIG = "chooses another configuration or kubeconfig"
_WRITES = "writes or deletes files"
_RUNS = "runs another program"
_PAGER = "starts a pager"
_REMOTE = "operates on another host or container"
_SOURCE = "reads outside the command's own data (a URL, another file or repository)"

_EVERY_PROGRAM: Mapping[str, str] = {
    "--kubeconfig": _CONFIG,
    "--config": _CONFIG,
    "--server": _SERVER,
    "--token": _CREDENTIAL,
    "--password": _CREDENTIAL,
    "--username": _CREDENTIAL,
    "--client-*": _CREDENTIAL,
    "--certificate-authority": _CREDENTIAL,
    "--insecure-skip-tls-verify": "disables TLS verification",
    "--tls-*": _CREDENTIAL,
    "--as": _IDENTITY,
    "--as-*": _IDENTITY,
    "--host": _REMOTE,
    "--machine": _REMOTE,
    "--pager": _PAGER,
    "--paginate": _PAGER,
    "--pager-end": _PAGER,
    "--exec": _RUNS,
    "--exec-path": _RUNS,
    "--to-command": _RUNS,
    "--use-compress-program": _RUNS,
    "--rsh-command": _RUNS,
    "--info-script": _RUNS,
    "--new-volume-script": _RUNS,
    "--checkpoint-action": _RUNS,
    "--upload-pack": _RUNS,
    "--receive-pack": _RUNS,
    "--ext-diff": _RUNS,
    "--textconv": _RUNS,
    "--output-file": _WRITES,
    "--output-directory": _WRITES,
    "--in-place": _WRITES,
    "--delete": _WRITES,
    "--vacuum-*": _WRITES,
    "--rotate": _WRITES,
    "--flush": _WRITES,
    "--sync": _WRITES,
    "--relinquish-var": _WRITES,
    "--smart-relinquish-var": _WRITES,
    "--setup-keys": _WRITES,
    "--update-catalog": _WRITES,
    "--kill": "kills sockets or processes",
    "--git-dir": _SOURCE,
    "--work-tree": _SOURCE,
    "--no-index": _SOURCE,
    "--raw": _SOURCE,
    "--kustomize": _SOURCE,
}
NEVER_ADMIT: Mapping[str, Mapping[str, str]] = {
    "*": _EVERY_PROGRAM,
    "kubectl": {
        "-s": _SERVER,
        "--context": _CONFIG,
        "--cluster": _CONFIG,
        "--follow": "never ends (follows forever)",
        "--watch": "never ends (watches forever)",
        "--watch-only": "never ends (watches forever)",
        "--user": _IDENTITY,
        "-k": _SOURCE,
        "-v": "logs requests with their credentials",
        "--v": "logs requests with their credentials",
        "--vmodule": "logs requests with their credentials",
        "--cache-dir": _WRITES,
        "--profile": _WRITES,
        "--profile-output": _WRITES,
        "--log-file": _WRITES,
        "--log-dir": _WRITES,
        "-w": "never ends (watches forever)",
    },
    "systemctl": {"-H": _REMOTE, "-M": _REMOTE, "--root": _SOURCE, "--image": _SOURCE},
    "journalctl": {
        "-H": _REMOTE,
        "-M": _REMOTE,
        "-e": _PAGER,
        "-f": "never ends (follows forever)",
        "--follow": "never ends (follows forever)",
        "--root": _SOURCE,
        "--image": _SOURCE,
        "--file": _SOURCE,
        "-D": _SOURCE,
        "--directory": _SOURCE,
        "--cursor-file": _WRITES,
    },
    "git": {
        "-c": "sets configuration (a pager, a program to run)",
        "-C": _SOURCE,
        # `git -p` (paginate) is a flag of git itself, which a grammar that takes flags only
        # after the subcommand never reaches; `git log -p` is `--patch`.
        "-O": _PAGER,
        "--output": _WRITES,
        "--open-files-in-pager": _PAGER,
        "--config-env": "sets configuration (a pager, a program to run)",
        "--namespace": _SOURCE,
    },
    "tar": {
        "-o": _WRITES,
        "--output": _WRITES,
        "-I": _RUNS,
        "-F": _RUNS,
        "-x": _WRITES,
        "--extract": _WRITES,
        "--get": _WRITES,
        "-c": _WRITES,
        "--create": _WRITES,
        "-r": _WRITES,
        "--append": _WRITES,
        "-u": _WRITES,
        "--update": _WRITES,
        "-A": _WRITES,
        "--catenate": _WRITES,
        "--force-local": _REMOTE,
    },
    "sed": {
        "-e": "runs a script (its `e` command runs programs, `w` writes files)",
        "--expression": "runs a script (its `e` command runs programs, `w` writes files)",
        "-f": "runs a script file",
        "--file": "runs a script file",
        "-i": _WRITES,
    },
    "tail": {
        "-f": "never ends (follows forever)",
        "-F": "never ends (follows forever)",
        "--follow": "never ends (follows forever)",
    },
    "ss": {
        "-K": "kills sockets",
        "-D": _WRITES,
        "--diag": _WRITES,
        "-N": _REMOTE,
        "--net": _REMOTE,
    },
    "dig": {"-f": _SOURCE, "-k": _CREDENTIAL, "-y": _CREDENTIAL, "-b": "binds another address"},
    "sort": {"-o": _WRITES, "--output": _WRITES, "--compress-program": _RUNS},
    "curl": {"-o": _WRITES, "--output": _WRITES, "-K": _CONFIG},
    "wget": {"-O": _WRITES, "--output-document": _WRITES},
}
"""Program (or `*` for all) → flag → why it is never admitted; `--name-*` matches a prefix."""

UNPROFILABLE: Mapping[str, str] = dict.fromkeys(
    (
        "sudo", "su", "doas", "env", "xargs", "nohup", "timeout", "nice", "ionice", "setsid",
        "stdbuf", "chroot", "nsenter", "unshare", "watch", "time", "strace", "ltrace",
        "busybox", "sh", "bash", "dash", "zsh", "ksh", "fish", "python", "python3", "perl",
        "ruby", "node", "awk", "gawk", "mawk", "sed", "ssh", "script", "flock", "chrt",
        "taskset", "runuser", "systemd-run", "find", "vim", "vi", "less", "more", "man",
    ),
    "runs another program or a script",
)  # fmt: skip
"""Programs no profile may describe: their arguments are a program or a script (`sed`'s `e`
command runs programs, `find -exec` too), or they start a pager or an editor."""


def never_admit_reason(program: str, flag: str) -> str | None:
    """Why `flag` of `program` is never admitted, when it is listed (exactly or by `-*`)."""
    for table in (NEVER_ADMIT.get(program, {}), _EVERY_PROGRAM):
        if flag in table:
            return table[flag]
        for listed, why in table.items():
            if listed.endswith("*") and flag.startswith(listed[:-1]):
                return why
    return None


def check_flag(program: str, flag: str) -> str | None:
    """Why a profile of `program` may not admit `flag` (listed, or abbreviating a listed flag)."""
    if why := never_admit_reason(program, flag):
        return why
    if not flag.startswith("--") or len(flag) <= 3:
        return None
    for table in (NEVER_ADMIT.get(program, {}), _EVERY_PROGRAM):
        for listed, why in table.items():
            stem = listed.rstrip("*")
            # `--out` abbreviates `--output`; `--output` ends where a word of `--output-file`
            # does, so it is an option in its own right (getopt prefers an exact match).
            if stem.startswith(flag) and len(stem) > len(flag) and stem[len(flag)] != "-":
                return f"abbreviates `{listed}`, which {why}"
    return None


def abbreviated(program: str, flag: str) -> tuple[str, str] | None:
    """The listed long flag that `flag` is a strict prefix of, and why it is never admitted."""
    if not flag.startswith("--") or len(flag) <= 2:
        return None
    for table in (NEVER_ADMIT.get(program, {}), _EVERY_PROGRAM):
        for listed, why in table.items():
            stem = listed.rstrip("*")
            if stem.startswith(flag) and len(stem) > len(flag):
                return listed, why
    return None
