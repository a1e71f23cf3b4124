"""Runs of the benches in `bench/` as processes, each at most once per test session.

A bench's smoke run takes seconds; several test modules check its output (the generic figure
check in `tests/bench/test_bench_smoke.py`, a bench's own checks such as
`tests/bench/test_bench_hygiene.py`), so `smoke` caches each script's run for the session instead of
running it once per test.
"""

from __future__ import annotations

import functools
import math
import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"
BENCHES = sorted(path.name for path in BENCH.glob("*.py") if not path.name.startswith("_"))
"""Every bench script (`_`-prefixed modules are their shared helpers, not benches)."""
RATIO_LINE = re.compile(r"^ratio (?P<name>\S+) = (?P<value>\S+)$", re.MULTILINE)
"""The one shape a bench prints its figures in (`bench/_figures.py`)."""
TIMEOUT_S = 240
"""A smoke run takes seconds; this bounds a hung one (a few minutes on a loaded 2-core box)."""


def run_bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `bench/<script>` with `args` as a process; never raises on its exit status."""
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@functools.cache
def smoke(script: str) -> subprocess.CompletedProcess[str]:
    """`bench/<script> --smoke`, run once per session."""
    return run_bench(script, "--smoke")


def ratios(stdout: str) -> dict[str, float]:
    """The figures a bench printed, by name, as floats (`nan` and `inf` parse too)."""
    return {m["name"]: float(m["value"]) for m in RATIO_LINE.finditer(stdout)}


def finite(figures: dict[str, float]) -> bool:
    """Whether every figure is a finite number."""
    return all(math.isfinite(value) for value in figures.values())
