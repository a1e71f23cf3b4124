"""Benchmark of tool-output hygiene on hostile shapes (docs/reliability.md X1).

Run it with `.venv/bin/python bench/hygiene.py` (`--smoke`, alias `--quick`, for a run of
seconds that `make test` runs; `--help` for the modes). For each
adversarial shape (runs of newlines, spaces, tabs, `<` + spaces, one long base64 token, deep
indentation) and for ordinary SRE output of the same size (the corpus in
`tests/data/redaction/ordinary/`, repeated), it times `agent_core._redaction.redact` and
`agent_core.tools._hygiene.frame` (cap, redact, neutralise markers) at a size N and at 10 N.
Each figure is the minimum CPU time (`time.process_time`) over a few repeats, the most stable
estimate on a shared machine.

It prints, per step and shape, the throughput as a ratio to ordinary text measured in the same
run, and the time ratio of 10 N to N. The exit status is 1 unless every shape is at least 0.5x
as fast as ordinary text and every 10x ratio is at most 12x (linear time). `--smoke` uses small
sizes and checks only that the bench runs and that nothing is grossly super-linear (a 10x
ratio of at most 40x, small sizes being noisy). The figures end the output as `ratio <name> =
<number>` lines (`bench/_figures.py`); a step that took no measurable CPU time leaves its
ratios undefined, and the exit status is then 1 too.
"""

from __future__ import annotations

import argparse
import base64
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _figures import SMOKE_HELP, print_ratios, ratio, require, run  # noqa: E402

from agent_core._redaction import redact  # noqa: E402
from agent_core.tools._hygiene import frame  # noqa: E402

ORDINARY_DIR = ROOT / "tests" / "data" / "redaction" / "ordinary"


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _base64(size: int) -> str:
    raw = random.Random(1).randbytes(size)
    return base64.b64encode(raw).decode()[:size]


def _indentation(size: int) -> str:
    lines = (" " * depth + "- name: x\n" for depth in range(0, 10**9, 7))
    out: list[str] = []
    total = 0
    for line in lines:
        out.append(line)
        total += len(line)
        if total >= size:
            break
    return "".join(out)[:size]


def shapes(size: int) -> dict[str, str]:
    """Every text the bench times, each `size` characters long."""
    ordinary = "".join(p.read_text() for p in sorted(ORDINARY_DIR.iterdir()))
    return {
        "ordinary": _repeat(ordinary, size),
        "newlines": "\n" * size,
        "spaces": " " * size,
        "tabs": "\t" * size,
        "lt_spaces": _repeat("<" + " " * 63, size),
        "lt_each_space": _repeat("< ", size),
        "base64": _base64(size),
        "indentation": _indentation(size),
    }


def best_time(step: Callable[[str], object], text: str, repeats: int) -> float:
    """The least CPU time `step(text)` took over `repeats` runs."""
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        step(text)
        best = min(best, time.process_time() - start)
    require(best > 0, f"{len(text):,} characters took no measurable CPU time")
    return best


def measure(
    name: str, step: Callable[[str], object], size: int, repeats: int
) -> dict[str, tuple[float, float]]:
    """Per shape: (throughput vs ordinary, time at 10 N / time at N)."""
    small, large = shapes(size), shapes(size * 10)
    times = {shape: (best_time(step, small[shape], repeats),) for shape in small}
    results: dict[str, tuple[float, float]] = {}
    for shape, text in large.items():
        at_n = times[shape][0]
        at_10n = best_time(step, text, repeats)
        results[shape] = (at_n, at_10n)
    ordinary = results["ordinary"][1]
    return {
        shape: (
            ratio(ordinary, at_10n, name=f"{name} {shape} throughput"),
            ratio(at_10n, at_n, name=f"{name} {shape} 10N/N"),
        )
        for shape, (at_n, at_10n) in results.items()
    }


_MODES = """\
modes:
  (default)  N = 100,000 characters, min of 3 runs; exit 1 unless every shape is >= 0.5x as
             fast as ordinary text and every 10x ratio is <= 12x
  --smoke    N = 2,000, min of 2 runs (seconds); exit 1 only if a 10x ratio exceeds 40x or a
             figure cannot be produced

Every figure is a ratio to a baseline measured in the same run (ordinary text, and the same
shape at N), printed last as `ratio <name> = <number>` lines."""


def main(argv: list[str] | None = None) -> int:
    """Run the bench; 0 when every ratio is within its bound."""
    parser = argparse.ArgumentParser(
        description=(
            "Redaction and framing of tool output on hostile shapes (runs of whitespace, `<` + "
            "spaces, long base64, deep indentation): throughput against ordinary SRE output of "
            "the same size, and the time at 10 N against N (linear time)."
        ),
        epilog=_MODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", "--quick", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    return run(lambda: _bench(smoke=args.smoke))


def _bench(*, smoke: bool) -> int:
    size, repeats = (2_000, 2) if smoke else (100_000, 3)
    min_speed, max_growth = (0.0, 40.0) if smoke else (0.5, 12.0)
    steps: dict[str, Callable[[str], object]] = {
        "redact": redact,
        "frame": lambda text: frame("bench", text),
    }
    ok = True
    ratios: dict[str, float] = {}
    print(f"sizes N={size:,} and 10N={size * 10:,} characters, min of {repeats} runs")
    for step_name, step in steps.items():
        for shape, (speed, growth) in measure(step_name, step, size, repeats).items():
            good = speed >= min_speed and growth <= max_growth
            ok = ok and good
            verdict = "ok" if good else "FAIL"
            print(
                f"{step_name:6} {shape:13} throughput {speed:5.2f}x ordinary"
                f"  time(10N)/time(N) {growth:5.2f}x  {verdict}"
            )
            ratios[f"{step_name}.{shape}.throughput_vs_ordinary"] = speed
            ratios[f"{step_name}.{shape}.time_10n_vs_n"] = growth
    print_ratios(ratios)
    print("PASS" if ok else f"FAIL: need >= {min_speed}x ordinary and <= {max_growth}x for 10x")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
