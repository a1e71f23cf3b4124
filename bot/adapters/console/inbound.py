"""The console platform's inbound side: bearer-token check and normalization of its events.

The console (`chatops console`, `chatops demo`) is a third platform, not a shortcut: its
requests reach `POST /console/events` on the ingress and become `ChatEvent`s that take the same
route (dedupe, policy table, queue) as Slack's and Feishu's. Its cards come back on a Redis
stream (`bot.adapters.console.cards`).

Requests carry `Authorization: Bearer <CHATOPS_CONSOLE_TOKEN>`, compared in constant time. The
body is one JSON object, validated by `ConsoleMessage` or `ConsoleAction` (unknown fields are
refused, so a client's typo is a 400 rather than a silently dropped field):

```
{"type": "message", "channel": "ops", "thread": "t-1", "message_id": "m-1",
 "user": "alice", "text": "why is checkout slow?", "mention": true}
{"type": "action", "channel": "ops", "thread": "t-1", "user": "alice",
 "action": "stop", "value": "<turn id, the card's turn_id>"}
{"type": "action", "channel": "ops", "thread": "t-1", "user": "alice",
 "action": "wrong", "value": "<turn id of an answered card>"}
{"type": "action", "channel": "ops", "thread": "t-1", "user": "alice",
 "action": "approve", "value": "<call id>|<digest>"}
```

An Approve or Deny (`action` `approve` or `deny`) names the waiting call as the card's buttons
do (`CardApproval.value` in the card's JSON: the call id and the digest of the arguments the card
showed); a value of another shape is a 400. The approval desk decides it as it decides a Slack or
Feishu press (`bot.control.approval_desk`): responders, the two-person rule, the record.
`chatops console` sends one for `/approve <call id>` or `/deny <call id>`, taking the digest from
the card it drew (`bot.adapters.console.channel`).

Identity: the token proves only that a console sent the request, so `user` is whatever the
client says. Inside the bot it is `console:<user>` (`ChatEvent.person`), so it never equals a
Slack or Feishu user, and a bare id in `CHATOPS_ADMINS`/`CHATOPS_RESPONDERS` never matches it
(`bot.people`, docs/reliability.md X10). A `user` containing `:` (`slack:U0123`, `console:alice`) is
refused with a 400: it would read as another platform's id to a person, and stays unambiguous
this way.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from bot.control.approval_desk import parse_button_value
from bot.errors import MalformedRequest, NotAuthentic
from bot.events import AuthorKind, ChatEvent, EventKind, Platform

__all__ = [
    "CONSOLE_WORKSPACE",
    "ConsoleAction",
    "ConsoleMessage",
    "parse_console",
    "verify_console",
]

CONSOLE_WORKSPACE = "local"
"""The workspace of every console event (one console per deployment)."""

_Id = Annotated[str, StringConstraints(min_length=1, max_length=200)]
"""A channel, thread, message or user id: never empty, never absurdly long."""


def _bare_user(user: str) -> str:
    if ":" in user:
        raise ValueError("a console user is a bare name without ':' (it is console:<user> here)")
    return user


_User = Annotated[_Id, AfterValidator(_bare_user)]
"""Who a console client says it is: `console:<user>` inside the bot."""


class ConsoleMessage(BaseModel):
    """A message typed in a console thread."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["message"]
    channel: _Id
    thread: _Id
    """The thread's root: the first message's `message_id` for a new thread."""
    message_id: _Id
    """Unique per message: it is the event id too, so a client's retry is deduplicated."""
    user: _User
    text: str = Field(max_length=40_000)
    mention: bool = False
    """The message addresses the bot (starts an analysis outside a live thread)."""


class ConsoleAction(BaseModel):
    """A press of a card's button: Stop, Mark answer wrong, or Approve/Deny of a waiting call."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["action"]
    channel: _Id
    thread: _Id
    user: _User
    action: Literal["stop", "wrong", "approve", "deny"]
    value: _Id
    """Stop, wrong: the turn id the card showed (`turn_id` of the card's JSON). Approve, deny:
    the call's value the card shows (`<call id>|<digest>`)."""

    @model_validator(mode="after")
    def _names_a_call(self) -> ConsoleAction:
        if self.action in ("approve", "deny") and parse_button_value(self.value) is None:
            raise ValueError("value: an approve or deny names `<call id>|<digest>`, as the card")
        return self


_BODY: TypeAdapter[ConsoleMessage | ConsoleAction] = TypeAdapter(
    Annotated[ConsoleMessage | ConsoleAction, Field(discriminator="type")]
)


def verify_console(headers: Mapping[str, str], token: str) -> None:
    """Check the bearer token in constant time; raise `NotAuthentic` if it is missing or wrong."""
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not presented:
        raise NotAuthentic("missing bearer token")
    if not hmac.compare_digest(presented.strip().encode(), token.encode()):
        raise NotAuthentic("wrong bearer token")


def parse_console(body: bytes, *, now: float) -> ChatEvent:
    """Validate a console request body and normalize it; `now` is its `sent_at`.

    Raises:
        MalformedRequest: The body is not JSON or not one of the two shapes; the detail names
            the first offending field.
    """
    try:
        inbound = _BODY.validate_json(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "body"
        raise MalformedRequest(f"{where}: {first['msg']}") from exc
    if isinstance(inbound, ConsoleMessage):
        return _message(inbound, now)
    return _action(inbound, now)


def _message(message: ConsoleMessage, now: float) -> ChatEvent:
    return ChatEvent(
        platform=Platform.CONSOLE,
        event_id=message.message_id,
        workspace=CONSOLE_WORKSPACE,
        channel=message.channel,
        thread=message.thread,
        message_id=message.message_id,
        author=message.user,
        author_kind=AuthorKind.HUMAN,
        text=message.text.strip(),
        mentioned=message.mention,
        sent_at=now,
    )


def _action(action: ConsoleAction, now: float) -> ChatEvent:
    # Each press is its own event (like Slack's `action_ts`): pressing twice is two requests.
    return ChatEvent(
        platform=Platform.CONSOLE,
        event_id=f"action-{uuid.uuid4().hex}",
        kind=EventKind.ACTION,
        workspace=CONSOLE_WORKSPACE,
        channel=action.channel,
        thread=action.thread,
        message_id="",
        author=action.user,
        author_kind=AuthorKind.HUMAN,
        action=action.action,
        action_value=action.value,
        sent_at=now,
    )
