"""docs/python-api.md lists exactly what `agent_core` and `cards` export.

Why this way: `bot` may import only these names (an import-linter contract), so the page is the
boundary between the packages; a name exported without a row, or a row for a name that is gone,
fails here.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest

import agent_core
import cards
from tests.paths import ROOT

DOC = ROOT / "docs" / "python-api.md"


def _listed(package: str) -> list[str]:
    text = DOC.read_text()
    start = text.index(f"## `{package}`")
    end = text.find("\n## `", start + 1)
    section = text[start : end if end != -1 else len(text)]
    return re.findall(r"^\| `(\w+)` \|", section, re.M)


@pytest.mark.parametrize("package", [agent_core, cards], ids=lambda p: p.__name__)
def test_the_page_lists_each_exported_name_once(package: ModuleType) -> None:
    listed = _listed(package.__name__)
    exported: list[str] = package.__all__
    assert sorted(listed) == sorted(exported)
    assert len(listed) == len(set(listed)), "a name listed twice"
