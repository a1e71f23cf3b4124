"""The read-only `search_runbooks` and `read_runbook` tools over a folder of Markdown runbooks.

Contract:

- **The index.** SQLite's FTS5, in memory, ranked by its `bm25()`: the file's name and its title
  (the first `# ` heading) weigh `NAME_WEIGHT` and `TITLE_WEIGHT` against the body's 1, so a
  runbook named for the symptom ranks above one that mentions it in passing. FTS5 rather than a
  BM25 library because it ships with Python's `sqlite3` (no dependency to vet or pin), its
  `porter unicode61` tokenizer folds case, diacritics and English word endings ("connections"
  finds "connection"), and `snippet()` gives each hit its matching passage, with matches
  marked `**…**`. The tokenizer splits on anything but letters and digits, so Chinese or
  Japanese text is matched by whole runs, not by words: name such runbooks in English too.
- **Queries are text, never FTS5 syntax.** The query's first `MAX_QUERY_CHARS` characters are
  split into words (letters and digits); at most `MAX_TERMS` distinct words and as many pairs
  of adjacent words are searched, each quoted, any of them matching (`"disk" OR "full" OR
  "disk full"`): quotes, `*`, `NEAR(`, `AND` or a column filter are plain words or nothing. A
  pair is a phrase, so a runbook holding the words together ranks above one holding them apart
  ("sorry, too many clients" finds the connection runbook, not "Too many open files"). A query
  without words is a tool error saying so; a longer one is searched by its first terms, and
  the answer says so.
- **Fresh without a restart.** `RunbookLibrary.open` builds the index in a worker thread. Before
  each search or read, the folder is scanned again (in a thread: names, sizes, mtimes and
  inodes, `_runbook_folder.Scan`); when the scan differs, the index is rebuilt in a thread,
  once for all the calls that saw the same change (they wait on one lock, then find it built).
  The rebuild is the library's own task (`asyncio.shield`ed): a call cancelled while waiting
  for it raises `CancelledError` and leaves it running, and the next call uses what it built,
  so a stop neither rebuilds nor leaks an index. A replaced index is closed once the query
  running on it ends; one finished after `close` is closed at once.
- **Bounds.** What is indexed and read is bounded by `RunbookLimits` (files, bytes per file and
  in all, bytes per read); answers say what was left out or cut. Measured at the bounds (500
  runbooks of 32 KiB, 16 MiB): a build takes 2.8 s of CPU, under `TIMEOUT_S`; a scan of the
  folder 24 ms, a search with its scan 45 ms, both in worker threads.
- **Names.** `read_runbook` takes a name as `search_runbooks` prints it (`team/db.md`; `.md`
  may be left off), or an alert's `runbook_url`, matched by the end of its path. It reads only
  what the scan found: an absolute name, one with `..`, or a symlink out of the folder is a
  tool error naming why, and nothing outside the folder is ever opened.

Both tools are read-only, abortable and idempotent; their output is framed as untrusted data
by `guarded`, like every tool's (a runbook is text the model reads, not instructions).
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

from agent_core._errors import ToolFailed
from agent_core.tools._base import Interruptibility, Risk, Tool, ToolContext
from agent_core.tools._runbook_folder import (
    Entry,
    RunbookLimits,
    Scan,
    read_bounded,
    real_folder,
    scan_folder,
)

__all__ = [
    "READ_RUNBOOK",
    "SEARCH_RUNBOOKS",
    "RunbookLibrary",
    "RunbookLimits",
    "runbook_tools",
]

SEARCH_RUNBOOKS = "search_runbooks"
READ_RUNBOOK = "read_runbook"
MAX_QUERY_CHARS = 1_000
"""Characters of a query looked at; the rest is ignored (the answer says so)."""
MAX_TERMS = 32
"""Distinct words of a query searched at most."""
MAX_NAME_CHARS = 1_000
"""The longest runbook name or URL `read_runbook` looks at."""
MAX_HITS = 5
"""Runbooks listed per search, best first."""
MAX_TITLE_CHARS = 200
"""A title (the first heading) is cut to this length."""
SNIPPET_TOKENS = 24
"""Words around the matches in each hit's passage."""
NAME_WEIGHT = 5.0
TITLE_WEIGHT = 5.0
"""`bm25()` weights of the file name and the title against the body's 1."""
TIMEOUT_S = 20.0
"""Per call: a rebuild of a full folder included."""

_WORDS = re.compile(r"[^\W_]++")
"""Letters and digits, as the `unicode61` tokenizer splits: one possessive class, linear."""
_TITLE = re.compile(r"^#[ \t]++([^\n]++)", re.MULTILINE)
_SCHEMA = (
    "CREATE VIRTUAL TABLE runbooks USING fts5(name, title, body, note UNINDEXED,"
    " tokenize = 'porter unicode61 remove_diacritics 2')"
)
_SEARCH = (
    "SELECT name, title, note, snippet(runbooks, 2, '**', '**', '…', ?) FROM runbooks"
    " WHERE runbooks MATCH ? ORDER BY bm25(runbooks, ?, ?, 1.0) LIMIT ?"
)
_COUNT = "SELECT count(*) FROM runbooks WHERE runbooks MATCH ?"


@dataclass(frozen=True)
class _Query:
    """What is searched: each word, and each pair of adjacent words as a phrase."""

    terms: list[str]
    pairs: list[str]
    cut: bool
    """The query held more than is searched."""

    @property
    def match(self) -> str:
        """The FTS5 expression: every word and pair quoted (they hold no quote), any matching."""
        return " OR ".join(f'"{phrase}"' for phrase in [*self.terms, *self.pairs])


@dataclass(frozen=True)
class _Hit:
    name: str
    title: str
    note: str
    passage: str


class _Index:
    """One scan's runbooks in an in-memory FTS5 table; queried by one thread at a time."""

    def __init__(self, scan: Scan, limits: RunbookLimits) -> None:
        self.scan = scan
        self.problems = list(scan.problems)
        self.more = scan.more
        self.indexed = 0
        self._lock = threading.Lock()
        self._closed = False
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute(_SCHEMA)
        budget = limits.max_total_bytes
        for entry in scan.entries:
            if budget <= 0:
                self.more = True
                break
            budget -= self._add(entry, min(limits.max_file_bytes, budget))
        self._db.commit()

    def _add(self, entry: Entry, limit: int) -> int:
        """Index `entry`'s first `limit` bytes; the bytes it took."""
        try:
            read = read_bounded(entry, limit)
        except ToolFailed as exc:
            self.problems.append(str(exc))
            return 0
        note = f"indexed its first {limit:,} of {read.size:,} bytes" if read.cut else ""
        row = (entry.name, _title(entry.name, read.text), read.text, note)
        self._db.execute("INSERT INTO runbooks VALUES (?, ?, ?, ?)", row)
        self.indexed += 1
        return min(read.size, limit)

    def search(self, query: _Query) -> tuple[int, list[_Hit]] | None:
        """How many runbooks match `query`, and the best; None once closed."""
        match = query.match
        with self._lock:
            if self._closed:
                return None
            (count,) = self._db.execute(_COUNT, (match,)).fetchone()
            params = (SNIPPET_TOKENS, match, NAME_WEIGHT, TITLE_WEIGHT, MAX_HITS)
            rows = self._db.execute(_SEARCH, params).fetchall()
        return int(count), [_Hit(*row) for row in rows]

    def close(self) -> None:
        """Close the table, after the query running on it (if any)."""
        with self._lock:
            self._closed = True
            self._db.close()


class RunbookLibrary:
    """The runbooks of one folder, searchable, kept as fresh as the folder.

    Build it with `open`; close it when the worker stops.
    """

    def __init__(self, root: str, index: _Index, limits: RunbookLimits) -> None:
        self._root, self._index, self._limits = root, index, limits
        self._rebuild = asyncio.Lock()
        self._building: asyncio.Task[None] | None = None
        """The rebuild under way, owned here so a cancelled caller leaves it to the next."""
        self._closed = False
        self.builds = 1
        """Indexes built so far (the first one included)."""

    @classmethod
    async def open(cls, root: str, limits: RunbookLimits | None = None) -> RunbookLibrary:
        """Index the runbooks under `root`, in a worker thread.

        Raises:
            ConfigError: `root` is not a directory that can be read.
        """
        limits = limits or RunbookLimits()
        real = await asyncio.to_thread(real_folder, root)
        index = await asyncio.to_thread(_build, real, limits)
        return cls(real, index, limits)

    @property
    def names(self) -> tuple[str, ...]:
        """The runbooks found at the last scan, by name."""
        return tuple(entry.name for entry in self._index.scan.entries)

    async def search(self, query: str) -> str:
        """The best runbooks for `query`, each with its title and matching passage.

        Raises:
            ToolFailed: The query has no words.
        """
        searched = _query(query)
        for _ in range(3):  # a rebuild may close the index between fetching and querying it
            index = await self._fresh()
            found = await asyncio.to_thread(index.search, searched)
            if found is not None:
                return _render_hits(searched, index, *found)
        raise ToolFailed("the runbooks folder kept changing during the search", retryable=True)

    async def read(self, name: str) -> str:
        """The runbook called `name` (or at an alert's `runbook_url`), cut to the read bound.

        Raises:
            ToolFailed: No such runbook in the folder, or the name leads out of it.
        """
        index = await self._fresh()
        entry = await asyncio.to_thread(_resolve, self._root, index.scan, name)
        read = await asyncio.to_thread(read_bounded, entry, self._limits.max_read_bytes)
        text = f"runbook {entry.name} ({read.size:,} bytes)\n\n{read.text}"
        if read.cut:
            limit = self._limits.max_read_bytes
            text += f"\n… [truncated: the first {limit:,} of {read.size:,} bytes are shown]"
        return text

    def close(self) -> None:
        """Close the index (blocks until a query running on it ends), and the one being built."""
        self._closed = True  # a rebuild under way closes its index when it ends
        self._index.close()

    async def _fresh(self) -> _Index:
        """The index of the folder as it is now: rebuilt in a thread when the scan differs."""
        scan = await asyncio.to_thread(scan_folder, self._root, self._limits)
        if scan == self._index.scan:
            return self._index
        async with self._rebuild:
            while scan != self._index.scan and not self._closed:  # not rebuilt by a waiter
                if self._building is None:  # else one a cancelled call left: its scan first
                    self._building = asyncio.create_task(self._replace(scan))
                await asyncio.shield(self._building)  # a cancel stops the wait, not the build
        return self._index

    async def _replace(self, scan: Scan) -> None:
        """Build `scan`'s index in a thread and put it in place of the current one."""
        try:
            fresh = await asyncio.to_thread(_Index, scan, self._limits)
            if self._closed:
                fresh.close()  # no query has seen it
                return
            stale, self._index = self._index, fresh
            self.builds += 1
            await asyncio.to_thread(stale.close)
        finally:
            self._building = None


def _build(root: str, limits: RunbookLimits) -> _Index:
    return _Index(scan_folder(root, limits), limits)


def _title(name: str, text: str) -> str:
    """The first `# ` heading, else the file name as words (`disk-full.md`: `disk full`)."""
    if heading := _TITLE.search(text):
        return heading.group(1)[:MAX_TITLE_CHARS].strip().rstrip("#").strip()
    stem = name.rsplit("/", 1)[-1].removesuffix(".md").removesuffix(".MD")
    return " ".join(_WORDS.findall(stem))


def _query(query: object) -> _Query:
    """The words and word pairs searched (see the module contract)."""
    text = query if isinstance(query, str) else ""
    words = [word.group().lower() for word in _WORDS.finditer(text, 0, MAX_QUERY_CHARS)]
    terms = list(dict.fromkeys(words))
    pairs = list(dict.fromkeys(f"{a} {b}" for a, b in zip(words, words[1:], strict=False)))
    if not terms:
        raise ToolFailed(
            "the query has no terms to search for: give words, such as the alert's name, the"
            " service or the symptom"
        )
    cut = len(text) > MAX_QUERY_CHARS or len(terms) > MAX_TERMS
    return _Query(terms[:MAX_TERMS], pairs[:MAX_TERMS], cut)


def _render_hits(query: _Query, index: _Index, count: int, hits: list[_Hit]) -> str:
    lines = [f"searched {index.indexed} runbooks for: {', '.join(query.terms)}"]
    if query.cut:
        lines.append(f"(the query's first {MAX_TERMS} words within {MAX_QUERY_CHARS:,} characters)")
    if not hits:
        lines.append("no runbook matches; try other words (the alert's name, the symptom)")
    elif count > len(hits):
        lines.append(f"{count} runbooks match; the best {len(hits)}:")
    else:
        lines.append(f"{count} {'runbook matches' if count == 1 else 'runbooks match'}:")
    for rank, hit in enumerate(hits, 1):
        lines.append(f"{rank}. {hit.name}: {hit.title}" + (f" ({hit.note})" if hit.note else ""))
        lines.append(f"   {' '.join(hit.passage.split())}")
    if hits:
        lines.append(f"Read one with {READ_RUNBOOK}(name).")
    return "\n".join(lines + _caveats(index))


def _caveats(index: _Index) -> list[str]:
    lines = [f"not indexed: {problem}" for problem in index.problems[:5]]
    if len(index.problems) > 5:
        lines.append(f"not indexed: {len(index.problems) - 5} more")
    if index.more:
        lines.append("the folder holds more runbooks than are indexed; some were left out")
    return lines


def _resolve(root: str, scan: Scan, name: object) -> Entry:
    """The scanned runbook `name` names, or a tool error saying why there is none."""
    text = name.strip() if isinstance(name, str) else ""
    if not text or len(text) > MAX_NAME_CHARS:
        raise ToolFailed(f"`name` must be a runbook's name, 1 to {MAX_NAME_CHARS} characters")
    if "://" in text:
        return _by_url(scan, text)
    if text.startswith(("/", "\\")):
        raise ToolFailed(f"{text!r} is an absolute path: name a runbook inside the folder")
    parts = text.replace("\\", "/").split("/")
    if ".." in parts:
        raise ToolFailed(f"{text!r} leads out of the runbooks folder")
    relative = "/".join(part for part in parts if part not in ("", "."))
    for candidate in (relative, f"{relative}.md"):
        if entry := scan.named(candidate):
            return entry
    real = os.path.realpath(os.path.join(root, relative))  # `..`-free: only links can lead out
    if os.path.commonpath([root, real]) != root:
        raise ToolFailed(f"{text!r} is a symlink out of the runbooks folder: it is not read")
    raise ToolFailed(f"no runbook named {text!r}; {SEARCH_RUNBOOKS} lists the names")


def _by_url(scan: Scan, url: str) -> Entry:
    """The runbook whose name is the longest ending of the URL's path."""
    path = unquote(urlsplit(url).path).strip("/")
    parts = [part for part in path.split("/") if part and part != ".."]
    for start in range(len(parts)):
        tail = "/".join(parts[start:])
        for candidate in (tail, f"{tail}.md"):
            if entry := scan.named(candidate):
                return entry
    raise ToolFailed(
        f"no runbook in the folder matches {url!r}; search_runbooks may find it by its subject"
    )


def runbook_tools(library: RunbookLibrary) -> list[Tool]:
    """`search_runbooks` and `read_runbook` over `library`."""

    async def search(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return await library.search(args["query"])

    async def read(args: Mapping[str, Any], ctx: ToolContext) -> str:
        return await library.read(args["name"])

    return [
        Tool(
            name=SEARCH_RUNBOOKS,
            description=(
                "Search the team's runbooks (full text, best first): each hit's name, title and "
                "matching passage. Use the alert's name, the service, the symptom."
            ),
            parameters=_object(
                "query", "Words to search for, e.g. `postgres too many connections`"
            ),
            handler=search,
            interruptibility=Interruptibility.ABORTABLE,
            timeout_s=TIMEOUT_S,
            risk=Risk.READ_ONLY,
        ),
        Tool(
            name=READ_RUNBOOK,
            description=(
                "Read one of the team's runbooks: a name as search_runbooks lists it "
                "(`team/db.md`), or an alert's runbook_url."
            ),
            parameters=_object("name", "The runbook's name, or an alert's runbook_url"),
            handler=read,
            interruptibility=Interruptibility.ABORTABLE,
            timeout_s=TIMEOUT_S,
            risk=Risk.READ_ONLY,
        ),
    ]


def _object(field: str, description: str) -> Mapping[str, Any]:
    return {
        "type": "object",
        "properties": {field: {"type": "string", "minLength": 1, "description": description}},
        "required": [field],
        "additionalProperties": False,
    }
