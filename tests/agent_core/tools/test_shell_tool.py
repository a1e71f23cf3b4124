"""The built-in `shell` tool running real programs (X4, docs/reliability.md A3).

Why this way: the refusals have their own table (`test_shell_grammar.py`); here the programs
are real ones on this machine (`cat`, `df` and `uptime` by their shipped profiles, `yes` through an
operator profile written in the test), because what is checked is what a real child does: its
output read in bytes and cut while it streams (X4), its process group killed on truncation,
timeout and cancellation, and its environment. Process deaths are observed through pidfds (an
event, not a sleep loop).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import stat
from pathlib import Path

import pytest

from agent_core._errors import ToolFailed
from agent_core.tools._base import Tool
from agent_core.tools._shell import (
    MAX_OUTPUT_BYTES,
    SAFE_PATH,
    CommandAllowlist,
    ShellProfiles,
    shell_tool,
)
from tests.tool_context import Ctx

TEST_PROFILES = """
[programs.yes]
positionals = ["name?"]
[programs.printenv]
[programs.napper]
[programs.flooder]
"""


@pytest.fixture
def profiles(tmp_path: Path) -> ShellProfiles:
    """The shipped profiles plus the test's programs, loaded as an operator's file is."""
    path = tmp_path / "profiles.toml"
    path.write_text(TEST_PROFILES)
    return ShellProfiles.load(str(path))


def tool_for(profiles: ShellProfiles, enabled: str, **kwargs: object) -> Tool:
    return shell_tool(CommandAllowlist.parse(enabled, profiles), **kwargs)  # type: ignore[arg-type]


async def test_allowed_real_commands_run_and_report_exit_status(
    tmp_path: Path, profiles: ShellProfiles
) -> None:
    """A3: real programs run through their profiles and report their exit status."""
    (tmp_path / "notes.txt").write_text("disk ok\n")
    tool = tool_for(profiles, f"df,uptime,cat {tmp_path}")
    assert "Filesystem" in await tool.handler({"command": "df -h"}, Ctx())
    assert (await tool.handler({"command": "uptime"}, Ctx())).startswith("exit 0\n")
    notes = await tool.handler({"command": f"cat {tmp_path}/notes.txt"}, Ctx())
    assert notes == "exit 0\ndisk ok\n"
    missing = await tool.handler({"command": f"cat {tmp_path}/missing"}, Ctx())
    assert missing.startswith("exit 1\ncat: ") and "No such file" in missing


async def test_x4_a_big_file_is_cut_at_the_byte_limit(
    tmp_path: Path, profiles: ShellProfiles
) -> None:
    """X4: `cat` of a file past the limit returns exactly the limit, and says it truncated."""
    (tmp_path / "big.log").write_bytes(b"x" * 50_000)
    tool = tool_for(profiles, "cat", max_output_bytes=1_000)
    out = await tool.handler({"command": f"cat {tmp_path}/big.log"}, Ctx())
    assert out == (
        "stopped: output passed 1000 bytes\n"
        + "x" * 1_000
        + "\n… [truncated at 1000 bytes; the command was killed]"
    )


async def test_x4_output_of_exactly_the_limit_is_whole(
    tmp_path: Path, profiles: ShellProfiles
) -> None:
    """X4: the limit itself is not a truncation (one byte more is)."""
    (tmp_path / "edge.log").write_bytes(b"y" * 1_000)
    tool = tool_for(profiles, "cat", max_output_bytes=1_000)
    assert await tool.handler({"command": f"cat {tmp_path}/edge.log"}, Ctx()) == (
        "exit 0\n" + "y" * 1_000
    )


async def test_x4_the_limit_counts_bytes_and_never_splits_a_character(
    tmp_path: Path, profiles: ShellProfiles
) -> None:
    """X4: 2-byte characters cut at an odd byte count: the half character is dropped."""
    (tmp_path / "utf8.log").write_text("é" * 5_000, encoding="utf-8")
    (tmp_path / "bad.log").write_bytes(b"ok \xff\xfe end\n")
    tool = tool_for(profiles, "cat", max_output_bytes=1_001)
    out = await tool.handler({"command": f"cat {tmp_path}/utf8.log"}, Ctx())
    body = out.split("\n")[1]
    assert body == "é" * 500 and "\ufffd" not in out
    bad = await tool.handler({"command": f"cat {tmp_path}/bad.log"}, Ctx())
    assert bad == "exit 0\nok \ufffd\ufffd end\n"  # invalid bytes are replaced, not fatal


async def test_x4_an_endless_printer_is_stopped_at_the_limit_not_the_timeout(
    profiles: ShellProfiles,
) -> None:
    """X4: `yes` never ends; the cap stops it long before the timeout would."""
    tool = tool_for(profiles, "yes", max_output_bytes=MAX_OUTPUT_BYTES, timeout_s=60)
    out = await tool.handler({"command": "yes chatops"}, Ctx())
    head, *lines = out.split("\n")
    assert head == f"stopped: output passed {MAX_OUTPUT_BYTES} bytes"
    assert lines[-1] == f"… [truncated at {MAX_OUTPUT_BYTES} bytes; the command was killed]"
    kept = "\n".join(lines[:-1])
    assert len(kept.encode()) == MAX_OUTPUT_BYTES and set(lines[:-2]) == {"chatops"}


async def test_environment_does_not_leak(
    monkeypatch: pytest.MonkeyPatch, profiles: ShellProfiles
) -> None:
    """A3: the child sees PATH and what the caller passes, nothing of the bot's environment."""
    monkeypatch.setenv("CHATOPS_SHELL_SENTINEL", "secret-value")
    tool = tool_for(profiles, "printenv", env={"KUBECONFIG": "/etc/kube/config"})
    out = await tool.handler({"command": "printenv"}, Ctx())
    assert "CHATOPS_SHELL_SENTINEL" not in out and "secret-value" not in out
    assert sorted(out.splitlines()[1:]) == ["KUBECONFIG=/etc/kube/config", f"PATH={SAFE_PATH}"]


def test_tool_shape(profiles: ShellProfiles) -> None:
    tool = tool_for(profiles, " kubectl get , df ", timeout_s=3)
    assert tool.name == "shell" and tool.interruptible
    assert tool.timeout_s > 3  # our own timeout message wins over the batch's
    assert tool.parameters["required"] == ["command"]
    assert "Enabled commands: kubectl get, df." in tool.description


# -- killing: a fake program that backgrounds a grandchild and reports both pids on a FIFO.


@pytest.fixture
def nap_bin(tmp_path: Path) -> Path:
    """A `napper` program: backgrounds `sleep 30`, writes both pids to `tmp_path/pids`, waits."""
    bin_dir = tmp_path / "nap-bin"
    bin_dir.mkdir()
    fifo = tmp_path / "pids"
    os.mkfifo(fifo)
    script = bin_dir / "napper"
    script.write_text(f'#!/bin/sh\nsleep 30 &\necho "$$ $!" > {fifo}\nwait\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    # The same, then it prints without end (`exec yes` keeps its pid).
    flooder = bin_dir / "flooder"
    flooder.write_text(f'#!/bin/sh\nsleep 30 &\necho "$$ $!" > {fifo}\nexec yes\n')
    flooder.chmod(flooder.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def napper_tool(nap_bin: Path, timeout_s: float, program: str = "napper") -> Tool:
    path = nap_bin.parent / "nap-profiles.toml"
    path.write_text(TEST_PROFILES)
    allowlist = CommandAllowlist.parse(program, ShellProfiles.load(str(path)))
    return shell_tool(
        allowlist,
        timeout_s=timeout_s,
        max_output_bytes=4_096,
        env={"PATH": f"{nap_bin}:{SAFE_PATH}"},
    )


class Started:
    """The napper's pid and its grandchild's, each pinned by a pidfd as soon as they are read.

    A pidfd names one process for good: a pid freed by its death and handed to a newcomer is
    not mistaken for it, however long the machine takes to get to the check.
    """

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self._fds: dict[int, int | None] = {}
        for pid in pids:
            try:
                self._fds[pid] = os.pidfd_open(pid)
            except ProcessLookupError:  # already gone (and reaped)
                self._fds[pid] = None

    def same_group(self) -> bool:
        """The grandchild is in the napper's process group (the group a kill reaches)."""
        napper, grandchild = self.pids
        return os.getpgid(grandchild) == napper

    async def exited(self) -> list[bool]:
        """For each pid, True once it has terminated (a zombie counts); never polls."""
        try:
            return [await self._exited(pid) for pid in self.pids]
        finally:
            for fd in self._fds.values():
                if fd is not None:
                    os.close(fd)

    async def _exited(self, pid: int) -> bool:
        fd = self._fds[pid]
        if fd is None:
            return True
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        loop.add_reader(fd, done.set)
        try:
            # Generous: it is an event, so a healthy run never waits it out, and a loaded
            # machine may take seconds to schedule a dying process.
            await asyncio.wait_for(done.wait(), 30)
        except TimeoutError:
            signal.pidfd_send_signal(fd, signal.SIGKILL)  # not left behind for the next test
            return False
        finally:
            loop.remove_reader(fd)
        return True


async def started(nap_bin: Path) -> Started:
    """Block (in a thread) until the napper writes its pid and its grandchild's."""
    fifo = nap_bin.parent / "pids"
    text = await asyncio.wait_for(asyncio.to_thread(fifo.read_text), 30)
    return Started([int(pid) for pid in text.split()])


async def test_timeout_kills_the_process_group(nap_bin: Path) -> None:
    call = asyncio.create_task(napper_tool(nap_bin, 1).handler({"command": "napper"}, Ctx()))
    pids = await started(nap_bin)
    with pytest.raises(ToolFailed, match=re.escape("`napper` timed out after 1 s")):
        await call
    assert await pids.exited() == [True, True]


async def test_cancellation_kills_the_process_group_and_propagates(nap_bin: Path) -> None:
    call = asyncio.create_task(napper_tool(nap_bin, 30).handler({"command": "napper"}, Ctx()))
    pids = await started(nap_bin)
    assert pids.same_group()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert await pids.exited() == [True, True]


async def test_x4_truncation_kills_the_process_group(nap_bin: Path) -> None:
    """X4: past the byte limit the printer and its grandchild are killed, not left running."""
    tool = napper_tool(nap_bin, 60, program="flooder")
    call = asyncio.create_task(tool.handler({"command": "flooder"}, Ctx()))
    pids = await started(nap_bin)
    out = await call
    assert out.startswith("stopped: output passed 4096 bytes\n")
    assert await pids.exited() == [True, True]


async def test_a_commands_paths_are_resolved_off_the_event_loop(
    tmp_path: Path, profiles: ShellProfiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Admitting a command resolves every path operand on the disk: never on the loop's thread."""
    import threading

    loop_thread = threading.get_ident()
    resolved_on: list[int] = []
    realpath = os.path.realpath

    def recording_realpath(path: str) -> str:
        resolved_on.append(threading.get_ident())
        return realpath(path)

    monkeypatch.setattr(os.path, "realpath", recording_realpath)  # the shapes' `os.path`
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text(name)
    tool = tool_for(profiles, f"cat {tmp_path}")
    out = await tool.handler({"command": f"cat {tmp_path}/a {tmp_path}/b {tmp_path}/c"}, Ctx())
    assert out == "exit 0\nabc"
    assert len(resolved_on) >= 3
    assert loop_thread not in resolved_on
