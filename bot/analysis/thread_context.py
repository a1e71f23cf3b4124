"""The thread's earlier messages as the first input of an analysis: read, bounded, quoted.

Contract:
- `ThreadContext.read` reads the thread of a mention that is a reply (a mention that opens its
  thread has nothing before it), through the event's platform's `ThreadReader`, within
  `timeout_s`. Platforms without a reader (the console, sub-agents) have no context.
- A read that fails (a `PlatformError`, the timeout, or any other exception of the reader's,
  logged with its traceback) never stops the analysis: it starts without context, and
  `Context.note` says why, for the card. A cancellation is never caught.
- An author's name is one line of at most `AUTHOR_CHARS` characters (its whitespace, line
  breaks included, collapsed to single spaces), so a name cannot start an entry of its own.
- `render_thread` bounds the text to `max_tokens` (`agent_core.estimate_tokens`, the framing
  counted): the root first, cut to fit if it must; then the most recent replies that fit, in
  order, under a line saying how many earlier replies were left out; then what the reader could
  not read. Linear in the thread.
- The text is quoted through the one untrusted-data framing (`aquote_untrusted`, a
  `chat_message` block: other people's words, never instructions; a large text is scrubbed in
  a worker thread) and enters the history as a `UserKind.CONTEXT` message before the task. The
  runbook URLs the thread names (an alert's `runbook_url`), redacted, are offered to the model
  inside that block, before the messages (so a cut keeps them): they are the thread's words.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from agent_core import QuoteKind, UserKind, UserMessage, aquote_untrusted, estimate_tokens, redact
from bot.errors import PlatformError
from bot.events import ChatEvent, Platform
from bot.publishing.thread_reader import Thread, ThreadMessage, ThreadReader

__all__ = [
    "DEFAULT_TOKENS",
    "READ_TIMEOUT_S",
    "Context",
    "ThreadContext",
    "render_thread",
]

log = logging.getLogger(__name__)

DEFAULT_TOKENS = 4000
"""`CHATOPS_THREAD_CONTEXT_TOKENS`' default."""
READ_TIMEOUT_S = 5.0
"""How long the analysis waits for the thread before it starts without it."""
FRAME_TOKENS = 120
"""What the framing costs (the untrusted-data note, the block's tags, the lead-in)."""
MAX_RUNBOOKS = 10
"""Runbook URLs offered at most."""
AUTHOR_CHARS = 100
"""An author's name is cut to this many characters."""
_REASON_CHARS = 200
_RUNBOOKS_LEAD = (
    "Runbooks the thread's messages link to (read them with your tools where they help):"
)


@dataclass(frozen=True, slots=True)
class Context:
    """What an analysis starts with besides its task."""

    message: UserMessage | None = None
    """The thread's earlier messages, quoted; None: nothing to add."""
    note: str = ""
    """For the card, when the thread could not be read."""


def _when(seconds: float) -> str:
    if seconds <= 0:
        return "time unknown"
    try:
        return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")
    except (OverflowError, OSError, ValueError):
        return "time unknown"


def _author(name: str) -> str:
    """`name` on one line: its whitespace runs as single spaces, cut to `AUTHOR_CHARS`."""
    return " ".join(name[: AUTHOR_CHARS * 4].split())[:AUTHOR_CHARS].rstrip() or "someone"


def _entry(message: ThreadMessage, text: str | None = None) -> str:
    kind = " (root)" if message.root else ""
    app = " (app)" if message.bot else ""
    body = message.text if text is None else text
    # Each body line indented: only a header starts a line, so no text can forge an entry.
    indented = "\n".join(f"  {line}" for line in body.splitlines())
    return f"[{_when(message.sent_at)}] {_author(message.author)}{app}{kind}:\n{indented}"


def _fitted_root(root: ThreadMessage, budget: int) -> tuple[str, int]:
    """The root's entry, cut until it costs at most `budget` tokens; "" when nothing fits."""
    for chars in (len(root.text), budget * 4, budget):
        entry = _entry(root, root.text[: max(0, chars)] + (" …" if chars < len(root.text) else ""))
        cost = estimate_tokens(entry)
        if cost <= budget:
            return entry, cost
    return "", 0


def runbooks_of(messages: Sequence[ThreadMessage]) -> tuple[str, ...]:
    """The runbook URLs the messages name, in order, without repeats, at most `MAX_RUNBOOKS`."""
    found: dict[str, None] = {}
    for message in messages:
        for url in message.runbooks:
            found.setdefault(url)
            if len(found) >= MAX_RUNBOOKS:
                return tuple(found)
    return tuple(found)


def _runbook_lines(runbooks: Sequence[str]) -> str:
    if not runbooks:
        return ""
    return _RUNBOOKS_LEAD + "".join(f"\n- {redact(url)}" for url in runbooks)


def render_thread(thread: Thread, max_tokens: int) -> tuple[str, str]:
    """The thread's text and the runbook lines to quote with it, within `max_tokens`.

    Returns:
        ("", "") when there is nothing to say or no room at all.
    """
    messages = thread.messages
    runbooks = _runbook_lines(runbooks_of(messages))
    budget = max_tokens - FRAME_TOKENS - estimate_tokens(runbooks)
    if not messages or budget <= 0:
        return "", ""
    root = messages[0] if messages[0].root else None
    replies = messages[1:] if root is not None else messages
    gap = f"… {thread.not_read} were not read …" if thread.not_read else ""
    budget -= estimate_tokens(gap) + 16  # room for the "left out" line
    head, used = _fitted_root(root, budget) if root is not None else ("", 0)
    kept: list[str] = []
    for reply in reversed(replies):
        entry = _entry(reply)
        cost = estimate_tokens(entry) + 1  # and the blank line before it
        if used + cost > budget:
            break
        kept.append(entry)
        used += cost
    left_out = len(replies) - len(kept)
    noun = "reply" if left_out == 1 else "replies"
    skipped = f"… {left_out:,} earlier {noun} left out …" if left_out else ""
    parts = [head, skipped, *reversed(kept), gap]
    text = "\n\n".join(part for part in parts if part)
    return (text, runbooks) if head or kept else ("", "")


class ThreadContext:
    """Reads a mention's thread for the first turn of its analysis. One per worker."""

    def __init__(
        self,
        readers: Mapping[Platform, ThreadReader],
        *,
        max_tokens: int = DEFAULT_TOKENS,
        timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        """Read with `readers`, keep `max_tokens` of context (0: none), wait `timeout_s`."""
        self._readers = dict(readers)
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s

    async def read(self, event: ChatEvent) -> Context:
        """The context of the analysis `event` starts; empty when there is none.

        Raises:
            asyncio.CancelledError: The analysis was cancelled (never caught here).
        """
        reader = self._readers.get(event.platform)
        if reader is None or self._max_tokens <= 0 or event.thread == event.message_id:
            return Context()
        try:
            async with asyncio.timeout(self._timeout_s):
                thread = await reader.read(event)
        except TimeoutError:
            log.warning("thread of %s not read within %s s", event.session_id, self._timeout_s)
            return Context(note=_without(f"reading it took over {self._timeout_s:g} s"))
        except PlatformError as exc:
            log.warning("thread of %s not read: %s", event.session_id, exc)
            return Context(note=_without(str(exc)[:_REASON_CHARS]))
        except Exception as exc:  # a reader's bug never blocks the analysis
            log.warning("thread of %s not read", event.session_id, exc_info=True)
            return Context(note=_without(f"the reader failed: {type(exc).__name__}"))
        text, runbooks = await asyncio.to_thread(render_thread, thread, self._max_tokens)
        if not text:
            return Context()
        whole = f"{runbooks}\n\n{text}" if runbooks else text
        quoted = await aquote_untrusted("thread", whole, kind=QuoteKind.CHAT_MESSAGE)
        return Context(UserMessage(content=quoted, kind=UserKind.CONTEXT))


def _without(reason: str) -> str:
    return f"Started without the thread's earlier messages: they could not be read ({reason})."
