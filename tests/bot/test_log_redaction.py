"""Log lines never carry a secret (docs/reliability.md X5): both formatters redact.

Why this way: a real `logging.Logger` writes through the handler `configure_logging` installs
into a `StringIO`, so the test reads exactly what a process would print on stderr.
"""

from __future__ import annotations

import io
import json
import logging

import pytest

from bot.logs import configure_logging

SECRET = "hunter2-" + "0123456789"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_secret_in_a_message_or_traceback_is_redacted(fmt: str) -> None:
    """X5: the message's secret and the exception's secret are both replaced."""
    stream = io.StringIO()
    handler = configure_logging(fmt, "INFO", stream=stream)  # type: ignore[arg-type]
    try:
        log = logging.getLogger("test.log_redaction")
        log.warning("connecting with DB_PASSWORD=%s", SECRET)
        try:
            raise RuntimeError(f"redis://:{SECRET}@redis:6379 refused")
        except RuntimeError:
            log.exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    out = stream.getvalue()
    assert SECRET not in out
    assert out.count("[REDACTED:") >= 2
    if fmt == "json":
        first = json.loads(out.splitlines()[0])
        assert first["message"] == "connecting with DB_PASSWORD=[REDACTED:credential]"
