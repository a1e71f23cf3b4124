"""The built-in `shell` tool: allowlisted, read-only commands run without a shell.

Contract (issue 7; RELIABILITY A3): one argument `command`, split with `shlex` (POSIX rules) and
run with `exec`, never through `/bin/sh`, with stdin closed and an environment of `PATH` (plus
what the caller passes explicitly) so no secret of the bot's process reaches the child. A command
runs only when it passes every check below, in this order, and its argv starts with an entry of
the `CommandAllowlist`; any refusal is a `ToolFailed` naming the reason, and nothing executes.

1. No shell syntax, even though no shell runs (`;`, `&&`, `||`, `|`, `&`, `$(`, `${`, backticks,
   `>`, `<`, backslashes, newlines, control characters): a model that writes them means
   something a plain exec would not do, and passing them through as literal arguments hides it.
2. No program that runs another program (`sudo`, `env VAR=x cmd`, `xargs`, `bash -c`, ...).
3. No `..` path component: prefixes such as `cat /var/log` must not be climbed out of.
4. No credential or impersonation flag (`--kubeconfig`, `--token`, `--as`, `--server`, ...), and
   no action flag that writes or deletes (`find -delete`, `journalctl --vacuum-size`, ...).
5. No listener on every interface (`port-forward` or `proxy` with `0.0.0.0`).
6. No mutating verb anywhere in the argv of a cluster or service tool (`kubectl delete`,
   `helm upgrade`, `systemctl restart`, `docker exec`, ...).

The child runs in its own session, so a timeout or a cancellation (a stop or steer aborts this
tool) kills its whole process group; the cancellation itself keeps propagating.
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

from agent_core.errors import ConfigError, ToolFailed
from agent_core.tools.base import Interruptibility, Risk, Tool, ToolContext
from agent_core.tools.command_rules import check_command, check_syntax

__all__ = ["MAX_OUTPUT_CHARS", "SAFE_PATH", "CommandAllowlist", "check_command", "shell_tool"]

MAX_OUTPUT_CHARS = 20_000
"""Output (stdout and stderr interleaved) is truncated to this many characters."""
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""The child's `PATH`: system directories only, never the bot's own (possibly a venv) `PATH`."""
_TIMEOUT_MARGIN_S = 1.0
"""The batch's own timeout trails ours, so the model reads this tool's clearer message."""
_KILL_WAIT_S = 5.0
"""How long to wait for a SIGKILLed child to be reaped."""


def _split(command: str) -> list[str]:
    check_syntax(command)
    try:
        argv = shlex.split(command, posix=True)
    except ValueError as exc:
        raise ToolFailed(f"refused: the command does not parse ({exc})") from exc
    check_command(argv)
    return argv


def _under(token: str, root: str) -> bool:
    value = token.split("=", 1)[-1] if token.startswith("-") else token
    if token.startswith("-") and "/" not in value:
        return True  # an option with no path in it
    return value == root or value.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class _Prefix:
    argv: tuple[str, ...]

    def matches(self, argv: list[str]) -> bool:
        n = len(self.argv)
        if len(argv) < n or tuple(argv[: n - 1]) != self.argv[:-1]:
            return False
        last = self.argv[-1]
        if not last.startswith("/") or n == 1:
            return argv[n - 1] == last
        # A path prefix (`cat /var/log`) admits that path and what lies below it, and every
        # later argument must stay below it too: `cat /var/log/x /etc/shadow` is refused.
        return all(_under(token, last) for token in argv[n - 1 :])


@dataclass(frozen=True)
class CommandAllowlist:
    """Command prefixes (as argv) that the `shell` tool may run."""

    prefixes: tuple[_Prefix, ...]

    @classmethod
    def parse(cls, spec: str | Iterable[str]) -> CommandAllowlist:
        """Parse `"kubectl get,kubectl logs,df,cat /var/log"` (or a list of such entries).

        Raises:
            ConfigError: An entry does not parse, or would itself break a read-only rule.
        """
        entries = spec.split(",") if isinstance(spec, str) else list(spec)
        prefixes: list[_Prefix] = []
        for entry in entries:
            if not entry.strip():
                continue
            try:
                prefixes.append(_Prefix(tuple(_split(entry))))
            except ToolFailed as exc:
                raise ConfigError(f"shell allowlist entry {entry.strip()!r}: {exc}") from exc
        return cls(tuple(prefixes))

    def allows(self, argv: list[str]) -> bool:
        """Return True when `argv` starts with one of the allowed prefixes."""
        return any(prefix.matches(argv) for prefix in self.prefixes)

    def describe(self) -> str:
        """The allowed prefixes, for messages the model reads."""
        return ", ".join(shlex.join(p.argv) for p in self.prefixes) or "(none)"


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # exited between the check and the kill
            pass


async def _read_capped(stream: asyncio.StreamReader) -> str:
    """Read to EOF, keeping the first `MAX_OUTPUT_CHARS` characters and counting the rest."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    kept: list[str] = []
    size = dropped = 0
    while chunk := await stream.read(65_536):
        text = decoder.decode(chunk)
        room = MAX_OUTPUT_CHARS - size
        kept.append(text[:room])
        size += min(len(text), room)
        dropped += max(0, len(text) - room)
    dropped += len(decoder.decode(b"", final=True))
    body = "".join(kept)
    return body + (f"\n… [truncated {dropped} characters]" if dropped else "")


async def _run(
    argv: list[str], *, timeout_s: float, cwd: str | None, env: Mapping[str, str]
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
            output = await _read_capped(proc.stdout)
            code = await proc.wait()
    except TimeoutError as exc:
        raise ToolFailed(f"`{shlex.join(argv)}` timed out after {timeout_s:g} s") from exc
    finally:
        # Runs on timeout and on cancellation (stop, steer) alike; the kill is synchronous, and
        # the reap is shielded so a second cancellation cannot leave a zombie behind.
        _kill_group(proc)
        if proc.returncode is None:
            await asyncio.wait_for(asyncio.shield(proc.wait()), _KILL_WAIT_S)
    return f"exit {code}\n{output}"


def shell_tool(
    allowlist: CommandAllowlist,
    *,
    timeout_s: float = 10.0,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Tool:
    """Build the `shell` tool.

    Args:
        allowlist: The command prefixes the tool may run.
        timeout_s: A command still running after this long is killed and reported as timed out.
        cwd: Working directory of the commands (the bot's own when None).
        env: Extra variables passed to the child on purpose (for example `KUBECONFIG`, or the
            `KUBERNETES_SERVICE_*` pair in-cluster `kubectl` needs); nothing else is inherited.
    """
    child_env = {"PATH": SAFE_PATH, **(env or {})}

    async def handler(args: Mapping[str, Any], ctx: ToolContext) -> str:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolFailed("`command` must be a non-empty string")
        argv = _split(command)
        if not allowlist.allows(argv):
            raise ToolFailed(
                f"refused: {shlex.join(argv)!r} is not in the shell allowlist "
                f"(allowed prefixes: {allowlist.describe()})"
            )
        return await _run(argv, timeout_s=timeout_s, cwd=cwd, env=child_env)

    return Tool(
        name="shell",
        description=(
            "Run one read-only diagnostic command (no shell: no pipes, redirection, chaining or "
            "substitution) and return its exit status and output. Allowed command prefixes: "
            f"{allowlist.describe()}."
        ),
        parameters={
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, e.g. `df -h`"}
            },
            "required": ["command"],
            "additionalProperties": False,
        },
        handler=handler,
        interruptibility=Interruptibility.ABORTABLE,
        risk=Risk.READ_ONLY,
        timeout_s=timeout_s + _TIMEOUT_MARGIN_S,
    )
