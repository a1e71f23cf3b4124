"""A hung async test reports where its tasks wait (tests/task_watchdog.py), run as CI runs it.

Why this way: the watchdog exists for the one failure nobody can reproduce at will, so it is
checked by a real pytest run in a child process on a test that hangs on purpose: the report
must name the hung coroutines down to the innermost await, for the test's own task and for a
task it started.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

HUNG = """
import asyncio

import pytest


async def waits_for_nobody(event):
    await event.wait()


@pytest.mark.timeout(3)
async def test_hangs():
    event = asyncio.Event()
    asyncio.get_running_loop().create_task(waits_for_nobody(event), name="the-helper")
    await waits_for_nobody(event)


def test_passes():
    pass
"""


def _line(text: str) -> int:
    """The number of HUNG's line that starts with `text`."""
    return next(n for n, line in enumerate(HUNG.splitlines(), 1) if line.startswith(text))


@pytest.mark.slow
def test_a_hung_test_prints_each_tasks_await_chain(tmp_path: Path) -> None:
    (tmp_path / "test_hung.py").write_text(HUNG)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.task_watchdog",
            "-p",
            "no:cacheprovider",
            "-c",
            str(tmp_path / "pytest.ini"),
            str(tmp_path / "test_hung.py"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "1 failed, 1 passed" in out
    report = out[out.index("is about to time out: 2 unfinished tasks") :]
    assert "-- the-helper" in report
    assert f"test_hung.py:{_line('    await waits_for_nobody')} in test_hangs" in report
    assert f"test_hung.py:{_line('    await event.wait()')} in waits_for_nobody" in report
    assert "locks.py" in report and " in wait" in report  # to the innermost frame
    assert out.count("is about to time out") == 1  # the test that passed armed no report
