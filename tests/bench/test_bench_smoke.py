"""Every bench in `bench/` still produces its figures: each runs here with `--smoke`, as a process.

Why this way: a bench is a script that `make bench` and people run, and one that stops working
rots unnoticed (`bench/runtime.py` was broken for a while by the identical-call budget, its hold
batch refused, and nothing ran it). So every `bench/*.py` the glob finds runs here the way it is
run, as a subprocess, in its smoke mode: a new bench without `--smoke` fails here. The test checks
the exit status and that the `ratio <name> = <number>` lines parse to finite numbers, never
their size: timings are the bench's own business, as ratios to a baseline of the same run, and
no test asserts on wall-clock time. The benches spawn redis-server, uvicorn and chatops
processes and take seconds each, hence the `slow` marker (`make test` runs them; `make
test-fast` does not). The figure helpers' refusals (zero or NaN baselines) are checked in
process, and one bench is run against a Redis port nothing listens on, to show that a bench
whose trial cannot run exits non-zero with no figures.
"""

from __future__ import annotations

import importlib.util
import math
from types import ModuleType

import pytest

from tests.bench_runs import BENCH, BENCHES, TIMEOUT_S, finite, ratios, run_bench, smoke
from tests.loopback import free_port


def _figures_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_figures", BENCH / "_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures = _figures_module()


def test_the_glob_finds_every_bench() -> None:
    expected = {"drain.py", "hygiene.py", "ingress.py", "load.py", "model_client.py", "runtime.py"}
    assert expected <= set(BENCHES), BENCHES


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S + 30)  # a smoke run takes seconds, a minute on a loaded machine
@pytest.mark.parametrize("script", BENCHES)
def test_every_bench_produces_finite_ratios_in_smoke_mode(script: str) -> None:
    done = smoke(script)
    assert done.returncode == 0, done.stdout + done.stderr
    found = ratios(done.stdout)
    assert found, done.stdout
    assert finite(found), found


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCHES)
def test_every_bench_says_what_it_measures_and_its_modes(script: str) -> None:
    done = run_bench(script, "--help")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--smoke" in done.stdout and "modes:" in done.stdout, done.stdout


@pytest.mark.slow
def test_a_bench_whose_trial_cannot_run_exits_non_zero_without_figures() -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # a free port: nothing listens on it
    done = run_bench("runtime.py", "--smoke", "--redis-url", nobody)
    assert done.returncode != 0, done.stdout + done.stderr
    assert ratios(done.stdout) == {}, done.stdout
    assert "ConnectionError" in done.stderr, done.stderr


@pytest.mark.parametrize("baseline", [0.0, -1.0, math.nan, math.inf])
def test_a_ratio_to_an_unusable_baseline_is_refused(baseline: float) -> None:
    with pytest.raises(figures.FigureError, match="baseline"):
        figures.ratio(1.0, baseline, name="x")


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_ratio_of_an_unusable_measurement_is_refused(value: float) -> None:
    with pytest.raises(figures.FigureError, match="measurement"):
        figures.ratio(value, 1.0, name="x")


def test_a_bench_with_no_figures_or_a_nan_figure_prints_no_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for bad in ({}, {"a": 1.0, "b": math.nan}, {"two words": 1.0}):
        with pytest.raises(figures.FigureError):
            figures.print_ratios(bad)
    assert ratios(capsys.readouterr().out) == {}


def test_a_figure_error_is_exit_status_1_with_its_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def body() -> int:
        raise figures.FigureError("stop, abortable: expected Stopped 0/1")

    assert figures.run(body) == 1
    assert "stop, abortable: expected Stopped 0/1" in capsys.readouterr().err


def test_the_printed_ratios_parse_back() -> None:
    printed = "ratio a.b = 0.5\nratio c_vs_d = 12.11\nnoise ratio x = 1\n"
    assert ratios(printed) == {"a.b": 0.5, "c_vs_d": 12.11}


@pytest.mark.slow
def test_the_runtime_bench_runs_every_case() -> None:
    done = smoke("runtime.py")
    assert done.returncode == 0, done.stdout + done.stderr
    for case in ("no signal", "steer, abortable", "stop, must-complete"):
        assert case in done.stdout, done.stdout
    assert "Completed 1/1" in done.stdout and "Stopped 1/1" in done.stdout, done.stdout
    names = ratios(done.stdout)
    for case in ("steer_abortable", "steer_must_complete", "stop_abortable", "stop_must_complete"):
        assert f"cut.{case}.vs_batch" in names, names
    assert "probes_per_turn.long_vs_short" in names, names


@pytest.mark.slow
def test_the_ingress_bench_acknowledges_and_writes_every_event() -> None:
    done = smoke("ingress.py")
    assert done.returncode == 0, done.stdout + done.stderr
    paths = ("start", "steer", "stop", "press")
    assert all(f"{path}/bare = " in done.stdout for path in paths), done.stdout
    assert "checked: every answer was 200" in done.stdout, done.stdout
    wanted = {f"{path}_vs_bare.requests_per_s" for path in (*paths, "bolt")}
    assert wanted <= set(ratios(done.stdout))


@pytest.mark.slow
def test_the_drain_bench_drains_each_analysis_once() -> None:
    done = smoke("drain.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "checked: every analysis drained once, completed once, on one card" in done.stdout
    assert {"drain_vs_longest_tool", "idle_exit_vs_sleeping_python"} <= set(ratios(done.stdout))
