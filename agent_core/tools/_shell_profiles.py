"""Shell profiles: for each program the `shell` tool may run, its grammar (X7, X8).

Contract: a profile is a tree of commands. Each node names the flags it admits, each with a
value shape (`none`, `enum` of choices, or one of `shell_shapes.SHAPES`), the shapes of its
operands (`positionals`, each `shape`, `shape?`, `shape*` or `shape+`), what may follow `--`
(`after_dashdash`; absent: `--` is refused) and its `subcommands`; a node's flags are inherited
by its subcommands, and a node with subcommands runs only through one of them unless it says
`runnable = true`. Profiles are TOML (the shipped ones in `shell_profiles.toml`, an operator's in
the file `CHATOPS_SHELL_PROFILES_FILE` names; an operator's profile of a program replaces the
shipped one):

    [programs.kubectl.flags]
    "-n|--namespace" = "name"
    [programs.kubectl.subcommands.get]
    flags = { "-o|--output" = { shape = "enum", choices = ["wide", "yaml"] } }
    positionals = ["resource", "name*"]

Loading checks everything once, and any fault is a `ConfigError` naming the profile: an
unknown key or shape, a flag not spelled `-x` or `--long-name`, an optional value on a short
flag, an operand list whose repeat is not last, a program that runs programs
(`UNPROFILABLE`), and any flag `shell_never_admit` lists or that abbreviates one.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from agent_core._errors import ConfigError
from agent_core.tools._shell_never_admit import UNPROFILABLE, check_flag
from agent_core.tools._shell_shapes import SHAPES, path_reason, rev_reason

__all__ = ["Node", "Operand", "ShellProfiles", "ValueSpec"]

_MAX_FILE_BYTES = 1_048_576
"""An operator's profile file is read up to this size (a larger one is a mistake)."""
_FLAG = re.compile(r"-[A-Za-z0-9]|--[A-Za-z0-9][A-Za-z0-9-]{0,63}")
_PROGRAM = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
_SUBCOMMAND = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_NODE_KEYS = frozenset({"flags", "positionals", "after_dashdash", "subcommands", "runnable"})
_ARITIES = ("?", "*", "+")


@dataclass(frozen=True, kw_only=True)
class ValueSpec:
    """What a flag's value (or an operand) must look like."""

    shape: str
    """`none` (a flag without a value), `enum`, or a name in `shell_shapes.SHAPES`."""
    choices: tuple[str, ...] = ()
    """The admitted values of an `enum`."""
    optional: bool = False
    """The value may only be attached (`--flag=value`); a bare `--flag` takes none."""

    @property
    def takes_value(self) -> bool:
        """True unless the flag is a switch."""
        return self.shape != "none"

    def check(self, token: str, cwd: str | None) -> str | None:
        """None when `token` fits, else why not."""
        if self.shape == "enum":
            return None if token in self.choices else f"not one of {', '.join(self.choices)}"
        if self.shape == "path":
            return SHAPES["path"](token) or path_reason(token, cwd)
        if self.shape == "rev":
            return SHAPES["rev"](token) or rev_reason(token, cwd)
        return SHAPES[self.shape](token)


@dataclass(frozen=True, kw_only=True)
class Operand:
    """One operand slot: its shape and how many tokens it takes."""

    value: ValueSpec
    arity: str
    """`1` (exactly one), `?` (at most one), `*` (any number) or `+` (at least one)."""

    def describe(self) -> str:
        """The slot as written in a profile (`name*`), for messages."""
        return self.value.shape + ("" if self.arity == "1" else self.arity)


@dataclass(frozen=True, kw_only=True)
class Node:
    """A program or subcommand: the flags it admits and the operands it takes."""

    path: tuple[str, ...]
    """The program and subcommands leading here (`("kubectl", "top", "pod")`)."""
    flags: Mapping[str, ValueSpec]
    """Every admitted spelling, its own and its ancestors'."""
    positionals: tuple[Operand, ...] = ()
    after_dashdash: tuple[Operand, ...] | None = None
    """Operands after `--`; None: `--` is refused."""
    subcommands: Mapping[str, Node] = field(default_factory=dict)
    """Each spelling (aliases too) → the same subcommand node."""
    runnable: bool = True

    @property
    def name(self) -> str:
        """The command as typed (`kubectl top pod`)."""
        return " ".join(self.path)


def _spec(raw: Any, where: str) -> ValueSpec:
    if isinstance(raw, str):
        raw = {"shape": raw}
    if not isinstance(raw, dict) or set(raw) - {"shape", "choices", "optional", "arity"}:
        raise ConfigError(f"{where}: a value is a shape name or {{shape, choices, optional}}")
    shape = raw.get("shape")
    choices = raw.get("choices", [])
    if shape not in {"none", "enum", *SHAPES}:
        raise ConfigError(
            f"{where}: unknown shape {shape!r} (known: none, enum, {', '.join(SHAPES)})"
        )
    if (shape == "enum") != bool(choices) or not all(isinstance(c, str) for c in choices):
        raise ConfigError(f"{where}: `choices` (strings) goes with shape `enum`, and only there")
    return ValueSpec(shape=shape, choices=tuple(choices), optional=bool(raw.get("optional")))


def _operands(raw: Any, where: str) -> tuple[Operand, ...]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: operands are a list")
    out: list[Operand] = []
    for item in raw:
        if isinstance(item, str):
            arity = item[-1] if item.endswith(_ARITIES) else "1"
            spec = _spec(item.rstrip("".join(_ARITIES)), where)
        elif isinstance(item, dict):
            arity = item.get("arity", "1")
            spec = _spec({k: v for k, v in item.items() if k != "arity"}, where)
        else:
            raise ConfigError(f"{where}: an operand is a shape name or a table")
        if spec.shape == "none" or arity not in {"1", *_ARITIES}:
            raise ConfigError(f"{where}: an operand needs a shape and an arity of 1, ?, * or +")
        out.append(Operand(value=spec, arity=arity))
    arities = [o.arity for o in out]
    for i, arity in enumerate(arities):
        if (arity in "*+" and i != len(arities) - 1) or (arity in "1+" and "?" in arities[:i]):
            raise ConfigError(
                f"{where}: only the last operand repeats, and none is required after an "
                "optional one"
            )
    return tuple(out)


def _flags(program: str, raw: Any, where: str) -> dict[str, ValueSpec]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: `flags` is a table of spelling → shape")
    out: dict[str, ValueSpec] = {}
    for key, value in raw.items():
        spec = _spec(value, f"{where} flag {key!r}")
        for spelling in key.split("|"):
            if not _FLAG.fullmatch(spelling):
                raise ConfigError(f"{where}: {spelling!r} is not spelled `-x` or `--long-name`")
            if why := check_flag(program, spelling):
                raise ConfigError(f"{where}: `{spelling}` {why}; it is never admitted")
            if spec.optional and not spelling.startswith("--"):
                raise ConfigError(f"{where}: `{spelling}`: only long flags take optional values")
            out[spelling] = spec
    return out


def _node(path: tuple[str, ...], raw: Any, inherited: Mapping[str, ValueSpec], source: str) -> Node:
    where = f"shell profile `{' '.join(path)}` ({source})"
    if not isinstance(raw, dict) or set(raw) - _NODE_KEYS:
        unknown = sorted(set(raw) - _NODE_KEYS) if isinstance(raw, dict) else raw
        raise ConfigError(
            f"{where}: unknown keys {unknown} (known: {', '.join(sorted(_NODE_KEYS))})"
        )
    flags = {**inherited, **_flags(path[0], raw.get("flags", {}), where)}
    subs: dict[str, Node] = {}
    for key, sub in raw.get("subcommands", {}).items():
        spellings = key.split("|")
        if not all(_SUBCOMMAND.fullmatch(s) for s in spellings):
            raise ConfigError(f"{where}: subcommand {key!r} is not a plain word")
        child = _node((*path, spellings[0]), sub, flags, source)
        subs.update(dict.fromkeys(spellings, child))
    dashdash = raw.get("after_dashdash")
    return Node(
        path=path,
        flags=flags,
        positionals=_operands(raw.get("positionals", []), where),
        after_dashdash=None if dashdash is None else _operands(dashdash, where),
        subcommands=subs,
        runnable=bool(raw.get("runnable", not subs)),
    )


def _program(name: str, raw: Any, source: str) -> Node:
    if not _PROGRAM.fullmatch(name):
        raise ConfigError(f"shell profile {name!r} ({source}): a program is a bare name, no path")
    if name in UNPROFILABLE:
        raise ConfigError(f"shell profile `{name}` ({source}): `{name}` {UNPROFILABLE[name]}")
    return _node((name,), raw, {}, source)


@dataclass(frozen=True)
class ShellProfiles:
    """Every profiled program, by name."""

    programs: Mapping[str, Node]

    @classmethod
    def parse(cls, text: str, source: str) -> ShellProfiles:
        """Read profiles from TOML text.

        Raises:
            ConfigError: The text is not TOML, or a profile breaks a rule of the module docstring.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"shell profiles ({source}): not TOML: {exc}") from exc
        if set(data) - {"programs"} or not isinstance(data.get("programs", {}), dict):
            raise ConfigError(f"shell profiles ({source}): the one top-level table is `programs`")
        programs = data.get("programs", {})
        return cls({name: _program(name, raw, source) for name, raw in programs.items()})

    @classmethod
    def shipped(cls) -> ShellProfiles:
        """The profiles shipped with chatops (`agent_core/tools/shell_profiles.toml`)."""
        text = resources.files(__package__).joinpath("shell_profiles.toml").read_text("utf-8")
        return cls.parse(text, "shipped")

    @classmethod
    def load(cls, path: str | None) -> ShellProfiles:
        """The shipped profiles, with an operator's file's profiles replacing or adding programs.

        Raises:
            ConfigError: The file cannot be read, is too large, or holds an invalid profile.
        """
        shipped = cls.shipped()
        if not path:
            return shipped
        try:
            with Path(path).open("rb") as handle:
                raw = handle.read(_MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"shell profiles file {path}: {exc.strerror or exc}") from exc
        if len(raw) > _MAX_FILE_BYTES:
            raise ConfigError(f"shell profiles file {path}: larger than {_MAX_FILE_BYTES} bytes")
        operator = cls.parse(raw.decode("utf-8", errors="replace"), path)
        return cls({**shipped.programs, **operator.programs})
