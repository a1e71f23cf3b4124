"""The steer-eligibility policy (docs/design.md), and which of its decisions need authority.

Contract: every inbound event is classified by one pure lookup in `POLICY`, a frozen mapping over
the full product (author kind × event kind × thread relation × run state × marker) to a
`Decision`. It is written below as a table of rows with their reasons (`_RULES_TABLE`, parsed into
`RULES`); expanding the rows refuses two that disagree on a cell, and a test walks the full
product, so an enum member added without a row fails. The principles the rows encode:

- Only a person can steer, stop or approve. This bot's own posts and platform notices are never
  input; sub-agent reports, scheduler messages and alerts never cut a turn (they wait for it to
  end); other bots may open an analysis with an @mention and are otherwise ignored.
- A plain reply steers only while the thread's session has a turn live or queued; otherwise a
  person needs the explicit marker, an @mention, to start one.
- A stop is never dropped: it is recorded in any state (a tombstone also covers a request sent
  before the stop that reaches the bot after it, docs/design.md §Invariants I4).
- An edit reads like a new reply but never starts a turn; a deletion does nothing.
- A person's @mention whose whole text is a kill switch command goes to the kill switch, in any
  thread and state: it is never a steer or a start, and only an admin may pull it.

Who may do what is a second table, `AUTHORITY` in `bot.policy.authority`; `authorize` here checks
a decision against it at ingress (`required_action`: which decisions need authority at all).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final, NamedTuple, TypeVar

from bot.events import AuthorKind, ChatEvent, EventKind
from bot.policy.authority import AUTHORITY, Action, Role, may
from bot.policy.control_phrases import (
    KILL_SWITCH_INTENTS,
    ControlCommand,
    ControlIntent,
    parse_control,
)

__all__ = [
    "POLICY",
    "RULES",
    "Decision",
    "Marker",
    "PolicyKey",
    "Rule",
    "RunState",
    "ThreadRelation",
    "Verdict",
    "authorize",
    "classify",
    "decide",
    "expand",
    "marker_of",
    "parse_rules",
    "required_action",
]


class ThreadRelation(StrEnum):
    """How the event's thread relates to this bot."""

    NO_SESSION = "no_session"
    """The bot has no session in this thread (a new top-level message, or a thread it never
    joined). The run state is then always `IDLE`; the other states are covered for totality."""
    BOT_THREAD = "bot_thread"
    """The thread has a session of this bot (it was started there before)."""


class RunState(StrEnum):
    """The session's turns as the ingress sees them when the event arrives."""

    IDLE = "idle"
    """No turn is live or queued."""
    QUEUED = "queued"
    """A turn waits in the queue and none is live; steers are absorbed when it starts."""
    RUNNING = "running"
    """A turn is live (whether or not another waits behind it)."""


class Marker(StrEnum):
    """What the event explicitly asks of the bot, beyond its text (see `marker_of`)."""

    NONE = "none"
    """Plain text, no mention of the bot, not a control command."""
    MENTION = "mention"
    """The bot is @mentioned and the text is not a control command. A direct message to the bot
    counts as a mention: the adapter sets `ChatEvent.mentioned` for it."""
    STOP = "stop"
    """A stop, pause or cancel command, in text or the card's Stop button."""
    RESUME = "resume"
    """A resume or continue command."""
    APPROVAL = "approval"
    """An approve or deny button on a card. Never produced by text."""
    KILL_SWITCH = "kill_switch"
    """The bot is @mentioned and the text is a kill switch command (`killswitch on|off|status`).
    Without the mention such a text is plain (`NONE`): the switch concerns every analysis, so
    it needs the explicit marker."""


class Decision(StrEnum):
    """What the ingress does with the event."""

    START = "start"
    """Enqueue a new turn for the session (creating the session if needed)."""
    STEER = "steer"
    """Queue the text as a correction: the live turn is suspended at its next cut, and a queued
    turn takes it in when it starts."""
    STOP = "stop"
    """Signal the live turn to stop and tombstone the queued ones (a no-op when none exist)."""
    APPROVE = "approve"
    """Hand the button press to the approval plane (which checks the approver and staleness)."""
    IGNORE = "ignore"
    """Drop the event (acknowledged to the platform, never shown to the model)."""
    QUEUE = "queue"
    """Keep the event as input for the session's next turn, which starts after the live or
    queued one ends; never cuts a turn."""
    KILL_SWITCH = "kill_switch"
    """Hand the command to the kill switch (`bot.control.killswitch`, which checks the person is an
    admin); nothing is written to the session, and the model never sees it."""


class PolicyKey(NamedTuple):
    """One cell of the policy table."""

    author: AuthorKind
    event: EventKind
    relation: ThreadRelation
    state: RunState
    marker: Marker


_RULES_TABLE: Final = """
# This bot's own posts (Slack echoes them back) are never input.
self                *             *           *               *                         ignore
# Platform notices (joins, topic changes) carry nothing to act on.
system              *             *           *               *                         ignore
# A deletion cannot take back what the model has read; to brake, say stop.
*                   delete        *           *               *                         ignore
# Approvals come only from a button press, never from text.
*                   message|edit  *           *               approval                  ignore
# Card buttons: only people press them. Stop stops in any state (a no-op when idle); the
# approval plane checks the approver and the approval's age.
human               action        *           *               stop                      stop
human               action        *           *               approval                  approve
human               action        *           *               none|mention|resume       ignore
human               action        *           *               kill_switch               ignore
other_bot|subagent  action        *           *               *                         ignore
scheduler           action        *           *               *                         ignore
# A person's stop is never dropped: with nothing running it still tombstones a request sent
# before it that reaches the bot later (docs/design.md §Invariants I4).
human               message|edit  *           *               stop                      stop
# The kill switch is an admin's command to the whole bot, never a session's input: it goes to
# the switch (which checks the person is an admin) whatever the thread and state. An edit never
# pulls it: one command is one message, and an edit can arrive long after.
human               message       *           *               kill_switch               kill_switch
human               edit          *           *               kill_switch               ignore
# A person's reply (or edit) steers a turn that is live, or queued (it joins the turn when it
# starts); resume is moot then.
human               message|edit  bot_thread  queued|running  none|mention              steer
human               message|edit  bot_thread  queued|running  resume                    ignore
# Otherwise a person needs the explicit marker, a mention, to start a turn, and resume continues
# a stopped analysis; a plain message is people talking to each other.
human               message       no_session  *               mention                   start
human               message       no_session  *               none|resume               ignore
human               message       bot_thread  idle            mention|resume            start
human               message       bot_thread  idle            none                      ignore
# An edit never starts a turn: one mention is one run.
human               edit          *           idle            none|mention|resume       ignore
human               edit          no_session  queued|running  none|mention|resume       ignore
# Another bot may open an analysis with a mention (an alerting bot); it never converses with a
# session, so two bots cannot ping-pong in a thread.
other_bot           message       no_session  *               mention                   start
other_bot           message       no_session  *               none|stop|resume          ignore
other_bot           message       no_session  *               kill_switch               ignore
other_bot           message|edit  bot_thread  *               *                         ignore
other_bot           edit          no_session  *               *                         ignore
# Sub-agent reports and scheduled jobs speak to the session by construction (their text is
# never a command): they wake an idle session, and wait for a live or queued turn, never cut it.
subagent|scheduler  message       bot_thread  idle            none|mention|stop|resume  start
subagent|scheduler  message       bot_thread  idle            kill_switch               start
subagent|scheduler  message       bot_thread  queued|running  none|mention|stop|resume  queue
subagent|scheduler  message       bot_thread  queued|running  kill_switch               queue
scheduler           message       no_session  *               none|mention|stop|resume  start
scheduler           message       no_session  *               kill_switch               start
subagent            message       no_session  *               none|mention|stop|resume  ignore
subagent            message       no_session  *               kill_switch               ignore
subagent|scheduler  edit          *           *               *                         ignore
# An alert opens its incident's analysis in a thread of its own; the incident's later
# notifications (alerts joining, resolved) reach a live or queued turn as notices and never cut
# it, and wake nothing once the analysis has ended: they are posted in the thread only.
alert               message       no_session  *               none|mention|stop|resume  start
alert               message       no_session  *               kill_switch               start
alert               message       bot_thread  idle            none|mention|stop|resume  ignore
alert               message       bot_thread  idle            kill_switch               ignore
alert               message       bot_thread  queued|running  none|mention|stop|resume  queue
alert               message       bot_thread  queued|running  kill_switch               queue
alert               action|edit   *           *               *                         ignore
"""
"""The policy as written: author, event, relation, state, marker, decision. `*` is every member,
`a|b` either; a comment gives the reason of the rows below it. Rows may overlap only where they
agree."""

E = TypeVar("E", bound=StrEnum)


def _members(field: str, enum: type[E]) -> frozenset[E]:
    if field == "*":
        return frozenset(enum)
    return frozenset(enum(value) for value in field.split("|"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """One row of the policy: where it applies, what it decides there, and why."""

    decision: Decision
    why: str
    """The comment above the row (logged with each decision)."""
    authors: frozenset[AuthorKind]
    events: frozenset[EventKind]
    relations: frozenset[ThreadRelation]
    states: frozenset[RunState]
    markers: frozenset[Marker]

    @classmethod
    def parse(cls, row: str, why: str) -> Rule:
        """Parse one row of `_RULES_TABLE`.

        Raises:
            ValueError: The row has the wrong number of fields or an unknown value.
        """
        fields = row.split()
        if len(fields) != 6:
            raise ValueError(f"a policy row has 6 fields: {row!r}")
        author, event, relation, state, marker, decision = fields
        return cls(
            decision=Decision(decision),
            why=why,
            authors=_members(author, AuthorKind),
            events=_members(event, EventKind),
            relations=_members(relation, ThreadRelation),
            states=_members(state, RunState),
            markers=_members(marker, Marker),
        )

    def keys(self) -> Iterator[PolicyKey]:
        """Every cell this rule covers."""
        cells = (self.authors, self.events, self.relations, self.states, self.markers)
        return (PolicyKey(*cell) for cell in itertools.product(*cells))


def parse_rules(table: str) -> tuple[Rule, ...]:
    """Parse a policy table written like `_RULES_TABLE` into its rules."""
    rules: list[Rule] = []
    why: list[str] = []
    after_row = True
    for line in filter(None, (line.strip() for line in table.splitlines())):
        if line.startswith("#"):
            why = [] if after_row else why
            why.append(line.removeprefix("#").strip())
            after_row = False
        else:
            rules.append(Rule.parse(line, " ".join(why)))
            after_row = True
    return tuple(rules)


RULES: Final[tuple[Rule, ...]] = parse_rules(_RULES_TABLE)
"""The policy's rules, in the order written."""


def expand(rules: Iterable[Rule]) -> Mapping[PolicyKey, Rule]:
    """Return the frozen cell → rule mapping of `rules`.

    Raises:
        ValueError: Two rules cover one cell with different decisions.
    """
    table: dict[PolicyKey, Rule] = {}
    for rule in rules:
        for key in rule.keys():
            known = table.setdefault(key, rule)
            if known.decision is not rule.decision:
                raise ValueError(f"{key}: {known.why!r} ({known.decision}) vs {rule.why!r}")
    return MappingProxyType(table)


_RULE_OF: Final = expand(RULES)
POLICY: Final[Mapping[PolicyKey, Decision]] = MappingProxyType(
    {key: rule.decision for key, rule in _RULE_OF.items()}
)
"""The policy table: every cell of the full product, frozen."""

_ACTION_MARKERS: Final[Mapping[str, Marker]] = MappingProxyType(
    {"stop": Marker.STOP, "approve": Marker.APPROVAL, "deny": Marker.APPROVAL}
)


def decide(
    *,
    author: AuthorKind,
    event: EventKind,
    relation: ThreadRelation,
    state: RunState,
    marker: Marker,
) -> Decision:
    """Look one cell up in `POLICY`."""
    return POLICY[PolicyKey(author, event, relation, state, marker)]


def marker_of(event: ChatEvent) -> Marker:
    """Return what `event` explicitly asks for: a button, a control command, or a mention."""
    return _marker(event, _command_of(event))


def _command_of(event: ChatEvent) -> ControlCommand | None:
    if event.kind in (EventKind.MESSAGE, EventKind.EDIT):
        return parse_control(event.text)
    return None


def _marker(event: ChatEvent, command: ControlCommand | None) -> Marker:
    if event.kind is EventKind.ACTION:
        return _ACTION_MARKERS.get(event.action, Marker.NONE)
    if command is not None and command.intent in KILL_SWITCH_INTENTS:
        return Marker.KILL_SWITCH if event.mentioned else Marker.NONE
    if command is not None:
        return Marker.RESUME if command.intent is ControlIntent.RESUME else Marker.STOP
    return Marker.MENTION if event.mentioned and event.kind is not EventKind.DELETE else Marker.NONE


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The policy's answer for one event, with what the ingress needs to act on it."""

    decision: Decision
    marker: Marker
    command: ControlCommand | None
    """The text parsed as a control command, for the acknowledgement (pause and stop share a
    decision, not a wording). Act only on `decision`: a sub-agent's "stop" parses, and is queued
    as content."""
    reason: str
    """The deciding rule's `why`, for logs."""


def classify(event: ChatEvent, *, relation: ThreadRelation, state: RunState) -> Verdict:
    """Classify `event`, given its thread's relation to the bot and its session's run state."""
    command = _command_of(event)
    marker = _marker(event, command)
    rule = _RULE_OF[PolicyKey(event.author_kind, event.kind, relation, state, marker)]
    return Verdict(decision=rule.decision, marker=marker, command=command, reason=rule.why)


_NEEDS: Final[Mapping[Decision, Action]] = MappingProxyType(
    {
        Decision.STOP: Action.STOP,
        Decision.STEER: Action.STEER,
        Decision.APPROVE: Action.APPROVE,
        Decision.KILL_SWITCH: Action.KILL_SWITCH,
    }
)


def required_action(decision: Decision) -> Action | None:
    """Return the action a decision needs authority for, or `None` when it needs none."""
    return _NEEDS.get(decision)


def authorize(
    decision: Decision,
    roles: frozenset[Role],
    *,
    is_requester: bool = False,
    authority: Mapping[Action, frozenset[Role]] = AUTHORITY,
) -> Decision:
    """Return `decision` if the person may take it, else `Decision.IGNORE`."""
    action = required_action(decision)
    if action is None or may(action, roles, is_requester=is_requester, authority=authority):
        return decision
    return Decision.IGNORE
