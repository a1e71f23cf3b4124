"""The built-in `shell` tool: profiled, read-only commands run without a shell (X4, X7, X8).

Contract (issue 7, issue 15; docs/reliability.md A3): one argument `command`, checked for shell
syntax, split with `shlex` (POSIX rules) and run with `exec`, never through `/bin/sh`, with stdin
closed and an environment of `PATH` (plus what the caller passes explicitly) so no secret of the
bot's process reaches the child. A command runs only when its program's profile admits every token
(`command_rules.parse_command`: subcommands, flags with their value shapes, operands) and the
`CommandAllowlist` enables that command; any refusal is a `ToolFailed` naming the reason, and
nothing executes.

`CommandAllowlist` is `CHATOPS_SHELL_ALLOWLIST`: comma-separated entries, each a profiled
program and optionally its subcommands (`kubectl get`, `systemctl status`, `git`), then
optionally absolute path roots (`cat /var/log /etc/nginx`) under which every path the command
names must lie, symlinks resolved. An entry naming no profile is a `ConfigError`.

Output (stdout and stderr interleaved) is read as bytes and counted as it streams: past
`max_output_bytes` the tool stops reading, kills the process group and says so; what was kept
is decoded as UTF-8 with replacement, never splitting a character. The child runs in its own
session, so a timeout, a cancellation (a stop or steer aborts this tool) or a truncation kills
its whole process group; the cancellation itself keeps propagating.
"""

from __future__ import annotations

import asyncio
import codecs
import os
import shlex
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent_core._errors import ConfigError, ToolFailed
from agent_core.tools._base import Interruptibility, Risk, Tool, ToolContext
from agent_core.tools._command_rules import ParsedCommand, check_syntax, parse_command
from agent_core.tools._shell_profiles import Node, ShellProfiles

__all__ = [
    "MAX_OUTPUT_BYTES",
    "SAFE_PATH",
    "CommandAllowlist",
    "ShellProfiles",
    "parse_command",
    "shell_tool",
]

MAX_OUTPUT_BYTES = 32_768
"""Default cap on a command's output, counted in bytes as it streams."""
MAX_COMMAND_CHARS = 4_096
"""A longer command line is refused before it is split."""
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The child's `PATH`: system directories only, never the bot's own (possibly a venv) `PATH`."""
_TIMEOUT_MARGIN_S = 1.0
"""The batch's own timeout trails ours, so the model reads this tool's clearer message."""
_KILL_WAIT_S = 5.0
"""How long to wait for a SIGKILLed child to be reaped."""
_CHUNK = 65_536


def _split(command: str) -> list[str]:
    if len(command) > MAX_COMMAND_CHARS:
        raise ToolFailed(f"refused: the command is longer than {MAX_COMMAND_CHARS} characters")
    check_syntax(command)
    try:
        return shlex.split(command, posix=True)
    except ValueError as exc:
        raise ToolFailed(f"refused: the command does not parse ({exc})") from exc


def _under(path: str, root: str, cwd: str | None) -> bool:
    full = os.path.normpath(os.path.join(cwd or os.getcwd(), path))
    root = root.rstrip("/") or "/"
    return all(
        candidate == root or candidate.startswith(root.rstrip("/") + "/")
        for candidate in (full, os.path.realpath(full))
    )


def _entry(spec: str, profiles: ShellProfiles) -> tuple[tuple[str, ...], tuple[str, ...]]:
    tokens = _split(spec)
    node: Node | None = profiles.programs.get(tokens[0]) if tokens else None
    if node is None:
        raise ConfigError(
            f"shell allowlist entry {spec!r}: `{tokens[0] if tokens else ''}` has no shell "
            "profile (add one in CHATOPS_SHELL_PROFILES_FILE)"
        )
    path = [tokens[0]]
    rest = tokens[1:]
    while rest and not rest[0].startswith("/"):
        if rest[0] not in node.subcommands:
            subs = ", ".join(sorted(node.subcommands)) or "none"
            raise ConfigError(
                f"shell allowlist entry {spec!r}: `{rest[0]}` is not a subcommand of "
                f"`{node.name}` in its profile (subcommands: {subs}); entries name programs, "
                "subcommands and path roots"
            )
        node = node.subcommands[rest.pop(0)]
        path = list(node.path)
    for root in rest:
        if not root.startswith("/") or ".." in root.split("/"):
            raise ConfigError(f"shell allowlist entry {spec!r}: {root!r} is not an absolute root")
    return tuple(path), tuple(rest)


@dataclass(frozen=True)
class CommandAllowlist:
    """Which profiled commands the `shell` tool may run, and under which path roots."""

    profiles: ShellProfiles
    enabled: Mapping[tuple[str, ...], tuple[str, ...] | None]
    """Command path → path roots (None: any path its profile admits)."""

    @classmethod
    def parse(cls, spec: str | Iterable[str], profiles: ShellProfiles) -> CommandAllowlist:
        """Parse `"kubectl get,kubectl logs,df,cat /var/log"` (or a list of such entries).

        Raises:
            ConfigError: An entry does not parse or names no profiled command.
        """
        entries = spec.split(",") if isinstance(spec, str) else list(spec)
        enabled: dict[tuple[str, ...], tuple[str, ...] | None] = {}
        for entry in entries:
            if not entry.strip():
                continue
            try:
                path, roots = _entry(entry, profiles)
            except ToolFailed as exc:
                raise ConfigError(f"shell allowlist entry {entry.strip()!r}: {exc}") from exc
            known = enabled.get(path, ())
            merged = None if known is None or not roots else (*known, *roots)
            enabled[path] = merged
        return cls(profiles, enabled)

    def check(self, parsed: ParsedCommand, cwd: str | None) -> None:
        """Raise `ToolFailed` unless the parsed command is enabled, its paths under its roots."""
        matches = [
            roots for path, roots in self.enabled.items() if parsed.path[: len(path)] == path
        ]
        if not matches:
            raise ToolFailed(
                f"refused: `{' '.join(parsed.path)}` is not enabled here "
                f"(enabled: {self.describe()})"
            )
        if any(roots is None for roots in matches):
            return
        roots = [root for group in matches if group for root in group]
        for path in parsed.paths:
            if not any(_under(path, root, cwd) for root in roots):
                raise ToolFailed(
                    f"refused: {path!r} is outside the paths enabled for "
                    f"`{' '.join(parsed.path)}` ({', '.join(roots)})"
                )

    def describe(self) -> str:
        """The enabled commands, for messages the model reads."""
        entries = [" ".join((*path, *(roots or ()))) for path, roots in self.enabled.items()]
        return ", ".join(entries) or "(none)"


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # exited between the check and the kill
            pass


@dataclass(frozen=True)
class _Output:
    data: bytes
    truncated: bool


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> _Output:
    """Read until EOF or until more than `limit` bytes arrived; never holds more than that."""
    kept = bytearray()
    while len(kept) <= limit:
        # One byte past the limit is how we learn there is more, without reading it all.
        chunk = await stream.read(min(_CHUNK, limit + 1 - len(kept)))
        if not chunk:
            return _Output(bytes(kept), truncated=False)
        kept += chunk
    return _Output(bytes(kept[:limit]), truncated=True)


def _decode(data: bytes) -> str:
    """UTF-8 with replacement; a character cut by the byte limit is dropped, not replaced."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data, final=False)


async def _run(
    argv: list[str], *, timeout_s: float, cwd: str | None, env: Mapping[str, str], limit: int
) -> str:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,  # its own process group, so a kill reaches grandchildren
        )
    except OSError as exc:
        raise ToolFailed(f"`{argv[0]}` could not start: {exc.strerror or exc}") from exc
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            output = await _read_capped(proc.stdout, limit)
            if output.truncated:
                _kill_group(proc)  # stop it now: nobody reads the rest
                # Read what the dead group left in the pipe, discarding it, to EOF: that closes
                # the pipe's transport (memory stays bounded by one chunk).
                while await proc.stdout.read(_CHUNK):
                    pass
            code = await proc.wait()
    except TimeoutError as exc:
        raise ToolFailed(f"`{shlex.join(argv)}` timed out after {timeout_s:g} s") from exc
    finally:
        # Runs on timeout and on cancellation (stop, steer) alike; the kill is synchronous, and
        # the reap is shielded so a second cancellation cannot leave a zombie behind.
        _kill_group(proc)
        if proc.returncode is None:
            await asyncio.wait_for(asyncio.shield(proc.wait()), _KILL_WAIT_S)
    text = _decode(output.data)
    if output.truncated:
        return (
            f"stopped: output passed {limit} bytes\n{text}\n… [truncated at {limit} bytes; "
            "the command was killed]"
        )
    return f"exit {code}\n{text}"


def shell_tool(
    allowlist: CommandAllowlist,
    *,
    timeout_s: float = 10.0,
    max_output_bytes: int = MAX_OUTPUT_BYTES,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Tool:
    """Build the `shell` tool.

    Args:
        allowlist: The profiled commands the tool may run.
        timeout_s: A command still running after this long is killed and reported as timed out.
        max_output_bytes: Output past this many bytes is not read; the command is killed.
        cwd: Working directory of the commands (the bot's own when None).
        env: Extra variables passed to the child on purpose (for example `KUBECONFIG`, or the
            `KUBERNETES_SERVICE_*` pair in-cluster `kubectl` needs); nothing else is inherited.
    """
    child_env = {"PATH": SAFE_PATH, **(env or {})}

    def admit(command: str) -> list[str]:
        argv = _split(command)
        allowlist.check(parse_command(argv, allowlist.profiles, cwd=cwd), cwd)
        return argv

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolFailed("`command` must be a non-empty string")
        # Off the event loop: admitting a command resolves each path operand on the disk
        # (`realpath`, a system call per component), a quarter second for a long command.
        argv = await asyncio.to_thread(admit, command)
        return await _run(argv, timeout_s=timeout_s, cwd=cwd, env=child_env, limit=max_output_bytes)

    return Tool(
        name="shell",
        description=(
            "Run one read-only diagnostic command (no shell: no pipes, redirection, chaining or "
            "substitution) and return its exit status and output. Each program's flags and "
            "operands are checked against its profile; a refusal says which token and why. "
            f"Enabled commands: {allowlist.describe()}."
        ),
        parameters={
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The command line, e.g. `kubectl get pods -n api`",
                }
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        handler=handler,
        interruptibility=Interruptibility.ABORTABLE,
        risk=Risk.READ_ONLY,
        timeout_s=timeout_s + _TIMEOUT_MARGIN_S,
    )
