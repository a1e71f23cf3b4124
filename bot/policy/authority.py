"""Who may stop, steer, approve or pull the kill switch: the roles, the actions, the table.

Contract: `AUTHORITY` (action → roles) is frozen data, checked by `bot.policy.steer.authorize` at
ingress and by `may` again in the worker. `docs/control-commands.md` tells users both. Roles are
held by platform-qualified people (`ChatEvent.person`, `bot.people`): a console user never holds
a Slack or Feishu user's roles.

The two-person rule (`TWO_PERSON`): the second person is neither the one who asked for the
analysis nor anyone who took part in it (`PARTICIPANTS`: whose redirect or answer reached it,
docs/reliability.md X11). A call nobody asked for (a scheduled job's run) has no first person, so it
needs two distinct approvers instead (`approvals_needed`, X12).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Final

__all__ = [
    "AUTHORITY",
    "PARTICIPANTS",
    "TWO_PERSON",
    "UNATTENDED_APPROVALS",
    "Action",
    "Role",
    "approvals_needed",
    "may",
]


class Role(StrEnum):
    """What a person is, relative to a session."""

    INITIATOR = "initiator"
    """The person whose mention started the session."""
    CHANNEL_MEMBER = "channel_member"
    """Anyone who can post in the session's channel."""
    RESPONDER = "responder"
    """A member of a responder group configured by the operator (on-call, SRE)."""
    ADMIN = "admin"
    """A person the operator configured as an admin of the whole bot (`CHATOPS_ADMINS`)."""
    PARTICIPANT = "participant"
    """A person whose redirect or answer reached the session's analysis (a steer, a message
    kept for its next turn, a follow-up request): they shaped what it asks for."""


class Action(StrEnum):
    """A privileged thing a person asks of a session."""

    STOP = "stop"
    """Stop or pause the session's turns."""
    STEER = "steer"
    """Redirect a live or queued turn."""
    APPROVE = "approve"
    """Approve or deny a tool call that needs approval."""
    APPROVE_DESTRUCTIVE = "approve_destructive"
    """Approve or deny a tool call marked destructive (two-person rule)."""
    KILL_SWITCH = "kill_switch"
    """Turn the kill switch on or off, or ask its state: it acts on every session."""


_EVERYONE: Final = frozenset(Role)
AUTHORITY: Final[Mapping[Action, frozenset[Role]]] = MappingProxyType(
    {
        # An incident channel is the team's space: anyone in it may brake or redirect.
        Action.STOP: _EVERYONE,
        Action.STEER: _EVERYONE,
        # Approvals fail closed: with no responder groups configured, nobody can approve.
        Action.APPROVE: frozenset({Role.RESPONDER}),
        Action.APPROVE_DESTRUCTIVE: frozenset({Role.RESPONDER}),
        # The kill switch stops every team's analyses: it fails closed like approvals, and no
        # other role implies it.
        Action.KILL_SWITCH: frozenset({Role.ADMIN}),
    }
)
"""The default authority table: which roles may take each action."""

TWO_PERSON: Final[frozenset[Action]] = frozenset({Action.APPROVE_DESTRUCTIVE})
"""Actions the person who asked for them may not approve themselves (docs/reliability.md A5), nor
anyone who took part in the analysis (`PARTICIPANTS`, X11)."""

PARTICIPANTS: Final[frozenset[Role]] = frozenset({Role.INITIATOR, Role.PARTICIPANT})
"""Roles of the people who shaped an analysis: never its second person."""

UNATTENDED_APPROVALS: Final[Mapping[Action, int]] = MappingProxyType(
    {Action.APPROVE: 1, Action.APPROVE_DESTRUCTIVE: 2}
)
"""Distinct approvals a call nobody asked for (a scheduled job's) needs, per action (X12)."""


def may(
    action: Action,
    roles: frozenset[Role],
    *,
    is_requester: bool = False,
    authority: Mapping[Action, frozenset[Role]] = AUTHORITY,
) -> bool:
    """Return whether a person holding `roles` may take `action`.

    Args:
        action: What the person asks for.
        roles: Every role the person holds for this session.
        is_requester: The person asked for the action being approved (two-person rule).
        authority: The authority table; operators' configuration replaces the default.
    """
    if action in TWO_PERSON and (is_requester or roles & PARTICIPANTS):
        return False
    return bool(roles & authority.get(action, frozenset()))


def approvals_needed(action: Action, *, unattended: bool) -> int:
    """How many distinct people must approve a call before it runs.

    Args:
        action: `Action.APPROVE` or `Action.APPROVE_DESTRUCTIVE`.
        unattended: Nobody asked for the analysis (a scheduled job's run).
    """
    return UNATTENDED_APPROVALS.get(action, 1) if unattended else 1
