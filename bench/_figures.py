"""The figures every bench ends with: ratios to a baseline measured in the same run.

Contract: a bench computes each figure with `ratio(value, baseline)`, which raises `FigureError`
when the figure cannot be produced (a baseline that is zero, negative, NaN or infinite, or a
value that is not a finite number), and prints them with `print_ratios`, one line each, in the
one shape `tests/bench/test_bench_smoke.py` parses:

    ratio <name> = <number>

`run` wraps a bench's body: a `FigureError` ends the process with a one-line reason on stderr
and exit status 1, never a table with a hole in it and exit status 0. Any other failure (an
exception, a trial that timed out) propagates and ends it with its traceback and exit status 1.
Nothing here judges the size of a figure; a bench that has a goal says so itself.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping

SMOKE_HELP = "a run of seconds that checks every figure can be produced (`make test` runs it)"
"""The `--smoke` flag's help, the same in every bench."""


class FigureError(Exception):
    """A figure of the bench could not be produced (a failed trial, an unusable baseline)."""


def ratio(value: float, baseline: float, *, name: str = "ratio") -> float:
    """`value / baseline`, or `FigureError` when that is not a finite number.

    Args:
        value: The measurement.
        baseline: What it is compared with, measured in the same run; must be finite and > 0.
        name: The figure, for the error message.

    Raises:
        FigureError: The baseline is not a finite positive number, or the value is not finite.
    """
    if not math.isfinite(baseline) or baseline <= 0:
        raise FigureError(f"{name}: the baseline is {baseline!r}, not a positive number")
    if not math.isfinite(value):
        raise FigureError(f"{name}: the measurement is {value!r}")
    return value / baseline


def require(condition: bool, reason: str) -> None:
    """Raise `FigureError(reason)` unless `condition` holds (a trial that did not do its job)."""
    if not condition:
        raise FigureError(reason)


def print_ratios(ratios: Mapping[str, float]) -> None:
    """Print one `ratio <name> = <number>` line per figure, after checking each is finite.

    Raises:
        FigureError: A figure is not a finite number, or there is none.
    """
    require(bool(ratios), "the bench produced no figure")
    for name, value in ratios.items():
        require(" " not in name, f"figure name {name!r} has a space")
        require(math.isfinite(value), f"{name}: the figure is {value!r}")
    print("ratios, each against a baseline measured in this run:", flush=True)
    for name, value in ratios.items():
        print(f"ratio {name} = {value:.4g}", flush=True)


def run(body: Callable[[], int]) -> int:
    """Run a bench's body; a `FigureError` becomes exit status 1 with its reason on stderr."""
    try:
        return body()
    except FigureError as exc:
        print(f"FAILED: a figure cannot be produced: {exc}", file=sys.stderr, flush=True)
        return 1
