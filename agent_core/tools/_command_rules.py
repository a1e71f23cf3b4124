"""The grammar a `shell` command must fit before it runs (X7, X8, A3), as pure checks.

Contract: `check_syntax` refuses shell syntax in the raw line (no shell runs it, and a model that
writes `;` or `$(` means something a plain exec would not do). `parse_command` then walks the
argv through its program's profile (`shell_profiles`) and admits it only when every token is
accounted for:

- `argv[0]` is a profiled program, spelled as the profile names it (no path); the subcommands
  follow it directly, each one the profile lists (`kubectl top pod`), down to a runnable node.
- A flag is admitted only when the node spells it exactly: no abbreviation (getopt and git
  expand `--vacuum-t` to `--vacuum-time`; we do not), no `--switch=value`, and in a bundle
  (`-tlnp`) every letter admitted, a value-taking letter taking the rest of the bundle or the
  next token, as getopt does. `-x=value` is refused: getopt reads `=value`, pflag `value`.
- A value, and every operand, must fit its shape; operands may not start with `-`, a lone `-`
  (stdin) is refused, and `--` is accepted only where the profile says what may follow it.
- `-f`/`--filename` never takes a URL, and no token has a `..` path component, whatever its
  shape.

Every refusal is a `ToolFailed` whose text names the token and the reason; nothing runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from agent_core._errors import ToolFailed
from agent_core.tools._shell_never_admit import UNPROFILABLE, abbreviated, never_admit_reason
from agent_core.tools._shell_profiles import Node, Operand, ShellProfiles, ValueSpec

__all__ = ["ParsedCommand", "check_syntax", "parse_command"]


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
_URL_FLAGS = frozenset({"-f", "--filename"})


def check_syntax(command: str) -> None:
    """Refuse shell syntax in the raw command line (no shell runs it; see the module above)."""
    for needle, what in _SHELL_SYNTAX:
        if needle in command:
            raise ToolFailed(f"refused: the command contains {what}; no shell runs here")
    if any(ord(ch) < 0x20 and ch != "\t" for ch in command):
        raise ToolFailed("refused: the command contains a control character")


@dataclass(frozen=True)
class ParsedCommand:
    """An argv the grammar admitted."""

    path: tuple[str, ...]
    """The command it runs (`("kubectl", "get")`)."""
    paths: tuple[str, ...]
    """Every value and operand of shape `path`, for the allowlist's path roots."""


def _refuse(reason: str) -> ToolFailed:
    return ToolFailed(f"refused: {reason}")


def _flag_refusal(node: Node, flag: str) -> ToolFailed:
    program = node.path[0]
    if why := never_admit_reason(program, flag):
        return _refuse(f"`{flag}` {why}; `{program}` never admits it")
    if listed := abbreviated(program, flag):
        return _refuse(
            f"`{flag}` abbreviates `{listed[0]}`, which {listed[1]}; `{program}` never admits it"
        )
    if flag.startswith("--"):
        longer = sorted(f for f in node.flags if f.startswith(flag) and f != flag)
        if longer:
            return _refuse(
                f"`{flag}` abbreviates `{longer[0]}`; flags must be spelled in full, "
                "as the profile spells them"
            )
    admitted = ", ".join(sorted(node.flags)) or "none"
    return _refuse(f"`{flag}` is not an admitted flag of `{node.name}` (admitted: {admitted})")


@dataclass
class _Walk:
    node: Node
    cwd: str | None
    operands: list[str] = field(default_factory=list)
    after_dashdash: list[str] | None = None
    paths: list[str] = field(default_factory=list)

    def value(self, flag: str, spec: ValueSpec, token: str) -> None:
        if flag in _URL_FLAGS and "://" in token:
            raise _refuse(f"`{flag}` never takes a URL ({token!r})")
        if why := spec.check(token, self.cwd):
            raise _refuse(f"the value {token!r} of `{flag}` is {why}")
        if spec.shape == "path":
            self.paths.append(token)

    def long_flag(self, token: str, rest: list[str]) -> None:
        flag, eq, attached = token.partition("=")
        spec = self.node.flags.get(flag)
        if spec is None:
            raise _flag_refusal(self.node, flag)
        if not spec.takes_value:
            if eq:
                raise _refuse(f"`{flag}` takes no value (write it without `={attached}`)")
            return
        if eq:
            self.value(flag, spec, attached)
        elif not spec.optional:
            self.value(flag, spec, self.take(flag, rest))

    def short_flags(self, token: str, rest: list[str]) -> None:
        for index, letter in enumerate(token[1:], start=2):
            flag = f"-{letter}"
            spec = self.node.flags.get(flag)
            if spec is None:
                raise _flag_refusal(self.node, flag)
            if not spec.takes_value:
                continue
            attached = token[index:]
            if attached.startswith("="):
                raise _refuse(f"write `{flag} {attached[1:]}`, not `{flag}{attached}`")
            self.value(flag, spec, attached or self.take(flag, rest))
            return

    def take(self, flag: str, rest: list[str]) -> str:
        if not rest:
            raise _refuse(f"`{flag}` needs a value")
        return rest.pop(0)

    def token(self, token: str, rest: list[str]) -> None:
        if self.after_dashdash is not None:
            self.after_dashdash.append(token)
        elif token == "--":
            if self.node.after_dashdash is None:
                raise _refuse(f"`--` is not accepted by `{self.node.name}`")
            self.after_dashdash = []
        elif token == "-":
            raise _refuse("`-` (read standard input) is not accepted")
        elif token.startswith("--"):
            self.long_flag(token, rest)
        elif token.startswith("-"):
            self.short_flags(token, rest)
        else:
            self.operands.append(token)


def _match(node: Node, slots: Sequence[Operand], tokens: list[str], walk: _Walk) -> None:
    wanted = " ".join(slot.describe() for slot in slots) or "no operands"
    queue = list(tokens)
    for slot in slots:
        count = len(queue) if slot.arity in "*+" else min(1, len(queue))
        if count == 0 and slot.arity in "1+":
            raise _refuse(f"`{node.name}` needs a {slot.value.shape} operand (it takes {wanted})")
        for token in queue[:count]:
            if why := slot.value.check(token, walk.cwd):
                raise _refuse(f"the operand {token!r} of `{node.name}` is {why}")
            if slot.value.shape == "path":
                walk.paths.append(token)
        del queue[:count]
    if queue:
        raise _refuse(f"`{node.name}` takes {wanted}; {queue[0]!r} is one operand too many")


def _resolve(profiles: ShellProfiles, argv: list[str]) -> tuple[Node, int]:
    program = argv[0]
    node = profiles.programs.get(program)
    if node is None:
        note = f" (it {UNPROFILABLE[program]})" if program in UNPROFILABLE else ""
        raise _refuse(f"`{program}` has no shell profile{note}; only profiled programs run")
    index = 1
    while index < len(argv) and argv[index] in node.subcommands:
        node = node.subcommands[argv[index]]
        index += 1
    if node.runnable:
        return node, index
    subs = ", ".join(sorted(node.subcommands))
    if index == len(argv):
        raise _refuse(f"`{node.name}` needs a subcommand ({subs})")
    token = argv[index]
    if token.startswith("-"):
        flag = token.partition("=")[0] if token.startswith("--") else token[:2]
        if why := never_admit_reason(program, flag):
            raise _refuse(f"`{flag}` {why}; `{program}` never admits it")
        raise _refuse(f"`{node.name}` takes its subcommand first ({subs}), then flags")
    raise _refuse(f"`{token}` is not an admitted subcommand of `{node.name}` ({subs})")


def parse_command(
    argv: list[str], profiles: ShellProfiles, *, cwd: str | None = None
) -> ParsedCommand:
    """Admit `argv` by its program's profile, or raise `ToolFailed` with the reason.

    Args:
        argv: The split command line.
        profiles: Every profiled program.
        cwd: The directory the command runs in (relative paths are checked from there).
    """
    if not argv:
        raise _refuse("the command is empty")
    for token in argv:
        if ".." in PurePosixPath(token.replace("=", "/").replace(":", "/")).parts:
            raise _refuse(f"{token!r} climbs out of a directory with `..`")
    node, index = _resolve(profiles, argv)
    walk = _Walk(node, cwd)
    rest = argv[index:]
    while rest:
        walk.token(rest.pop(0), rest)
    _match(node, node.positionals, walk.operands, walk)
    if walk.after_dashdash is not None:
        _match(node, node.after_dashdash or (), walk.after_dashdash, walk)
    return ParsedCommand(path=node.path, paths=tuple(walk.paths))
