"""Every Redis key the runtime reads or writes, in one place.

Keys are namespaced by a prefix (default `chatops`) so several deployments can share a Redis,
and every key begins with the prefix as a hash tag (`{chatops}:`): a deployment's keys all live
in one Redis Cluster slot, so every script and transaction, which writes a session's keys and
the deployment's streams and indexes together, stays valid in a cluster (docs/design.md §Redis
keys and streams says why one slot, not one per session).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Keys", "SessionKey"]


class SessionKey(StrEnum):
    """What follows a session's prefix in each of its keys: the one definition of their layout.

    `Keys` builds its names from these (a member ending in `:` takes a turn id after it), and
    a script that derives a session's keys from the prefix gets the same members substituted
    into its text (`agent_core._lua`), never a copy. Each member's key is described on the
    `Keys` method of the same name.
    """

    HISTORY = ":history"
    HISTORY_GENERATION = ":history-generation"
    STEERS = ":steer"
    BELL = ":bell"
    TOMBSTONE = ":tomb:"
    DRAIN = ":drain:"
    BEGUN = ":begun:"
    JOURNAL = ":journal:"
    APPROVALS = ":approvals"
    SUSPENDED = ":suspended"
    CONTINUATION = ":continuation"
    CLOSING = ":closing"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for sessions and their turns."""

    prefix: str = "chatops"

    @property
    def root(self) -> str:
        """What every key begins with: the prefix as a hash tag, `{chatops}`."""
        return f"{{{self.prefix}}}"

    def session_prefix(self, session_id: str) -> str:
        """The prefix of every key of a session: `{chatops}:<session id>`."""
        return f"{self.root}:{session_id}"

    def key(self, session_id: str, name: SessionKey | str, turn_id: str = "") -> str:
        """The session's key `name` (a `SessionKey`, or a `bot.keys.BotSessionKey`)."""
        return f"{self.session_prefix(session_id)}{name}{turn_id}"

    def history(self, session_id: str) -> str:
        """List of the session's closed history, one JSON message per item."""
        return self.key(session_id, SessionKey.HISTORY)

    def history_generation(self, session_id: str) -> str:
        """Counter of the history's rewrites: `HistoryStore.replace` increments it.

        Every other history write appends, so a reader that cached the history at a generation
        knows, while the counter still reads it, that the list is what it read plus appends.
        """
        return self.key(session_id, SessionKey.HISTORY_GENERATION)

    def steers(self, session_id: str) -> str:
        """List of steer messages waiting for the session's next cut."""
        return self.key(session_id, SessionKey.STEERS)

    def bell(self, session_id: str) -> str:
        """Pub/Sub channel that only wakes a live turn's watcher (`stop:<turn>`, `steer`, ...)."""
        return self.key(session_id, SessionKey.BELL)

    def tombstone(self, session_id: str, turn_id: str) -> str:
        """Set when a turn was stopped; a tombstoned turn never calls the model."""
        return self.key(session_id, SessionKey.TOMBSTONE, turn_id)

    def drain(self, session_id: str, turn_id: str) -> str:
        """Set to ask a live turn to suspend at its next cut so another worker resumes it."""
        return self.key(session_id, SessionKey.DRAIN, turn_id)

    def begun(self, session_id: str, turn_id: str) -> str:
        """Set once a turn's inputs were appended, so a re-run does not append them twice."""
        return self.key(session_id, SessionKey.BEGUN, turn_id)

    def journal(self, session_id: str, turn_id: str) -> str:
        """Hash of the open batch: `batch` (the assistant message) and one field per result."""
        return self.key(session_id, SessionKey.JOURNAL, turn_id)

    def approvals(self, session_id: str) -> str:
        """Hash of the session's approval records, one JSON `Approval` per call id."""
        return self.key(session_id, SessionKey.APPROVALS)

    def suspended(self, session_id: str) -> str:
        """The turn whose journal holds a batch suspended for approvals (see `_approvals`)."""
        return self.key(session_id, SessionKey.SUSPENDED)

    def continuation(self, session_id: str) -> str:
        """The turn that continues a suspended batch.

        The only one that may run its approved calls (any other turn answers them "not run").
        """
        return self.key(session_id, SessionKey.CONTINUATION)

    def closing(self, session_id: str) -> str:
        """Set once a turn claimed the suspended batch: no decision is taken after it."""
        return self.key(session_id, SessionKey.CLOSING)

    @property
    def approvals_due(self) -> str:
        """Sorted set of sessions with pending approvals, scored by the earliest expiry."""
        return f"{self.root}:approvals:due"
