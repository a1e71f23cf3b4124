"""The hygiene bench still runs (docs/reliability.md X1): `bench/hygiene.py --quick` as a process.

Why this way: the bench is a script people and `make bench` run, so the test runs it the same
way, as a subprocess, and checks its exit status and that it printed a ratio line for every
step and shape. The quick mode's bounds are loose (small sizes are noisy); the thresholds of
the issue are checked by the full run, not by a test, since no test asserts on wall-clock time.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("ordinary", "newlines", "spaces", "tabs", "lt_spaces", "base64", "indentation")


def test_the_quick_bench_exits_zero_and_prints_its_ratios() -> None:
    """X1: every step and shape gets a throughput ratio and a 10x time ratio."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "hygiene.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for step in ("redact", "frame"):
        for shape in SHAPES:
            assert any(
                line.split()[:2] == [step, shape] and "x ordinary" in line and "time(10N)" in line
                for line in lines
            ), (step, shape, done.stdout)
    assert lines[-1] == "PASS"
