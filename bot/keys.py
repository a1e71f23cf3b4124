"""Every Redis key and stream name `bot` uses, in one place.

Session-scoped keys come from `agent_core._keys.Keys`; this module adds the ingress and queue
names around them. Every key begins with the prefix as a hash tag (`{chatops}:`), so all of them
share one Redis Cluster slot (`agent_core._keys`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from agent_core import Keys

__all__ = ["BotKeys", "BotSessionKey"]


class BotSessionKey(StrEnum):
    """What follows a session's prefix in each of `bot`'s keys of a session.

    The same rule as `agent_core._keys.SessionKey`: `BotKeys` builds its names from these, and
    the submit script (`bot.intake.queue`) gets them substituted into its text. Each member's
    key is described on the `BotKeys` method of the same name.
    """

    OPEN_TURNS = ":open-turns"
    LIVE_TURN = ":live"
    FOLLOWUPS = ":followups"
    FENCE = ":fence"
    LEASE_FREE = ":lease-free"
    CARD = ":card"
    SETTLE = ":settle:"
    USAGE = ":usage"
    AUDIT = ":audit"
    STOPPED_AT = ":stopped-at"
    INBOX = ":inbox"
    APPROVAL_PRESSES = ":approval-presses"
    AWAITING = ":awaiting"
    PARTICIPANTS = ":participants"
    FIRST_APPROVALS = ":first-approvals"
    CHILDREN = ":children"
    TREE_STOPPED = ":tree-stopped"
    PARKED = ":parked:"


@dataclass(frozen=True, slots=True)
class BotKeys:
    """Key names for ingress, the queue and session bookkeeping."""

    prefix: str = "chatops"
    session: Keys = field(default_factory=Keys)

    @property
    def root(self) -> str:
        """What every key begins with: the prefix as a hash tag, `{chatops}` (`Keys.root`)."""
        return f"{{{self.prefix}}}"

    @property
    def turns_stream(self) -> str:
        """Stream of turns to run; workers read it through a consumer group."""
        return f"{self.root}:turns"

    @property
    def ready_probe(self) -> str:
        """What `/readyz` writes to learn that events can be written.

        Under the prefix (an ACL scoped to it allows it), so in the one hash slot of every key,
        on the node that takes events.
        """
        return f"{self.root}:ready"

    @property
    def dead_letters(self) -> str:
        """Stream of turn jobs set aside after killing their workers too often."""
        return f"{self.root}:turns:dead"

    @property
    def turns_group(self) -> str:
        """The workers' consumer group on the turns stream."""
        return "workers"

    def seen_event(self, platform: str, event_id: str) -> str:
        """Dedupe marker of one platform event id (kept 24 h: Feishu redelivers for ~7 h)."""
        return f"{self.root}:seen:{platform}:{event_id}"

    def seen_message(self, platform: str, channel: str, message_id: str) -> str:
        """Dedupe marker of one message (Slack sends `app_mention` and `message` for it)."""
        return f"{self.root}:seen-msg:{platform}:{channel}:{message_id}"

    def seen_nonce(self, nonce: str) -> str:
        """Replay marker of one Feishu request nonce (kept as long as the time window)."""
        return f"{self.root}:nonce:{nonce}"

    def open_turns(self, session_id: str) -> str:
        """Set of the session's turns that are queued or running (not settled)."""
        return self.session.key(session_id, BotSessionKey.OPEN_TURNS)

    def live_turn(self, session_id: str) -> str:
        """The session's lease: `<fencing token>|<worker>|<turn>`, expiring unless renewed.

        Its existence is what the ingress reads as "a turn is live" (replies then steer).
        """
        return self.session.key(session_id, BotSessionKey.LIVE_TURN)

    def followups(self, session_id: str) -> str:
        """Set of turns a chain created itself (redirects, remedies).

        They are never in the stream, so the reaper settles them when their worker is gone.
        """
        return self.session.key(session_id, BotSessionKey.FOLLOWUPS)

    def fence(self, session_id: str) -> str:
        """Counter of the session's fencing tokens: every lease taken gets a larger one."""
        return self.session.key(session_id, BotSessionKey.FENCE)

    def lease_free(self, session_id: str) -> str:
        """Pub/Sub channel rung when the session's lease is released (a waiting worker hears it)."""
        return self.session.key(session_id, BotSessionKey.LEASE_FREE)

    @property
    def killswitch(self) -> str:
        """Set while the kill switch is on: who turned it on, and when (JSON)."""
        return f"{self.root}:killswitch"

    @property
    def leases(self) -> str:
        """Sorted set of sessions with a lease, scored by expiry (ms): the reaper's index."""
        return f"{self.root}:leases"

    @property
    def undelivered_cards(self) -> str:
        """Set of sessions whose final card state is recorded but not yet shown."""
        return f"{self.root}:cards:undelivered"

    @property
    def lease_starts(self) -> str:
        """Sorted set of sessions with a live analysis, scored by when it was taken (ms)."""
        return f"{self.root}:lease-starts"

    def card(self, session_id: str) -> str:
        """Hash of the session's progress card: where it is, its latest state, who may write."""
        return self.session.key(session_id, BotSessionKey.CARD)

    def settle(self, session_id: str, turn_id: str) -> str:
        """The durable settle record of one claimed turn (written once)."""
        return self.session.key(session_id, BotSessionKey.SETTLE, turn_id)

    def usage(self, session_id: str) -> str:
        """Hash of the session's booked token usage (all turns, steered ones included)."""
        return self.session.key(session_id, BotSessionKey.USAGE)

    def book(self, name: str) -> str:
        """A book (stream): `settles`, `automation`, `no-final-reply`, `remedies`."""
        return f"{self.root}:book:{name}"

    def audit(self, session_id: str) -> str:
        """Stream of the session's audit trail, one JSON `bot.state.audit.AuditEvent` per entry."""
        return self.session.key(session_id, BotSessionKey.AUDIT)

    def run(self, turn_id: str) -> str:
        """The session of the analysis `turn_id` starts (`bot.state.runs`: the replay index)."""
        return f"{self.root}:run:{turn_id}"

    # The memory of past analyses (`bot.state.memory`) is global, not per session: the next
    # firing of an alert opens another thread (another session), and what was found must
    # outlive the thread's own keys.

    @property
    def memory_index(self) -> str:
        """Sorted set of the booked analyses' turn ids, scored by when each was booked (s)."""
        return f"{self.root}:memory:index"

    def memory_alert(self, alert_name: str) -> str:
        """Sorted set of one alert's booked analyses by time; the name hashed (any text)."""
        digest = hashlib.sha256(alert_name.encode()).hexdigest()[:32]
        return f"{self.root}:memory:alert:{digest}"

    def memory_record(self, turn_id: str) -> str:
        """One booked analysis (JSON `PastAnalysis`), expiring at the end of its window."""
        return f"{self.root}:memory:analysis:{turn_id}"

    def memory_wrong(self, turn_id: str) -> str:
        """Who marked a booked analysis's answer wrong, and when (the first mark, kept)."""
        return f"{self.root}:memory:wrong:{turn_id}"

    def stopped_at(self, session_id: str) -> str:
        """Platform time of the session's latest stop: requests sent before it never start."""
        return self.session.key(session_id, BotSessionKey.STOPPED_AT)

    def inbox(self, session_id: str) -> str:
        """Messages queued for the session's next turn (never cut a running one)."""
        return self.session.key(session_id, BotSessionKey.INBOX)

    def approval_presses(self, session_id: str) -> str:
        """Every approve or deny press accepted for the session, in order.

        The audit's copy; the decision itself is written by `bot.control.approval_desk`.
        """
        return self.session.key(session_id, BotSessionKey.APPROVAL_PRESSES)

    def awaiting(self, session_id: str) -> str:
        """The job that continues an analysis suspended for approvals.

        Queued on the turns stream once every request is decided, or at once by a redirect or
        a stop.
        """
        return self.session.key(session_id, BotSessionKey.AWAITING)

    def participants(self, session_id: str) -> str:
        """Set of the people (qualified ids) whose request, redirect or answer reached the analysis.

        Written by the submit script that accepts the message, read by the approval desk: none
        of them may be a destructive call's second person.
        """
        return self.session.key(session_id, BotSessionKey.PARTICIPANTS)

    def first_approvals(self, session_id: str) -> str:
        """Hash of call id → who approved first, for calls that need two approvers."""
        return self.session.key(session_id, BotSessionKey.FIRST_APPROVALS)

    def children(self, session_id: str) -> str:
        """Hash of the session's sub-agents, one JSON `ChildRecord` per child id."""
        return self.session.key(session_id, BotSessionKey.CHILDREN)

    def tree_stopped(self, session_id: str) -> str:
        """Set when the session's analysis was stopped: its sub-agents report no more."""
        return self.session.key(session_id, BotSessionKey.TREE_STOPPED)

    def parked(self, session_id: str, turn_id: str) -> str:
        """Set once a turn that ended to wait parked its continuation (done once per turn)."""
        return self.session.key(session_id, BotSessionKey.PARKED, turn_id)

    @property
    def parents(self) -> str:
        """Set of sessions that dispatched sub-agents (the kill switch stops their trees)."""
        return f"{self.root}:parents"

    @property
    def console_cards(self) -> str:
        """Stream of the console platform's card posts and updates (`chatops console` reads it)."""
        return f"{self.root}:console:cards"

    def console_message(self, message_id: str) -> str:
        """A console card's message: present while the card may be updated."""
        return f"{self.root}:console:message:{message_id}"

    @property
    def alerts_stream(self) -> str:
        """Stream of routed alert notifications, written before the sender is answered.

        The workers' alert dispatchers read it through a consumer group.
        """
        return f"{self.root}:alerts"

    @property
    def alerts_dead(self) -> str:
        """Stream of alert notifications set aside after failing too often."""
        return f"{self.root}:alerts:dead"

    @property
    def alerts_group(self) -> str:
        """The dispatchers' consumer group on the alerts stream."""
        return "dispatchers"

    def seen_alert(self, digest: str) -> str:
        """Dedupe marker of one notification's content (a sender's retry, a repeat)."""
        return f"{self.root}:seen-alert:{digest}"

    def incident(self, incident: str) -> str:
        """One incident's record (JSON `bot.state.incidents.IncidentRecord`)."""
        return f"{self.root}:incident:{incident}"

    def incident_seen(self, incident: str) -> str:
        """Set of the incident's alerts already taken in (`fingerprint|startsAt|status`)."""
        return f"{self.root}:incident:{incident}:seen"

    def incident_lock(self, incident: str) -> str:
        """Held by the dispatcher taking in one of the incident's notifications."""
        return f"{self.root}:incident:{incident}:lock"

    def alert_route_opened(self, route: str) -> str:
        """Sorted set of the incidents a route opened, scored by when (its hourly limit)."""
        return f"{self.root}:alert-route:{route}:opened"

    def alert_route_held_notice(self, route: str) -> str:
        """Set while a route's hold-back notice of the hour has been posted."""
        return f"{self.root}:alert-route:{route}:held-notice"
