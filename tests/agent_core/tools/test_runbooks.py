"""`search_runbooks` and `read_runbook`, driven through `agent_core.tools` and a `Toolset`.

Why this way: what a user sees is the text the tools return, so every test calls the tools'
handlers from a `Toolset` built with the public `runbook_tools` (the argument schema checked as
the batch checks it), over a copy of `tests/data/runbooks` (20 small, realistic runbooks) in a
temporary folder the test may edit. Ranking is asserted on the first hit only, for queries taken
from titles and from bodies: that is what the model acts on. Freshness is asserted on what a
search finds after an edit, and on `RunbookLibrary.builds` (a count, never a time) for the
one shared rebuild.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from agent_core import ConfigError, ToolFailed, guarded
from agent_core.tools import (
    READ_RUNBOOK,
    SEARCH_RUNBOOKS,
    Interruptibility,
    Risk,
    RunbookLibrary,
    RunbookLimits,
    Toolset,
    _runbooks,
    runbook_tools,
)
from agent_core.tools._runbook_folder import Scan
from tests.paths import TESTS
from tests.tool_context import Ctx

RUNBOOKS = TESTS / "data" / "runbooks"
HIT = re.compile(r"^[0-9]+\. ([^:]+):", re.MULTILINE)

# (query, the runbook that must rank first): the titles, then phrases from the bodies, as an
# alert or a responder would word them.
TITLE_QUERIES = [
    ("Database connection pool exhaustion", "db-connection-exhaustion.md"),
    ("Disk full on a node", "disk-full.md"),
    ("TLS certificate expiry", "cert-expiry.md"),
    ("Pod OOMKilled", "oomkilled.md"),
    ("DNS resolution failures", "dns-resolution.md"),
    ("Kafka consumer lag", "kafka-consumer-lag.md"),
    ("CrashLoopBackOff", "crashloopbackoff.md"),
    ("Elevated HTTP 5xx error rate", "high-5xx-rate.md"),
    ("Redis memory and evictions", "redis-memory-evictions.md"),
    ("Postgres replication lag", "databases/postgres-replication-lag.md"),
    ("Kubernetes node NotReady", "node-not-ready.md"),
    ("Latency regression after a deploy", "latency-regression-after-deploy.md"),
    ("ImagePullBackOff", "image-pull-backoff.md"),
    ("CPU throttling", "cpu-throttling.md"),
    ("Elasticsearch cluster health red", "elasticsearch-cluster-red.md"),
    ("S3 access denied", "s3-access-denied.md"),
    ("Clock skew", "clock-skew.md"),
    ("Too many open files", "too-many-open-files.md"),
    ("MySQL deadlocks and lock waits", "databases/mysql-deadlocks.md"),
    ("Failed Kubernetes CronJob", "cronjob-failed.md"),
]
BODY_QUERIES = [
    ("FATAL: sorry, too many clients already", "db-connection-exhaustion.md"),
    ("pgbouncer cl_waiting", "db-connection-exhaustion.md"),
    ("write failed: No space left on device", "disk-full.md"),
    ("x509: certificate has expired or is not yet valid", "cert-expiry.md"),
    ("container terminated with exit code 137", "oomkilled.md"),
    ("NXDOMAIN from coredns", "dns-resolution.md"),
    ("getaddrinfo EAI_AGAIN", "dns-resolution.md"),
    ("consumer group keeps rebalancing, max.poll.interval.ms", "kafka-consumer-lag.md"),
    ("kubectl logs --previous, the pod keeps restarting", "crashloopbackoff.md"),
    ("502 Bad Gateway from the load balancer", "high-5xx-rate.md"),
    ("OOM command not allowed when used memory > 'maxmemory'", "redis-memory-evictions.md"),
    ("replay_lag in pg_stat_replication", "databases/postgres-replication-lag.md"),
    ("PLEG is not healthy", "node-not-ready.md"),
    ("helm rollback after p99 went up", "latency-regression-after-deploy.md"),
    ("toomanyrequests: docker hub rate limit", "image-pull-backoff.md"),
    ("nr_throttled in cpu.stat", "cpu-throttling.md"),
    ("unassigned shards, allocation explain", "elasticsearch-cluster-red.md"),
    ("403 AccessDenied with the IRSA role", "s3-access-denied.md"),
    ("chronyc tracking shows a big offset", "clock-skew.md"),
    ("EMFILE, ulimit -n", "too-many-open-files.md"),
    ("Lock wait timeout exceeded; innodb", "databases/mysql-deadlocks.md"),
    ("backoffLimit reached, the job gave up", "cronjob-failed.md"),
    ("database connections", "db-connection-exhaustion.md"),
    ("kafka lag", "kafka-consumer-lag.md"),
    ("no space left", "disk-full.md"),
    ("certificate expired", "cert-expiry.md"),
    ("clients getting 502", "high-5xx-rate.md"),
    ("the replica is behind", "databases/postgres-replication-lag.md"),
    ("node not ready", "node-not-ready.md"),
    ("evicted keys", "redis-memory-evictions.md"),
]
HOSTILE_QUERIES = [
    'disk full"',
    "disk*",
    "NEAR(disk full)",
    "NEAR(",
    "disk AND NOT full",
    "title:disk",
    "{body}: disk",
    "^disk",
    "disk + full - (node)",
    "disk\x00full",
    "'; DROP TABLE runbooks; --",
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A copy of the 20 runbooks the test may change."""
    target = tmp_path / "runbooks"
    shutil.copytree(RUNBOOKS, target)
    return target


async def open_tools(
    folder: Path, limits: RunbookLimits | None = None
) -> tuple[RunbookLibrary, Toolset]:
    library = await RunbookLibrary.open(str(folder), limits)
    return library, Toolset.of(runbook_tools(library))


@pytest.fixture
async def tools(folder: Path) -> AsyncIterator[tuple[RunbookLibrary, Toolset]]:
    library, toolset = await open_tools(folder)
    yield library, toolset
    library.close()


async def call(toolset: Toolset, tool_name: str, /, **args: object) -> str:
    """Check the arguments as the batch does, then run the call."""
    toolset.check_arguments(tool_name, args)
    tool = toolset.get(tool_name)
    assert tool is not None
    return await tool.handler(args, Ctx())


def ranked(output: str) -> list[str]:
    """The runbook names of a search's hits, best first."""
    return [hit.group(1) for hit in HIT.finditer(output)]


def test_the_fixture_holds_twenty_runbooks() -> None:
    assert len(list(RUNBOOKS.rglob("*.md"))) == 20


def test_the_tools_are_read_only_abortable_and_idempotent(tools) -> None:
    _, toolset = tools
    assert [tool.name for tool in toolset] == [SEARCH_RUNBOOKS, READ_RUNBOOK]
    for tool in toolset:
        assert tool.risk is Risk.READ_ONLY
        assert tool.interruptibility is Interruptibility.ABORTABLE
        assert tool.idempotent is True
    with pytest.raises(ToolFailed):
        toolset.check_arguments(SEARCH_RUNBOOKS, {"query": 3})
    with pytest.raises(ToolFailed):
        toolset.check_arguments(READ_RUNBOOK, {"path": "disk-full.md"})


@pytest.mark.parametrize(("query", "expected"), TITLE_QUERIES + BODY_QUERIES)
async def test_the_right_runbook_ranks_first(tools, query: str, expected: str) -> None:
    _, toolset = tools
    output = await call(toolset, SEARCH_RUNBOOKS, query=query)
    assert ranked(output)[:1] == [expected], output


async def test_a_hit_shows_its_title_and_the_matching_passage(tools) -> None:
    _, toolset = tools
    output = await call(toolset, SEARCH_RUNBOOKS, query="No space left on device")
    assert output.splitlines()[0] == "searched 20 runbooks for: no, space, left, on, device"
    assert "1. disk-full.md: Disk full on a node" in output
    assert "`**No space left on device**` (ENOSPC)" in output
    assert output.rstrip().endswith(f"Read one with {READ_RUNBOOK}(name).")


async def test_a_search_that_matches_nothing_says_so(tools) -> None:
    _, toolset = tools
    output = await call(toolset, SEARCH_RUNBOOKS, query="zeppelin quasar")
    assert ranked(output) == []
    assert "no runbook matches" in output


async def test_an_edited_an_added_and_a_removed_runbook_count_without_a_restart(
    tools, folder: Path
) -> None:
    library, toolset = tools
    assert ranked(await call(toolset, SEARCH_RUNBOOKS, query="velociraptor")) == []

    clock = folder / "clock-skew.md"
    clock.write_text(clock.read_text() + "\nA velociraptor in the data centre also skews clocks.\n")
    assert ranked(await call(toolset, SEARCH_RUNBOOKS, query="velociraptor")) == ["clock-skew.md"]

    (folder / "team").mkdir()
    (folder / "team" / "payments-webhooks.md").write_text(
        "# Payments webhooks failing\n\nStripe retries webhooks; check the signing secret.\n"
    )
    output = await call(toolset, SEARCH_RUNBOOKS, query="stripe webhooks")
    assert ranked(output)[:1] == ["team/payments-webhooks.md"]
    assert "searched 21 runbooks" in output
    assert "Stripe retries" in await call(toolset, READ_RUNBOOK, name="team/payments-webhooks")

    (folder / "disk-full.md").unlink()
    output = await call(toolset, SEARCH_RUNBOOKS, query="No space left on device")
    assert "disk-full.md" not in ranked(output)
    with pytest.raises(ToolFailed, match="no runbook named 'disk-full.md'"):
        await call(toolset, READ_RUNBOOK, name="disk-full.md")
    assert library.builds == 4  # the first, then one per change


async def test_an_unchanged_folder_is_not_indexed_again(tools) -> None:
    library, toolset = tools
    for query in ("disk", "dns", "kafka"):
        await call(toolset, SEARCH_RUNBOOKS, query=query)
    await call(toolset, READ_RUNBOOK, name="dns-resolution.md")
    assert library.builds == 1


async def test_concurrent_searches_after_a_change_share_one_rebuild(tools, folder: Path) -> None:
    library, toolset = tools
    (folder / "kafka-consumer-lag.md").write_text("# Kafka consumer lag\n\nSee the wombat.\n")
    outputs = await asyncio.gather(
        *(call(toolset, SEARCH_RUNBOOKS, query="wombat") for _ in range(8))
    )
    assert [ranked(output) for output in outputs] == [["kafka-consumer-lag.md"]] * 8
    assert library.builds == 2


class HeldIndex(_runbooks._Index):
    """An index whose build waits for `release`, counting builds started and indexes open."""

    started: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()
    built: ClassVar[int] = 0
    live: ClassVar[set[int]] = set()

    def __init__(self, scan: Scan, limits: RunbookLimits) -> None:
        HeldIndex.built += 1
        HeldIndex.started.set()
        assert HeldIndex.release.wait(timeout=60)  # a guard against a hang, not a measure
        super().__init__(scan, limits)
        HeldIndex.live.add(id(self))

    def close(self) -> None:
        super().close()
        HeldIndex.live.discard(id(self))


async def test_a_search_cancelled_during_a_rebuild_leaves_the_index_to_the_next(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library, toolset = await open_tools(folder)
    monkeypatch.setattr(HeldIndex, "started", threading.Event())
    monkeypatch.setattr(HeldIndex, "release", threading.Event())
    monkeypatch.setattr(HeldIndex, "built", 0)
    monkeypatch.setattr(HeldIndex, "live", set())
    monkeypatch.setattr(_runbooks, "_Index", HeldIndex)
    (folder / "kafka-consumer-lag.md").write_text("# Kafka consumer lag\n\nSee the wombat.\n")
    try:
        stopped = asyncio.create_task(call(toolset, SEARCH_RUNBOOKS, query="wombat"))
        await asyncio.to_thread(HeldIndex.started.wait)
        stopped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopped
        HeldIndex.release.set()
        output = await call(toolset, SEARCH_RUNBOOKS, query="wombat")
    finally:
        HeldIndex.release.set()
        library.close()

    assert ranked(output) == ["kafka-consumer-lag.md"]
    assert (HeldIndex.built, library.builds) == (1, 2)  # the cancelled call's build was used
    assert not HeldIndex.live


async def test_reading_a_runbook_by_name_without_md_and_by_runbook_url(tools) -> None:
    _, toolset = tools
    whole = await call(toolset, READ_RUNBOOK, name="databases/mysql-deadlocks.md")
    assert whole.startswith("runbook databases/mysql-deadlocks.md (")
    assert "SHOW ENGINE INNODB STATUS" in whole
    assert await call(toolset, READ_RUNBOOK, name="databases/mysql-deadlocks") == whole
    assert await call(toolset, READ_RUNBOOK, name="./databases//mysql-deadlocks.md") == whole
    url = "https://github.com/acme/runbooks/blob/main/databases/mysql-deadlocks.md"
    assert await call(toolset, READ_RUNBOOK, name=url) == whole
    wiki = "https://wiki.example.com/sre/runbooks/disk-full"
    assert "journalctl --vacuum-size" in await call(toolset, READ_RUNBOOK, name=wiki)
    with pytest.raises(ToolFailed, match="no runbook in the folder matches"):
        await call(toolset, READ_RUNBOOK, name="https://wiki.example.com/runbooks/unknown")


async def test_names_outside_the_folder_are_refused(tools, folder: Path) -> None:
    _, toolset = tools
    secret = folder.parent / "secret.md"
    secret.write_text("# Secret\n\nhunter2 outside the folder\n")
    (folder / "escape.md").symlink_to(secret)
    (folder / "outside").symlink_to(folder.parent, target_is_directory=True)
    refusals = {
        "../secret.md": "leads out of the runbooks folder",
        "databases/../../secret.md": "leads out of the runbooks folder",
        str(secret): "is an absolute path",
        "/etc/passwd": "is an absolute path",
        "escape.md": "is a symlink out of the runbooks folder",
        "outside/secret.md": "is a symlink out of the runbooks folder",
        "file:///etc/passwd": "no runbook in the folder matches",
        "https://evil.example/../../secret.md": "no runbook in the folder matches",
    }
    for name, reason in refusals.items():
        with pytest.raises(ToolFailed, match=reason):
            await call(toolset, READ_RUNBOOK, name=name)
    output = await call(toolset, SEARCH_RUNBOOKS, query="hunter2")
    assert ranked(output) == [] and "outside the folder" not in output


async def test_links_inside_the_folder_are_followed_as_a_configmap_mount_makes_them(
    tmp_path: Path,
) -> None:
    # A ConfigMap volume: every file is a link into `..data`, itself a link to a dated folder.
    mount = tmp_path / "mount"
    (mount / "..2024_05_01").mkdir(parents=True)
    (mount / "..2024_05_01" / "disk-full.md").write_text((RUNBOOKS / "disk-full.md").read_text())
    (mount / "..data").symlink_to("..2024_05_01", target_is_directory=True)
    (mount / "disk-full.md").symlink_to("..data/disk-full.md")
    library, toolset = await open_tools(mount)
    try:
        assert library.names == ("disk-full.md",)
        output = await call(toolset, SEARCH_RUNBOOKS, query="no space left")
        assert ranked(output) == ["disk-full.md"]
        assert "journalctl" in await call(toolset, READ_RUNBOOK, name="disk-full.md")
    finally:
        library.close()


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
async def test_query_syntax_is_searched_as_words(tools, query: str) -> None:
    _, toolset = tools
    output = await call(toolset, SEARCH_RUNBOOKS, query=query)
    assert output.startswith("searched 20 runbooks for: ")


@pytest.mark.parametrize("query", ['"', "*", "(", '""', "-- ^ * : ( ) + \"'", "   ", "_"])
async def test_a_query_of_punctuation_is_a_clear_tool_error(tools, query: str) -> None:
    _, toolset = tools
    with pytest.raises(ToolFailed, match="the query has no terms to search for"):
        await call(toolset, SEARCH_RUNBOOKS, query=query)


async def test_a_long_query_is_searched_by_its_first_terms(tools) -> None:
    _, toolset = tools
    alert = "NodeFilesystemAlmostOutOfSpace no space left on device " + "lorem ipsum " * 900
    assert len(alert) > 10_000
    output = await call(toolset, SEARCH_RUNBOOKS, query=alert)
    assert ranked(output)[:1] == ["disk-full.md"]
    assert "(the query's first 32 words within 1,000 characters)" in output
    many = " ".join(f"word{n}" for n in range(100))
    output = await call(toolset, SEARCH_RUNBOOKS, query=many)
    assert "word31" in output.splitlines()[0] and "word32" not in output.splitlines()[0]


async def test_guarded_tools_frame_results_and_failures(tools) -> None:
    _, toolset = tools
    framed = guarded(toolset)
    output = await call(framed, SEARCH_RUNBOOKS, query="disk full")
    assert '<tool_output tool="search_runbooks">' in output and "disk-full.md" in output
    with pytest.raises(ToolFailed) as caught:
        await call(framed, READ_RUNBOOK, name="../../etc/passwd")
    assert str(caught.value).startswith("read_runbook failed.")
    assert "leads out of the runbooks folder" in str(caught.value)


async def test_bounds_a_long_runbook_is_indexed_and_read_in_part(folder: Path) -> None:
    body = "filler text " * 2000 + "unicorn appears only after the bound\n"
    (folder / "long.md").write_text("# A long runbook\n\n" + "é" + body)
    limits = RunbookLimits(max_file_bytes=4096, max_read_bytes=1001)
    library, toolset = await open_tools(folder, limits)
    try:
        output = await call(toolset, SEARCH_RUNBOOKS, query="long runbook")
        assert "1. long.md: A long runbook (indexed its first 4,096 of" in output
        assert ranked(await call(toolset, SEARCH_RUNBOOKS, query="unicorn")) == []
        text = await call(toolset, READ_RUNBOOK, name="long.md")
        size = (folder / "long.md").stat().st_size
        assert text.endswith(f"… [truncated: the first 1,001 of {size:,} bytes are shown]")
        assert "\ufffd" not in text  # the bound cut no character in half
    finally:
        library.close()


async def test_bounds_files_past_the_count_are_left_out_and_said_so(folder: Path) -> None:
    library, toolset = await open_tools(folder, RunbookLimits(max_files=5))
    try:
        assert len(library.names) == 5
        output = await call(toolset, SEARCH_RUNBOOKS, query="kubernetes")
        assert "searched 5 runbooks" in output
        assert "some were left out" in output
    finally:
        library.close()


async def test_what_is_not_a_runbook_is_skipped(folder: Path) -> None:
    (folder / "notes.txt").write_text("# Disk full notes\n")
    (folder / ".git").mkdir()
    (folder / ".git" / "disk.md").write_text("# Disk full, from git\n")
    (folder / ".draft.md").write_text("# Disk full draft\n")
    (folder / "loop").symlink_to(folder, target_is_directory=True)
    (folder / "binary.md").write_bytes(b"# Binary \xff\xfe runbook\n\x00\x01 disk\n")
    os.mkfifo(folder / "fifo.md")
    library, toolset = await open_tools(folder)
    try:
        assert len(library.names) == 21  # the 20, and binary.md with its bad bytes replaced
        assert "binary.md" in library.names
        output = await call(toolset, SEARCH_RUNBOOKS, query="disk full")
        assert not {"notes.txt", ".git/disk.md", ".draft.md"} & set(ranked(output))
        assert "Binary" in await call(toolset, READ_RUNBOOK, name="binary.md")
    finally:
        library.close()


async def test_a_folder_that_is_not_a_directory_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a directory"):
        await RunbookLibrary.open(str(tmp_path / "missing"))
    (tmp_path / "file.md").write_text("# A file\n")
    with pytest.raises(ConfigError, match="is not a directory"):
        await RunbookLibrary.open(str(tmp_path / "file.md"))
