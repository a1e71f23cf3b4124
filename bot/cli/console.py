"""`chatops console`: a person at a terminal, in a local channel with the bot.

Type a line to mention the bot (it starts an analysis); type while it runs to reply in its
thread (a redirect, or a stop phrase); `/stop` presses the live card's Stop button;
`/approve <call id>` and `/deny <call id>` press a waiting call's Approve or Deny (the id alone
may be left out when one call waits); `/wrong` presses "Mark answer wrong" on the thread's
newest answered card (later analyses of its alert are told); `/new` starts a new thread;
`/help` lists the commands; `/quit` (or end of input) leaves. A command is never sent as a
reply. Cards are drawn as the workers post them, a card's new state over its last one.

The lines go through the same ingress, queue, workers and card publisher as Slack and Feishu
(`bot.adapters.console.channel`). With `--ingress-url` it joins a running deployment (the same
`CHATOPS_CONSOLE_TOKEN` and `REDIS_URL`); without it, it starts the local stack first, as
`chatops demo` does.
"""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

import redis.asyncio as aioredis

from bot.adapters.console.channel import ConsoleChannel, ConsoleRefused, NoticeView, Screen
from bot.demo.stack import StackError, local_stack

__all__ = ["HELP", "run_console"]

HELP = (
    "type to talk to the bot · /stop presses Stop · /approve <call id> or /deny <call id>"
    " decides a waiting call · /wrong marks the thread's answer wrong · /new starts a thread"
    " · /help · /quit leaves"
)
"""The commands, as the console prints them at start and for `/help`."""


async def run_console(
    *, ingress_url: str | None, token: str | None, redis_url: str | None, out: TextIO | None = None
) -> int:
    """Run the console until `/quit` or end of input; the process exit status."""
    out = out or sys.stdout
    if ingress_url is not None:
        if not token or not redis_url:
            out.write("chatops console: --ingress-url needs CHATOPS_CONSOLE_TOKEN and REDIS_URL\n")
            return 2
        return await _session(ingress_url, token, redis_url, out)
    try:
        async with local_stack() as stack:
            out.write(f"local stack up: model {stack.model}, service {stack.service_url}\n")
            return await _session(stack.ingress_url, stack.console_token, stack.redis_url, out)
    except StackError as exc:
        out.write(f"chatops console: {exc}\n")
        return 2


async def _session(ingress_url: str, token: str, redis_url: str, out: TextIO) -> int:
    redis = aioredis.Redis.from_url(redis_url)
    channel = ConsoleChannel(ingress_url, token, redis)
    screen = Screen(out)
    try:
        await channel.start_reading()
        screen.say(HELP)
        left = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            cards = group.create_task(_show_cards(channel, screen, left))
            try:
                await _read_lines(channel, screen)
            finally:
                left.set()
                cards.cancel()
    finally:
        await channel.aclose()
        await redis.aclose()
    return 0


async def _show_cards(channel: ConsoleChannel, screen: Screen, left: asyncio.Event) -> None:
    """Draw cards until the person leaves.

    `left` ends the loop even when the cancellation does not: in some runs of the pty test the
    cancelled blocking `XREAD` (redis-py 8, hiredis) returned instead of raising, and the
    console went on reading cards after `/quit`. A read blocks at most `READ_BLOCK_MS`.
    """
    while not left.is_set():
        view = await channel.next_entry()
        if isinstance(view, NoticeView):
            screen.notice(view)
        elif view is not None:
            screen.card(view)


async def _read_lines(channel: ConsoleChannel, screen: Screen) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode(errors="replace"):
        text = line.strip()
        if text == "/quit":
            return
        try:
            await _act(channel, screen, text)
        except ConsoleRefused as exc:
            screen.say(f"(refused: {exc})")


async def _act(channel: ConsoleChannel, screen: Screen, text: str) -> None:
    if not text:
        return
    command, *rest_of = text.split(maxsplit=1)  # `text` is stripped and not empty
    rest = rest_of[0] if rest_of else ""
    match command:
        case "/stop":
            if not await channel.stop():
                screen.say("(nothing is running)")
        case "/approve":
            screen.say(f"({await channel.decide('approve', rest)})")
        case "/deny":
            screen.say(f"({await channel.decide('deny', rest)})")
        case "/wrong":
            screen.say(f"({await channel.mark_wrong()})")
        case "/new":
            channel.thread = ""
            screen.say("(a new thread: your next line mentions the bot)")
        case "/help":
            screen.say(HELP)
        case _:
            await channel.say(text)
