"""The runtime, ingress and drain benches still run, in their quick modes, as processes.

Why this way: a bench is a script that `make bench` and people run, and one that stops working
rots unnoticed (`bench/runtime.py` was broken for a while by the identical-call budget). So each
runs here the way it is run, as a subprocess, in its smallest mode; the test checks its exit
status and the self-checks it prints, never its timings (those are the bench's own business,
as ratios against a baseline measured in the same run).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parent.parent / "bench"


def run_bench(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_runtime_bench_runs_every_case() -> None:
    out = run_bench("runtime.py", "--quick")
    for case in ("no signal", "steer, abortable", "stop, must-complete"):
        assert case in out, out
    assert "Completed 3/3" in out and "Stopped 3/3" in out, out


def test_the_ingress_bench_acknowledges_and_writes_every_event() -> None:
    out = run_bench("ingress.py", "--quick", "--no-bolt")
    assert "ours/bare = " in out, out
    assert "checked: every answer was 200" in out, out


def test_the_drain_bench_drains_each_analysis_once() -> None:
    out = run_bench("drain.py", "--turns", "4", "--tool-s", "0.5", "--idle-rounds", "2")
    assert "checked: every analysis drained once, completed once, on one card" in out, out
