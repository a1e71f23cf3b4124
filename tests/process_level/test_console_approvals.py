"""`/approve` and `/deny` typed in `chatops console`, through a pseudo-terminal.

Why this way: the bug was a console that sent `/approve …` as a reply (it redirected the
analysis and the call was answered "interrupted"), so the test types the very command the card
prints, as a person does, into `chatops console --ingress-url` on a pseudo-terminal, and checks
what the screen shows. Everything behind it runs as operators run it: `chatops serve` and
`chatops worker` processes on a real Redis, the model the fake OpenAI provider (its script asks
to restart a pod), and `restart_pod` a real MCP server over stdio declared `side_effect`, which
journals each call it receives, so "it ran" is read from the server. The terminal is read until
the console exits after `/quit` and killed past the timeout (`tests.bot.demo.test_demo`), so no
process outlives the test. Marked slow: three processes start.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.bot.control.test_approvals import RESTART, mcp_servers, restarts
from tests.bot.demo.test_demo import CHATOPS, Terminal
from tests.fakes import openai_provider as fp
from tests.processes import Chatops

pytestmark = pytest.mark.slow

TOKEN = "console-pty-approvals-token"
APPROVE_LINE = r"\[ /approve (call_\w+) \] Approve"


class Console(Terminal):
    """`chatops console --ingress-url URL` on a pseudo-terminal."""

    def __init__(self, ingress_url: str, env: dict[str, str]) -> None:
        self._main, child = pty.openpty()
        self.proc = subprocess.Popen(
            [CHATOPS, "console", "--ingress-url", ingress_url],
            stdin=child,
            stdout=child,
            stderr=child,
            env={**os.environ, **env},
            close_fds=True,
        )
        os.close(child)
        self.screen = ""


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return tmp_path / "mcp-calls.log"


@pytest.fixture
async def ingress(
    redis_server, redis_client, fake_llm, journal
) -> AsyncIterator[tuple[str, dict[str, str]]]:
    """`chatops serve` and one `chatops worker`; the ingress's URL and the console's environment.

    `redis_client` flushes Redis first: a flush after the worker started drops its consumer group.
    """
    env = {
        "REDIS_URL": redis_server,
        "OPENAI_BASE_URL": fake_llm.base_url,
        "OPENAI_API_KEY": "test",
        "CHATOPS_CONSOLE_TOKEN": TOKEN,
        "CHATOPS_MCP_SERVERS": mcp_servers(journal, "side_effect"),
        "CHATOPS_RESPONDERS": "console:you",  # the console's user is `you`
        "CHATOPS_INTENT_CHECK": "off",  # the scripts count model requests
    }
    serve, base = await Chatops.serve(env)
    processes = [serve]
    try:
        processes.append(await Chatops.worker(env))
        yield base, {"CHATOPS_CONSOLE_TOKEN": TOKEN, "REDIS_URL": redis_server}
    finally:
        for process in reversed(processes):
            await process.stop()


def restart_then(answer: str) -> tuple[fp.ToolCallsReply, fp.TextReply]:
    return fp.ToolCallsReply([fp.ToolCall(RESTART, {"pod": "checkout-7f9"})]), fp.TextReply(answer)


async def test_approve_typed_in_the_console_runs_the_call_and_the_answer_arrives(
    ingress, fake_llm, journal
) -> None:
    fake_llm.script(*restart_then("Restarted checkout-7f9; errors stopped."))
    console = Console(*ingress)
    try:
        seen = await console.shows(r"/approve <call id>")  # the commands, at start
        console.type("/help")
        seen = await console.shows(r"/deny <call id>", after=seen)
        console.type("checkout is down, restart the pod")
        seen = await console.shows(r"Waiting for approval", after=seen)
        seen = await console.shows(APPROVE_LINE, after=seen)
        call_id = _shown_call(console.screen, seen)
        # The card's Deny line follows its Approve line; a read can end between the two.
        await console.shows(rf"\[ /deny {call_id} \] Deny", after=seen)
        assert restarts(journal) == 0 and len(fake_llm.requests) == 1

        console.type(f"/approve {call_id}")
        seen = await console.shows(r"\(Approved: the call runs now\.\)", after=seen)
        await console.shows(r"Restarted checkout-7f9; errors stopped\.", after=seen)
    finally:
        status = console.close()
    assert status == 0, console.screen[-3000:]
    assert restarts(journal) == 1
    assert len(fake_llm.requests) == 2
    results = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert len(results) == 1 and "restart" in results[0]["content"]
    assert "interrupted" not in results[0]["content"]
    # The command was a press, never a reply: no user message in the thread but the mention.
    users = [m for m in fake_llm.requests[1].messages if m["role"] == "user"]
    assert len(users) == 1 and "/approve" not in users[0]["content"]


async def test_deny_typed_in_the_console_answers_the_call_denied(
    ingress, fake_llm, journal
) -> None:
    fake_llm.script(*restart_then("Left the pod alone."))
    console = Console(*ingress)
    try:
        seen = await console.shows(r"/approve <call id>")
        console.type("checkout is down, restart the pod")
        seen = await console.shows(APPROVE_LINE, after=seen)
        console.type("/approve call_nobody_asked")  # no card shows it: nothing is sent
        seen = await console.shows(r"no card here shows a call 'call_nobody_asked'", after=seen)
        console.type("/deny")  # the one waiting call
        seen = await console.shows(r"\(Denied: the call will not run\.\)", after=seen)
        await console.shows(r"Left the pod alone\.", after=seen)
    finally:
        status = console.close()
    assert status == 0, console.screen[-3000:]
    assert restarts(journal) == 0
    assert len(fake_llm.requests) == 2
    results = [m for m in fake_llm.requests[1].messages if m["role"] == "tool"]
    assert results[-1]["content"].startswith("denied by console:you")
    users = [m for m in fake_llm.requests[1].messages if m["role"] == "user"]
    assert len(users) == 1


def _shown_call(screen: str, end: int) -> str:
    """The call id of the last `[ /approve <call id> ] Approve` line before `end`."""
    *_, last = re.finditer(APPROVE_LINE, screen[:end])
    return last.group(1)
