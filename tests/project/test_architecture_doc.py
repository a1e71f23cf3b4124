r"""docs/architecture.md answers, for every folder, what it owns and what it may import.

The page has one section per folder (a `## \`folder/\`` heading), a "May import" line, and one
table row per module, named relative to the folder. This test keeps the page true as modules
come and go: a module with no row fails, and so does a row naming a module that does not exist.
"""

from __future__ import annotations

import re
import tomllib

from tests.paths import ROOT

DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("agent_core", "cards", "bot")

_HEADING = re.compile(r"^## `([\w/]+/)`", re.M)
_ROW = re.compile(r"^\| `([\w/.]+\.py)` \|", re.M)


def _sections() -> dict[str, str]:
    """Each folder's section of the page, by folder (`bot/intake/`)."""
    text = DOC.read_text()
    marks = list(_HEADING.finditer(text))
    ends = [m.start() for m in marks[1:]] + [len(text)]
    return {m.group(1): text[m.end() : end] for m, end in zip(marks, ends, strict=True)}


def _documented() -> set[str]:
    """Every module the page has a row for, as a path from the repository root."""
    return {folder + row for folder, body in _sections().items() for row in _ROW.findall(body)}


def _modules() -> set[str]:
    """Every module of the three packages, `__init__.py` aside."""
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py"
    }


def test_every_module_has_a_row_in_its_folders_section() -> None:
    missing = sorted(_modules() - _documented())
    assert missing == [], f"modules with no row in docs/architecture.md: {missing}"


def test_every_row_names_a_module_that_exists() -> None:
    stale = sorted(_documented() - _modules())
    assert stale == [], f"rows in docs/architecture.md for modules that do not exist: {stale}"


def test_every_folder_says_what_it_may_import() -> None:
    silent = [folder for folder, body in _sections().items() if "**May import:**" not in body]
    assert silent == [], f"sections with no 'May import' line: {silent}"


def test_every_layer_of_the_contract_has_a_section() -> None:
    """The folders of the layers contract in pyproject.toml are the folders the page describes."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    named = {m.strip() for layer in layers for m in layer.split("|")}
    folders = {m for m in named if (ROOT / m.replace(".", "/")).is_dir()}
    assert folders, "the layers contract names no folder"
    undocumented = sorted(f for f in folders if f.replace(".", "/") + "/" not in _sections())
    assert undocumented == [], f"layers with no section in docs/architecture.md: {undocumented}"
