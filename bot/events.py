"""The platform-neutral chat event every adapter produces and the rest of `bot` consumes.

Adapters (`bot.adapters.slack`, `bot.adapters.feishu`, the console) turn a platform's
payload into a `ChatEvent`; policy, control parsing and the queue never see a platform payload.
`ChatEvent` is a pydantic model so it travels through Redis as validated JSON.

Identities are platform-qualified: inside the bot a person is `platform:id` (`slack:U0123`,
`feishu:ou_abc`, `console:alice`; `ChatEvent.person`), so one platform's user never equals
another's. A console client names its `user` freely (it holds the console token), which is why a
console user is always `console:...` and can never be a Slack or Feishu user, whatever it
writes. A scheduled job's runs are `scheduler:<job id>`, nobody's person.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from functools import cached_property

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ALERT",
    "SCHEDULER",
    "AlertMode",
    "AlertOrigin",
    "AuthorKind",
    "ChatEvent",
    "EventKind",
    "Platform",
    "is_unattended",
    "person_of",
    "session_id_for",
]

SCHEDULER = "scheduler"
"""The qualifier of a scheduled job's runs (`scheduler:<job id>`): no person asked for them."""
ALERT = "alert"
"""The qualifier of an alert's messages (`alert:<sender>`): no person asked for them either."""


class Platform(StrEnum):
    """Where an event came from."""

    SLACK = "slack"
    FEISHU = "feishu"
    CONSOLE = "console"
    SUBAGENT = "subagent"
    """A sub-agent's analysis: no chat thread; its card is its record in the parent's
    registry (`bot.control.subagents`)."""


class AuthorKind(StrEnum):
    """Who wrote a message, as far as the policy table cares."""

    HUMAN = "human"
    """A person."""
    SELF = "self"
    """This bot (its own posts echoed back by the platform)."""
    OTHER_BOT = "other_bot"
    """Another bot or app in the channel (alerting bots, CI bots, ...)."""
    SUBAGENT = "subagent"
    """A report from one of this bot's sub-agents."""
    SYSTEM = "system"
    """A platform or system notice (joins, topic changes, ...)."""
    SCHEDULER = "scheduler"
    """A message produced by this bot's scheduler."""
    ALERT = "alert"
    """An alert from a monitoring system (Alertmanager, Grafana, PagerDuty), posted by this bot:
    it opens an incident's analysis, and later notifications of the incident reach it as
    notices, never as steers."""


class EventKind(StrEnum):
    """What happened to a message."""

    MESSAGE = "message"
    """A new message."""
    EDIT = "edit"
    """An existing message was edited."""
    DELETE = "delete"
    """A message was deleted."""
    ACTION = "action"
    """A button on a card was pressed (stop, approve, deny)."""


class AlertMode(StrEnum):
    """What an alert route does with a new incident (`CHATOPS_ALERT_ROUTES`)."""

    NOTIFY = "notify"
    """Post the alert only."""
    TRIAGE = "triage"
    """A short analysis, with a small step budget (`CHATOPS_ALERT_TRIAGE_STEPS`)."""
    INVESTIGATE = "investigate"
    """A full analysis."""


class AlertOrigin(BaseModel):
    """The incident an alert-started analysis concerns, as its events carry it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sender: str
    """`alertmanager`, `grafana` or `pagerduty`."""
    incident: str
    """The sender's group: Alertmanager's and Grafana's `groupKey`, PagerDuty's incident id."""
    alert_name: str
    """The alert's name (`alertname`; PagerDuty: the incident's title)."""
    route: str
    """The route that took it (its `name`, or `route #N`)."""
    mode: AlertMode = AlertMode.INVESTIGATE
    severity: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    """The key labels, in the order shown (the group's common labels)."""
    fingerprints: tuple[str, ...] = ()
    """The fingerprints of the alerts that opened it."""
    root_link: str = ""
    """A link to the incident's root message, when the platform gives one."""


class ChatEvent(BaseModel):
    """One normalized inbound event."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    platform: Platform
    event_id: str
    """The platform's id of this delivery (Slack `event_id`, Feishu `header.event_id`/`uuid`)."""
    kind: EventKind = EventKind.MESSAGE
    workspace: str
    """Slack team id or Feishu tenant key."""
    channel: str
    thread: str
    """Thread root: Slack `thread_ts` (or the message's own `ts`), Feishu `root_id` (or the
    message id)."""
    message_id: str
    """Slack `ts`, Feishu `message_id`."""
    author: str
    """Platform user id (or app id) of the author."""
    author_name: str = ""
    author_kind: AuthorKind = AuthorKind.HUMAN
    text: str = ""
    """Text with the bot's mention stripped."""
    mentioned: bool = False
    """The bot was mentioned in the message."""
    action: str = ""
    """For `ACTION` events: the action id (`stop`, `approve`, `deny`)."""
    action_value: str = ""
    """For `ACTION` events: the button's value (turn id, approval id)."""
    sent_at: float = 0.0
    """When the platform says the message was sent (epoch seconds; 0 when unknown). A stop
    cancels requests sent before it, even when their delivery arrives after it."""
    tools: tuple[str, ...] | None = None
    """For a scheduled job's run or an alert's route: the only tools its analysis may use (None:
    all of them)."""
    alert: AlertOrigin | None = None
    """For an alert's messages: the incident they concern (its card names it)."""
    max_steps: int | None = None
    """For a triage route's analysis: model requests with tools per turn, at most (fewer than
    `CHATOPS_MAX_STEPS`; None: the worker's own)."""

    @cached_property
    def person(self) -> str:
        """Who wrote it, qualified by platform (`slack:U0123`, `console:alice`).

        What authority checks, the two-person rule and the audit trail's `who` compare; display
        keeps `author_name or author`.
        """
        if self.author_kind in (AuthorKind.SCHEDULER, AuthorKind.ALERT):
            return self.author  # `scheduler:<job id>` or `alert:<sender>` already
        return person_of(self.platform, self.author)

    @cached_property
    def session_id(self) -> str:
        """The stable session id of the event's thread."""
        return session_id_for(self.platform, self.workspace, self.channel, self.thread)


def session_id_for(platform: Platform | str, workspace: str, channel: str, thread: str) -> str:
    """Return the stable session id of a thread: short, URL- and Redis-key-safe."""
    raw = f"{platform}\x1f{workspace}\x1f{channel}\x1f{thread}".encode()
    return f"{platform}-{hashlib.sha256(raw).hexdigest()[:20]}"


def person_of(platform: Platform | str, author: str) -> str:
    """The qualified id of `author` on `platform`: `platform:author`.

    Idempotent: an id already qualified by this platform (or the scheduler's) is returned as it
    is, so a record written with either form compares alike. Slack and Feishu ids never contain
    `:`, and the console refuses a `user` that does (`bot.adapters.console.inbound`), so no
    author can pass for another platform's person.
    """
    head, sep, _ = author.partition(":")
    if sep and head in (str(platform), SCHEDULER, ALERT):
        return author
    return f"{platform}:{author}"


def is_unattended(requester: str) -> bool:
    """Whether `requester` is a scheduled job or an alert rather than a person."""
    return requester.startswith((f"{SCHEDULER}:", f"{ALERT}:"))
