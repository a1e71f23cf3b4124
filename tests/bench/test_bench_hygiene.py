"""The hygiene bench still runs (docs/reliability.md X1): `bench/hygiene.py --smoke` as a process.

Why this way: the bench is a script people and `make bench` run, so the test runs it the same
way, as a subprocess (once per session, shared with `tests/bench/test_bench_smoke.py`), and checks
its exit status and that it printed a ratio line for every step and shape. The smoke mode's bounds
are loose (small sizes are noisy); the thresholds of the issue are checked by the full run, not
by a test, since no test asserts on wall-clock time. It carries no `slow` marker: the bench is one
process that takes seconds, so `make test-fast` keeps the X1 check.
"""

from __future__ import annotations

import pytest

from tests.bench_runs import TIMEOUT_S, finite, ratios, smoke

SHAPES = ("ordinary", "newlines", "spaces", "tabs", "lt_spaces", "base64", "indentation")


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_the_quick_bench_exits_zero_and_prints_its_ratios() -> None:
    """X1: every step and shape gets a throughput ratio and a 10x time ratio."""
    done = smoke("hygiene.py")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for step in ("redact", "frame"):
        for shape in SHAPES:
            assert any(
                line.split()[:2] == [step, shape] and "x ordinary" in line and "time(10N)" in line
                for line in lines
            ), (step, shape, done.stdout)
    figures = ratios(done.stdout)
    for step in ("redact", "frame"):
        for shape in SHAPES:
            assert f"{step}.{shape}.throughput_vs_ordinary" in figures, figures
            assert f"{step}.{shape}.time_10n_vs_n" in figures, figures
    assert finite(figures), figures
    assert lines[-1] == "PASS"
