"""Where things are, for tests in any folder: the repository and the tests' own root."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""`tests/`: its support modules, `fakes/` and `data/`."""
ROOT = TESTS.parent
"""The repository."""
