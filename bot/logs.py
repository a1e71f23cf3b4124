"""The processes' logs: one JSON object per line, with the ids of the work a line is about.

Contract:
- `configure_logging` runs once, at the start of a `chatops` command (never at import), and
  installs one stderr handler on the root logger: every logger (ours, uvicorn's, the SDKs')
  writes through it, so every line of a process has the same shape.
- A JSON line holds `time` (UTC, ISO 8601), `level`, `logger` and `message`, then `session`,
  `turn` and `event` when known, and `exc` for a traceback.
- The ids come from context variables, set where work for an event, a job or a turn begins
  (`bind`, `log_context`). asyncio gives each task a copy of its creator's context, so the
  lines of concurrent analyses on one worker each carry their own ids. A record's own
  `extra={"session": …}` wins over the context.
- What a message may say is the caller's business (docs/reliability.md A10: no secret, token or raw
  body at INFO; `tests/bot/test_log_hygiene.py`, `tests/bot/test_logs.py`); as a last guard, both
  formatters pass the message and any traceback through `agent_core._redaction.redact`
  (docs/reliability.md X5), which is linear in the text and costs microseconds on a log line.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import IO, Literal

from agent_core import redact

__all__ = [
    "CHATTY_LOGGERS",
    "LOG_LEVELS",
    "ContextFilter",
    "JsonFormatter",
    "LogFormat",
    "LogLevel",
    "TextFormatter",
    "bind",
    "configure_logging",
    "current_ids",
    "log_context",
]

LogFormat = Literal["json", "text"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
LOG_LEVELS: tuple[LogLevel, ...] = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
CHATTY_LOGGERS = ("apscheduler.executors.default", "apscheduler.scheduler", "httpx", "httpx2")
"""Loggers that say at INFO what every tick or request does (APScheduler: each reaper run,
every 10 s; httpx, and the openai SDK's httpx2: an `HTTP Request: POST …` line for every model
request and tool call, each formatted and redacted, 2.5% of a busy worker's CPU); above DEBUG
they log warnings only."""

_SESSION: ContextVar[str | None] = ContextVar("chatops_log_session", default=None)
_TURN: ContextVar[str | None] = ContextVar("chatops_log_turn", default=None)
_EVENT: ContextVar[str | None] = ContextVar("chatops_log_event", default=None)
_IDS: dict[str, ContextVar[str | None]] = {"session": _SESSION, "turn": _TURN, "event": _EVENT}


def bind(*, session: str | None = None, turn: str | None = None, event: str | None = None) -> None:
    """Set the ids for the rest of the current task (ids left None keep their value).

    For a task that does one piece of work (a worker's job): the task's context is its own
    copy, so nothing leaks to other tasks, and nothing needs resetting.
    """
    for name, value in (("session", session), ("turn", turn), ("event", event)):
        if value is not None:
            _IDS[name].set(value)


@contextmanager
def log_context(
    *, session: str | None = None, turn: str | None = None, event: str | None = None
) -> Iterator[None]:
    """Set the ids while the block runs, then restore the previous ones."""
    tokens: list[tuple[ContextVar[str | None], Token[str | None]]] = []
    for name, value in (("session", session), ("turn", turn), ("event", event)):
        if value is not None:
            tokens.append((_IDS[name], _IDS[name].set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current_ids() -> dict[str, str]:
    """The ids set in the current context (only those that are set)."""
    return {name: value for name, var in _IDS.items() if (value := var.get()) is not None}


class ContextFilter(logging.Filter):
    """Adds `session`, `turn` and `event` to each record (None when unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Stamp the context's ids on the record; never drops one."""
        for name, var in _IDS.items():
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for name in _IDS:
            if (value := getattr(record, name, None)) is not None:
                entry[name] = str(value)
        if record.exc_info:
            record.exc_text = record.exc_text or self.formatException(record.exc_info)
        if record.exc_text:
            entry["exc"] = redact(record.exc_text)
        if record.stack_info:
            entry["stack"] = redact(self.formatStack(record.stack_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """Plain lines for a terminal: time, level, logger, message, then the ids that are known."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """The record as a text line (its traceback, if any, below it)."""
        text = redact(super().format(record))
        ids = " ".join(
            f"{name}={value}" for name in _IDS if (value := getattr(record, name, None)) is not None
        )
        if not ids:
            return text
        head, newline, rest = text.partition("\n")
        return f"{head} [{ids}]{newline}{rest}"


class _Handler(logging.StreamHandler[IO[str]]):
    """The handler `configure_logging` installs (so a second call finds and replaces it)."""


def configure_logging(
    fmt: LogFormat = "json", level: LogLevel = "INFO", *, stream: IO[str] | None = None
) -> logging.Handler:
    """Send every logger's records to `stream` (stderr) in `fmt`, from `level` up.

    Replaces a handler an earlier call installed (and nothing else), so calling it twice is
    harmless. Returns the handler.
    """
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
        old.close()
    handler = _Handler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    for name in CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if level == "DEBUG" else logging.WARNING)
    return handler
