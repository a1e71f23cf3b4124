"""What a runbooks folder holds: its Markdown files found within bounds, and one read safely.

Contract:

- **What counts.** Files named `*.md` (any case), in the folder and its subfolders up to
  `MAX_DEPTH` levels down, each named by its path relative to the folder with `/` between
  parts (`team/db.md`). Names starting with `.` are skipped, files and folders alike (`.git`,
  and the `..data` folder a Kubernetes ConfigMap mount keeps its files in).
- **Symlinks.** Followed only when their target stays inside the folder: a ConfigMap mount is
  nothing but such links. A link that leads out of the folder is never indexed nor read; a file
  reached through two links is listed once, under the first name in name order.
- **Bounds.** At most `RunbookLimits.max_files` files, taken in name order, and at most
  `MAX_ENTRIES` directory entries looked at in one scan; `Scan.more` says that some were left
  out. Every read is bounded by bytes (`read_bounded`).
- **The signature.** A scan lists each file's name, size, modification time and inode: equal
  scans mean an unchanged folder (an edit keeping the size within the same clock tick aside),
  so comparing two scans is the cheap check before each search.

Everything here blocks on the file system: callers run it in a worker thread.
"""

from __future__ import annotations

import codecs
import os
import stat
from dataclasses import dataclass, field
from itertools import islice

from agent_core._errors import ConfigError, ToolFailed

__all__ = [
    "MAX_DEPTH",
    "MAX_ENTRIES",
    "Bounded",
    "Entry",
    "RunbookLimits",
    "Scan",
    "read_bounded",
    "real_folder",
    "scan_folder",
]

MAX_DEPTH = 8
"""Subfolder levels below the runbooks folder that are looked into."""
MAX_ENTRIES = 20_000
"""Directory entries looked at in one scan, files and folders of every level together."""


@dataclass(frozen=True, kw_only=True)
class RunbookLimits:
    """How much of a runbooks folder is indexed and read."""

    max_files: int = 500
    """Runbooks indexed at most, in name order; the rest are left out (searches say so)."""
    max_file_bytes: int = 128 * 1024
    """Bytes of one runbook indexed; a longer one is indexed up to here, with a note."""
    max_total_bytes: int = 16 * 1024 * 1024
    """Bytes indexed over the whole folder; runbooks past it are left out (searches say so)."""
    max_read_bytes: int = 32 * 1024
    """Bytes `read_runbook` returns at most; a longer runbook is cut with a notice."""

    def __post_init__(self) -> None:
        for name in ("max_files", "max_file_bytes", "max_total_bytes", "max_read_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"runbook limit {name} must be positive")


@dataclass(frozen=True)
class Entry:
    """One runbook file: its name in the folder, where it really is, and its signature."""

    name: str
    """Its path relative to the folder, `/`-separated (`team/db.md`)."""
    path: str
    """Its real path (symlinks resolved)."""
    size: int
    mtime_ns: int
    inode: int


@dataclass(frozen=True)
class Scan:
    """The runbooks of a folder at one moment; equal scans mean an unchanged folder."""

    entries: tuple[Entry, ...]
    more: bool = False
    """Files or entries past the bounds were left out."""
    problems: tuple[str, ...] = field(default=(), compare=False)
    """Folders that could not be listed, as `name: reason`."""

    def named(self, name: str) -> Entry | None:
        """The entry called `name`, if the scan found one."""
        return next((entry for entry in self.entries if entry.name == name), None)


def real_folder(root: str) -> str:
    """`root` with symlinks resolved.

    Raises:
        ConfigError: It is not a directory that can be listed.
    """
    real = os.path.realpath(root)
    if not os.path.isdir(real):
        raise ConfigError(f"{root} is not a directory")
    if not os.access(real, os.R_OK | os.X_OK):
        raise ConfigError(f"{root} cannot be read")
    return real


def scan_folder(root: str, limits: RunbookLimits) -> Scan:
    """The runbooks under the real folder `root`, within `limits` (see the module contract)."""
    walk = _Walk(root, limits)
    walk.visit(root, "", 0)
    return Scan(tuple(walk.found), walk.more, tuple(walk.problems))


class _Walk:
    """One bounded walk of a folder: what it found, and whether it had to stop early."""

    def __init__(self, root: str, limits: RunbookLimits) -> None:
        self.root, self.limits = root, limits
        self.found: list[Entry] = []
        self.problems: list[str] = []
        self.more = False
        self._budget = MAX_ENTRIES
        self._seen: set[str] = {root}

    def visit(self, folder: str, prefix: str, depth: int) -> None:
        try:
            with os.scandir(folder) as listing:
                entries = sorted(islice(listing, self._budget + 1), key=lambda e: e.name)
        except OSError as exc:
            self.problems.append(f"{prefix or '.'}: {exc.strerror or exc}")
            return
        if len(entries) > self._budget:
            self.more, entries = True, entries[: self._budget]
        self._budget -= len(entries)
        for entry in entries:
            if len(self.found) >= self.limits.max_files:
                self.more = True
                return
            if not entry.name.startswith("."):
                self._take(entry, prefix, depth)

    def _take(self, entry: os.DirEntry[str], prefix: str, depth: int) -> None:
        real = os.path.realpath(entry.path)
        if real in self._seen or os.path.commonpath([self.root, real]) != self.root:
            return  # seen already, or a symlink out of the folder
        try:
            info = os.stat(real)
        except OSError:
            return  # a dangling link, or gone since the listing
        if stat.S_ISDIR(info.st_mode):
            if depth < MAX_DEPTH:
                self._seen.add(real)
                self.visit(real, f"{prefix}{entry.name}/", depth + 1)
        elif stat.S_ISREG(info.st_mode) and entry.name.lower().endswith(".md"):
            self._seen.add(real)
            name = f"{prefix}{entry.name}"
            self.found.append(Entry(name, real, info.st_size, info.st_mtime_ns, info.st_ino))


@dataclass(frozen=True)
class Bounded:
    """The start of a file, decoded, and how long the whole file is."""

    text: str
    size: int
    """The file's size in bytes when it was read."""
    cut: bool
    """`text` is only the first `limit` bytes."""


def read_bounded(entry: Entry, limit: int) -> Bounded:
    """At most `limit` bytes of `entry`'s file, decoded as UTF-8 (bad bytes replaced).

    Raises:
        ToolFailed: The file cannot be read, or is no longer a regular file.
    """
    try:
        # O_NOFOLLOW: the real path was resolved at the scan; a link put there since is refused.
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ToolFailed(f"runbook {entry.name!r} is not a regular file")
            with open(fd, "rb", closefd=False) as file:
                data = file.read(limit + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise ToolFailed(f"runbook {entry.name!r} cannot be read: {exc.strerror or exc}") from exc
    cut = len(data) > limit
    # An incremental decoder keeps a character cut at the bound out, instead of garbling it.
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data[:limit], final=not cut)
    return Bounded(text.removeprefix("\ufeff"), max(info.st_size, len(data)), cut)
