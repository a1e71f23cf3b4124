"""The Lua scripts' loader: every Redis script is a `.lua` file, read from its package.

Contract: a package's scripts live in its `lua/` folder (`bot/state/lua/lease_renew.lua` is the
`lease_renew` script of `bot.state`), named `<owning module>_<what it does>.lua`, and are
shipped as package data. `load_script(package, name, **values)` returns the text Redis runs,
and `register_lua(redis, package, name, **values)` registers it (redis-py's `EVALSHA`, with
`EVAL` when the server does not know it yet):

- Directives are comment lines of the form `--! name: value` at the top of the file.
  `--! uses: fence` prepends the shared prelude `agent_core/_lua/fence.lua` (the lease fence,
  defined once for every script). `--! keys:` names the key builders whose keys the script is
  called with, in KEYS order; the loader does not read it, the scripts' test does (every key
  of a script in one hash slot, as a Redis Cluster requires).
- `@NAME@` placeholders are replaced by the `values` given, which the caller takes from their
  single definition (key suffixes from `agent_core._keys`/`bot.keys`, TTL constants). A value
  left unused, or a placeholder left unfilled, is an error, so a script and its caller cannot
  drift apart silently.

A file is read when a component first registers its script (in its constructor, never at
import time), and once per process.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

import redis.asyncio as aioredis
from redis.commands.core import AsyncScript

__all__ = ["directives", "load_script", "names", "register_lua"]

_FOLDER = "lua"
_PRELUDES = "agent_core"
"""The package whose `lua/` folder holds the preludes that `--! uses:` names."""
_DIRECTIVE = re.compile(r"^--!\s*([a-z-]+):\s*(.*?)\s*$")
_PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


@cache
def _source(package: str, name: str) -> str:
    return resources.files(package).joinpath(_FOLDER, f"{name}.lua").read_text(encoding="utf-8")


def names(package: str) -> list[str]:
    """The scripts of `package` (its `lua/*.lua` files, without the suffix), sorted."""
    folder = resources.files(package).joinpath(_FOLDER)
    if not folder.is_dir():
        return []
    found = (item.name for item in folder.iterdir() if item.name.endswith(".lua"))
    return sorted(entry.removesuffix(".lua") for entry in found)


def directives(package: str, name: str) -> dict[str, str]:
    """The `--! name: value` lines at the top of a script (before its first other line)."""
    found: dict[str, str] = {}
    for line in _source(package, name).splitlines():
        if not line.startswith("--"):
            break
        match = _DIRECTIVE.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def load_script(package: str, name: str, **values: object) -> str:
    """The text of script `name` of `package`, its preludes prepended, its placeholders filled.

    Raises:
        ValueError: A placeholder has no value, a value has no placeholder, or a value could
            end the Lua string it is written into.
    """
    text = _source(package, name)
    uses = directives(package, name).get("uses", "")
    preludes = [_source(_PRELUDES, prelude) for prelude in uses.split()]
    wanted = set(_PLACEHOLDER.findall(text))
    if wanted != set(values):
        raise ValueError(
            f"{package}:{name}: placeholders {sorted(wanted)} but values {sorted(values)}"
        )
    for key, value in values.items():
        rendered = str(value)
        if any(char in rendered for char in "'\"\\\n"):
            raise ValueError(f"{package}:{name}: value of {key} is not a plain string")
        text = text.replace(f"@{key}@", rendered)
    return "".join([*preludes, text])


def register_lua(redis: aioredis.Redis, package: str, name: str, **values: object) -> AsyncScript:
    """Register script `name` of `package` (see `load_script`) with a client."""
    return redis.register_script(load_script(package, name, **values))
