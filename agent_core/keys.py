"""Every Redis key the runtime reads or writes, in one place.

Keys are namespaced by a prefix (default `chatops`) so several deployments can share a Redis,
and every key of a session carries the session id as a hash tag (`{...}`), so a session's keys
(history, steers, bell, and its turns' tombstones, journals and markers) live in one Redis
Cluster slot and the scripts and transactions that touch several of them stay valid there.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Keys"]


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for sessions and their turns."""

    prefix: str = "chatops"

    def session_prefix(self, session_id: str) -> str:
        """The hash-tagged prefix of every key of a session."""
        return f"{self.prefix}:{{{session_id}}}"

    def history(self, session_id: str) -> str:
        """List of the session's closed history, one JSON message per item."""
        return f"{self.session_prefix(session_id)}:history"

    def steers(self, session_id: str) -> str:
        """List of steer messages waiting for the session's next cut."""
        return f"{self.session_prefix(session_id)}:steer"

    def bell(self, session_id: str) -> str:
        """List used only to wake a live turn's watcher (entries: `stop:<turn>`, `steer`, ...)."""
        return f"{self.session_prefix(session_id)}:bell"

    def tombstone(self, session_id: str, turn_id: str) -> str:
        """Set when a turn was stopped; a tombstoned turn never calls the model."""
        return f"{self.session_prefix(session_id)}:tomb:{turn_id}"

    def drain(self, session_id: str, turn_id: str) -> str:
        """Set to ask a live turn to suspend at its next cut so another worker resumes it."""
        return f"{self.session_prefix(session_id)}:drain:{turn_id}"

    def begun(self, session_id: str, turn_id: str) -> str:
        """Set once a turn's inputs were appended, so a re-run does not append them twice."""
        return f"{self.session_prefix(session_id)}:begun:{turn_id}"

    def journal(self, session_id: str, turn_id: str) -> str:
        """Hash of the open batch: `batch` (the assistant message) and one field per result."""
        return f"{self.session_prefix(session_id)}:journal:{turn_id}"

    def approvals(self, session_id: str) -> str:
        """Hash of the session's approval records, one JSON `Approval` per call id."""
        return f"{self.session_prefix(session_id)}:approvals"

    def suspended(self, session_id: str) -> str:
        """The turn whose journal holds a batch suspended for approvals (`agent_core.approvals`)."""
        return f"{self.session_prefix(session_id)}:suspended"

    def continuation(self, session_id: str) -> str:
        """The turn that continues a suspended batch.

        The only one that may run its approved calls (any other turn answers them "not run").
        """
        return f"{self.session_prefix(session_id)}:continuation"

    def closing(self, session_id: str) -> str:
        """Set once a turn claimed the suspended batch: no decision is taken after it."""
        return f"{self.session_prefix(session_id)}:closing"

    @property
    def approvals_due(self) -> str:
        """Sorted set of sessions with pending approvals, scored by the earliest expiry."""
        return f"{self.prefix}:approvals:due"
