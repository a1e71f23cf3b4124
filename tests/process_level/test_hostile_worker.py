"""A running worker fed hostile pages keeps its lease, its memory and its card (row X16).

Why this way: the failures this guards against only show in a real process under a real lease.
A scrubber that is super-linear on blank lines stalls the worker's event loop, the lease (1.5 s
here) lapses mid-stall, and the analysis is taken over and fetched again; a tool that decodes a
whole gzip body before cutting it grows the process by hundreds of megabytes. So the test runs
`chatops serve` and one `chatops worker` as processes, lets `http_get` fetch a 5 MiB page of
blank lines and a gzip bomb that decodes to 1 GiB from the tests' service, and then checks what
an operator would: one fetch of each page (no takeover re-ran them), one settle, one card that
ends answered, and the worker's peak resident size (`VmHWM`) grown by less than 50 MB over a
warm-up analysis that loaded everything an analysis loads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deployment import slack_session
from tests.fakes import openai_provider as fp
from tests.fakes import signing as sg
from tests.slack_view import card_text, cards_in, final_card

pytestmark = pytest.mark.slow

PEAK_GROWTH_LIMIT = 50 * 1024 * 1024
"""The most a worker's peak resident size may grow while it reads the hostile pages."""


def peak_rss(pid: int) -> int:
    """The process's peak resident set size in bytes (`VmHWM` in /proc/<pid>/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


async def test_blank_page_and_gzip_bomb_keep_lease_memory_and_card(
    deployment, fake_llm, slack_api, slow_service
) -> None:
    get = [fp.ToolCall("http_get", {"url": slow_service.url(path)}) for path in ("/ok",)]
    hostile = [
        fp.ToolCall("http_get", {"url": slow_service.url(path)})
        for path in ("/blank/5", "/gzip-bomb/1024")
    ]
    fake_llm.script(
        fp.ToolCallsReply(get),
        fp.TextReply("Warm-up: the service is healthy."),
        fp.ToolCallsReply(hostile),
        fp.TextReply("Both pages were empty filler: nothing to diagnose there."),
    )
    await deployment.start()

    warm_thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=warm_thread))
    assert (await deployment.next_settle()).reason == "completed"
    await deployment.released(slack_session(warm_thread))
    before = peak_rss(deployment.worker.proc.pid)

    thread = sg.slack_ts()
    await deployment.slack(sg.slack_app_mention(ts=thread))
    settle = await deployment.next_settle(timeout_s=60)
    await deployment.released(slack_session(thread), timeout_s=60)
    growth = peak_rss(deployment.worker.proc.pid) - before

    assert settle.reason == "completed", settle
    assert growth < PEAK_GROWTH_LIMIT, f"peak RSS grew by {growth / 2**20:.1f} MiB"
    # Each page was fetched once: the lease held, so no takeover ran the batch again.
    hostile_hits = [h for h in slow_service.hits if h.path != "/ok"]
    assert sorted(h.path for h in hostile_hits) == ["/blank/5", "/gzip-bomb/1024"]
    bomb = next(h for h in hostile_hits if h.path == "/gzip-bomb/1024")
    assert bomb.bytes_sent < 8 * 2**20, "the bomb was read far past the byte limit"
    # The model read both results, each saying it was cut.
    results = [m for m in fake_llm.requests[3].messages if m["role"] == "tool"]
    assert len(results) == 2
    assert all("truncated" in m["content"].lower() for m in results), results
    # One card, ended answered.
    assert len(cards_in(slack_api, thread)) == 1
    assert "nothing to diagnose" in card_text(final_card(slack_api, thread))
    assert "LeaseLost" not in deployment.worker.log and "lease lost" not in deployment.worker.log
