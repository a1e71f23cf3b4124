"""Every error `bot` raises, in one tree, each carrying the session and turn it concerns.

```
BotError                  base; `session_id` and `turn_id` when the error concerns one
├── BotConfigError        settings that cannot work (refuse to start)
├── RequestRejected       the request is refused; `status` is the HTTP answer
│   ├── NotAuthentic      401: signature, timestamp, token or replay check failed
│   ├── MalformedRequest  400: unreadable body, bad ciphertext, unknown shape
│   └── BodyTooLarge      413: over the size limit, refused before any signature work
├── QueueUnavailable      503: Redis could not take the event; the platform should retry
├── LeaseLost             the session's lease expired or was taken over: stop writing for it
├── PlatformError         an outbound platform call failed (`bot.publishing.platform`)
│   ├── PlatformRateLimited  429; `retry_after_s` says when to try again
│   ├── PlatformUnavailable  timeout, connection failure or 5xx: the same call may succeed later
│   ├── CardGone             the card's message was deleted or recalled
│   └── PlatformRejected     any other refusal: retrying will not help
├── ConsoleRefused        the ingress refused a console event (`status` and its message)
└── StackError            a part of the demo's local stack would not start
```

An error that concerns a session or a turn says so: pass `session_id=`/`turn_id=` where it is
raised, or call `concerning(...)` where it passes through code that knows them (the first
values set are kept). Both appear in `str(error)`, so a log line names them. Bodies of 4xx
answers stay generic: the ingress answers with `public`, never with exception text.
"""

from __future__ import annotations

from typing import Self

__all__ = [
    "BodyTooLarge",
    "BotConfigError",
    "BotError",
    "CardGone",
    "ConsoleRefused",
    "LeaseLost",
    "MalformedRequest",
    "NotAuthentic",
    "PlatformError",
    "PlatformRateLimited",
    "PlatformRejected",
    "PlatformUnavailable",
    "QueueUnavailable",
    "RequestRejected",
    "StackError",
]


class BotError(Exception):
    """Base of every error `bot` raises.

    Attributes:
        session_id: The session the error concerns; empty when none.
        turn_id: The turn the error concerns; empty when none.
    """

    def __init__(self, detail: str = "", *, session_id: str = "", turn_id: str = "") -> None:
        super().__init__(detail)
        self.detail = detail
        self.session_id = session_id
        self.turn_id = turn_id

    def concerning(self, session_id: str = "", turn_id: str = "") -> Self:
        """Note the session and turn this error concerns, unless already known; returns self."""
        self.session_id = self.session_id or session_id
        self.turn_id = self.turn_id or turn_id
        return self

    def __str__(self) -> str:
        where = ", ".join(
            f"{name} {value}"
            for name, value in (("session", self.session_id), ("turn", self.turn_id))
            if value
        )
        return f"{self.detail} ({where})" if where else self.detail


class BotConfigError(BotError):
    """The settings cannot work; raised at start-up, before anything is served."""


class RequestRejected(BotError):
    """An inbound request that is refused.

    Attributes:
        status: The HTTP status to answer with.
        public: The generic reason given in the response body.
    """

    status = 400
    public = "bad request"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.public)


class NotAuthentic(RequestRejected):
    """The request could not be proven to come from the platform."""

    status = 401
    public = "request verification failed"


class MalformedRequest(RequestRejected):
    """The request is authentic enough to read but cannot be understood."""

    status = 400
    public = "malformed request"


class BodyTooLarge(RequestRejected):
    """The body exceeds the size limit."""

    status = 413
    public = "request body too large"


class QueueUnavailable(BotError):
    """Redis could not take the event; answering 503 makes the platform deliver it again."""


class LeaseLost(BotError):
    """The lease expired or was taken over: the holder must stop writing for the session."""


class PlatformError(BotError):
    """An outbound platform call failed."""


class PlatformRateLimited(PlatformError):
    """HTTP 429 (Slack `ratelimited`, Feishu 99991400 / 230020 frequency limits)."""

    def __init__(self, retry_after_s: float, detail: str = "") -> None:
        super().__init__(detail or f"rate limited, retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class PlatformUnavailable(PlatformError):
    """A timeout, connection failure or 5xx: the same call may succeed later."""


class CardGone(PlatformError):
    """The card's message no longer exists (deleted or recalled by a person)."""


class PlatformRejected(PlatformError):
    """Any other refusal (bad token, invalid blocks, no permission): retrying will not help."""


class ConsoleRefused(BotError):
    """The ingress refused a console event (its status and message say why)."""


class StackError(BotError):
    """A part of the demo's local stack would not start."""
