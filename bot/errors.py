"""Errors raised by `bot`, each mapped to one HTTP answer at the ingress.

```
BotError
├── BotConfigError        settings that cannot work (refuse to start)
├── RequestRejected       the request is refused; `status` is the HTTP answer
│   ├── NotAuthentic      401: signature, timestamp, token or replay check failed
│   ├── MalformedRequest  400: unreadable body, bad ciphertext, unknown shape
│   └── BodyTooLarge      413: over the size limit, refused before any signature work
└── QueueUnavailable      503: Redis could not take the event; the platform should retry
```

Bodies of 4xx answers are generic: they never echo exception text or request content.
"""

from __future__ import annotations

__all__ = [
    "BodyTooLarge",
    "BotConfigError",
    "BotError",
    "MalformedRequest",
    "NotAuthentic",
    "QueueUnavailable",
    "RequestRejected",
]


class BotError(Exception):
    """Base of every error `bot` raises."""


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
        self.detail = detail


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
