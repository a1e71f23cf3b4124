"""Before pytest-timeout stops a hung async test, print where each of its tasks is waiting.

pytest-timeout prints the threads' stacks, which for an asyncio test is only the event loop
sitting in `select`: the task that hangs is not in it. So every test is watched by a timer
thread that, shortly before the test's timeout, finds the loop the test's thread runs (on its
stack) and prints each of the loop's tasks with its whole await chain (`cr_await` followed
down to the innermost frame: `Task.print_stack` shows only a task's outermost frame). The
chains are read from another thread while the loop runs, which is good enough for a diagnosis
and is never done in a test that ends in time.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import pytest

__all__ = [
    "DUMP_SHARE",
    "await_chain",
    "dump_tasks",
    "pytest_runtest_call",
    "running_loop_of",
    "watching",
]

DUMP_SHARE = 0.9
"""The dump comes at this share of the test's timeout, before pytest-timeout's own."""


def await_chain(awaitable: Any) -> list[str]:
    """`file:line in function` for each frame of `awaitable`'s chain of awaits, outermost first."""
    lines: list[str] = []
    seen = 0
    while awaitable is not None and seen < 200:
        seen += 1
        frame = (
            getattr(awaitable, "cr_frame", None)
            or getattr(awaitable, "gi_frame", None)
            or getattr(awaitable, "ag_frame", None)
        )
        if frame is not None:
            code = frame.f_code
            lines.append(f"{code.co_filename}:{frame.f_lineno} in {code.co_name}")
        elif not inspect.isawaitable(awaitable):
            break
        else:
            lines.append(repr(awaitable)[:200])  # a future or a C-level awaitable
        awaitable = (
            getattr(awaitable, "cr_await", None)
            or getattr(awaitable, "gi_yieldfrom", None)
            or getattr(awaitable, "ag_await", None)
        )
    return lines


def dump_tasks(loop: asyncio.AbstractEventLoop, out: TextIO, title: str) -> None:
    """Print every unfinished task of `loop` with its await chain."""
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError as exc:  # the set changed while it was read, again and again
        print(f"{title}: tasks not listed ({exc})", file=out)
        return
    print(f"==== {title}: {len(tasks)} unfinished tasks ====", file=out)
    for task in tasks:
        print(f"-- {task.get_name()}", file=out)
        for line in await_chain(task.get_coro()):
            print(f"   {line}", file=out)
    out.flush()


def running_loop_of(thread_id: int) -> asyncio.AbstractEventLoop | None:
    """The event loop the thread is running, found on its stack (None when it runs none)."""
    frame = sys._current_frames().get(thread_id)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, asyncio.AbstractEventLoop):
            return candidate
        frame = frame.f_back
    return None


def _dump_if_hung(thread_id: int, nodeid: str) -> None:
    loop = running_loop_of(thread_id)
    if loop is not None:
        dump_tasks(loop, sys.__stderr__ or sys.stderr, f"{nodeid} is about to time out")


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    if marker is not None and "timeout" in marker.kwargs:
        return float(marker.kwargs["timeout"])
    return float(item.config.getini("timeout") or 0)


@contextmanager
def watching(item: pytest.Item) -> Iterator[None]:
    """While the test runs, a timer armed for `DUMP_SHARE` of its timeout."""
    timeout = _timeout_of(item)
    if timeout <= 0:
        yield
        return
    timer = threading.Timer(
        timeout * DUMP_SHARE, _dump_if_hung, args=(threading.get_ident(), item.nodeid)
    )
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A hung test prints its asyncio tasks' await chains before it times out."""
    with watching(item):
        return (yield)
