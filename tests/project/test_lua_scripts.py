"""Every Redis script is a `.lua` file the loader finds, loads in Redis, and keeps to one slot.

Why this way: a script's syntax is checked by the only parser that matters, the real
redis-server (`SCRIPT LOAD` compiles without running), so a typo fails here rather than on the
first webhook. The slot check builds each script's declared keys (its `--! keys:` header) with
the real key builders for a sample session and asks redis-py's own `key_slot`, the function a
cluster client routes by: every key of a deployment is in one slot, so every script is. And the
sources are read with `ast`, so a Lua script written back into a Python string fails too.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import pkgutil
import re

import pytest
import redis.asyncio as aioredis
from redis.crc import key_slot

import agent_core
import bot
from agent_core import TURN_KEY_TTL_S
from agent_core._lua import directives, load_script, names
from bot.intake.queue import _submit_values
from bot.keys import BotKeys
from tests.paths import ROOT

SOURCES = ("agent_core", "bot")


SAMPLE_ARGS = {
    "session_id": "sample-session",
    "turn_id": "sample-turn",
    "platform": "slack",
    "event_id": "Ev1",
    "channel": "C1",
    "message_id": "m1",
    "nonce": "n1",
    "name": "settles",
    "incident": "sample-incident",
    "route": "sample-route",
    "digest": "sample-digest",
    "alert_name": "SampleAlert",
}
"""The arguments a key builder is called with in the check, by parameter name."""


def _packages() -> list[str]:
    found = [agent_core.__name__, bot.__name__]
    for root in (agent_core, bot):
        for info in pkgutil.walk_packages(root.__path__, prefix=f"{root.__name__}."):
            if info.ispkg:
                found.append(info.name)
    return sorted(found)


def _scripts() -> list[tuple[str, str]]:
    return [(package, name) for package in _packages() for name in names(package)]


SCRIPTS = _scripts()
PRELUDES = {"fence"}
"""Shared preludes in `agent_core/_lua/`: prepended by the loader, not scripts of their own."""


def _id(package: str, name: str) -> str:
    return f"{package}:{name}"


def _runnable() -> list[tuple[str, str]]:
    return [(p, n) for p, n in SCRIPTS if not (p == "agent_core" and n in PRELUDES)]


REAL_VALUES: dict[str, dict[str, object]] = {
    "bot.intake:queue_submit": _submit_values(),
    "bot.control:subagents_move": {"INBOX_TTL": TURN_KEY_TTL_S},
}
"""The placeholder values the owning modules pass (the loader refuses any other set)."""


def _text(package: str, name: str) -> str:
    """The script as Redis gets it, with the values its owner passes."""
    return load_script(package, name, **REAL_VALUES.get(_id(package, name), {}))


def _key(spec: str, keys: BotKeys) -> str:
    """One `--! keys:` entry built by the real builder.

    `name` (a `BotKeys` member), `session.name` (a `Keys` member), `name(arg)` (called with a
    literal), `name@parent` (built for another session: a sub-agent's parent), `"literal"`.
    """
    if spec.startswith('"'):
        return spec.strip('"')
    match = re.fullmatch(r"([a-z_.]+)(?:\(([^)]*)\))?(@parent)?", spec)
    assert match, f"unreadable key spec {spec!r}"
    owner: object = keys
    path, literal = match.group(1), match.group(2)
    args = dict(SAMPLE_ARGS, session_id="parent-session") if match.group(3) else SAMPLE_ARGS
    *parents, attr = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    built = getattr(owner, attr)
    if isinstance(built, str):
        return built
    if literal is not None:
        return str(built(literal))
    params = inspect.signature(built).parameters
    return str(built(*(args[param] for param in params)))


def test_the_loader_finds_every_lua_file() -> None:
    on_disk = {
        _id(".".join(path.parent.parent.relative_to(ROOT).parts), path.stem)
        for source in SOURCES
        for path in (ROOT / source).rglob("*.lua")
    }
    assert {_id(p, n) for p, n in SCRIPTS} == on_disk
    assert len(_runnable()) == 28


def _lua_strings(path: pathlib.Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and "redis.call" in node.value
    ]


def test_no_python_source_holds_a_lua_script() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for source in SOURCES
        for path in sorted((ROOT / source).rglob("*.py"))
        if (lines := _lua_strings(path))
    }
    assert found == {}


def test_the_source_check_sees_a_script_in_a_string(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('S = """\nreturn redis.call(\'GET\', KEYS[1])\n"""\n')
    assert _lua_strings(module) == [1]


@pytest.mark.parametrize(("package", "name"), _runnable(), ids=lambda v: str(v))
async def test_redis_compiles_the_script(
    redis_client: aioredis.Redis, package: str, name: str
) -> None:
    text = _text(package, name)
    sha = await redis_client.script_load(text)
    assert await redis_client.script_exists(sha) == [True]


@pytest.mark.parametrize(("package", "name"), _runnable(), ids=lambda v: str(v))
def test_a_script_that_checks_the_fence_uses_the_prelude(package: str, name: str) -> None:
    raw = (ROOT / package.replace(".", "/") / "lua" / f"{name}.lua").read_text()
    uses = directives(package, name).get("uses", "").split()
    assert ("fenced(" in raw) == ("fence" in uses)
    assert "held, 1, string.len" not in raw  # the fence test lives in the prelude only
    assert "string.match(held, '^(%d+)|')" not in raw


def _slots(package: str, name: str) -> set[int]:
    declared = directives(package, name).get("keys", "")
    assert declared, f"{package}:{name} declares no keys"
    return {key_slot(_key(spec, BotKeys()).encode()) for spec in declared.split()}


def test_every_script_keeps_to_one_slot() -> None:
    """A Redis Cluster runs a script only when all its keys hash to one slot."""
    spanning = {_id(p, n): _slots(p, n) for p, n in _runnable() if len(_slots(p, n)) > 1}
    assert spanning == {}


def _every_key(keys: BotKeys) -> dict[str, str]:
    """Every name `BotKeys` and its `Keys` build, by builder, for the sample arguments."""
    built: dict[str, str] = {}
    for owner, label in ((keys, ""), (keys.session, "session.")):
        for attr in dir(type(owner)):
            if attr.startswith("_") or attr in {"prefix", "session", "root", "key"}:
                continue
            if attr in {"turns_group", "alerts_group"}:
                continue  # consumer group names, not keys
            built[label + attr] = _key(label + attr, keys)
    return built


def test_every_key_of_a_deployment_is_in_one_slot() -> None:
    built = _every_key(BotKeys())
    assert len(built) > 50
    assert {name: key for name, key in built.items() if not key.startswith("{chatops}:")} == {}
    assert len({key_slot(key.encode()) for key in built.values()}) == 1
    other = _every_key(BotKeys(prefix="other", session=agent_core.Keys(prefix="other")))
    assert len({key_slot(key.encode()) for key in other.values()}) == 1
    assert key_slot(b"{other}") != key_slot(b"{chatops}")  # two deployments, two slots


def test_the_slot_check_sees_a_key_without_the_tag() -> None:
    keys = BotKeys()
    slots = {key_slot(k.encode()) for k in (keys.turns_stream, "chatops:turns")}
    assert len(slots) == 2


def test_the_slot_check_tells_slots_apart() -> None:
    keys = BotKeys()
    assert key_slot(_key("live_turn", keys).encode()) == key_slot(
        _key("session.history@parent", keys).encode()
    )
    assert key_slot(_key('"chatops:elsewhere"', keys).encode()) != key_slot(
        _key("turns_stream", keys).encode()
    )
