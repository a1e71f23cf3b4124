"""Every Redis key the runtime reads or writes, in one place.

Keys are namespaced by a prefix (default `chatops`) so several deployments can share a Redis.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Keys"]


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names for sessions and turns."""

    prefix: str = "chatops"

    def history(self, session_id: str) -> str:
        """List of the session's closed history, one JSON message per item."""
        return f"{self.prefix}:history:{session_id}"

    def steers(self, session_id: str) -> str:
        """List of steer messages waiting for the session's next cut."""
        return f"{self.prefix}:steer:{session_id}"

    def bell(self, session_id: str) -> str:
        """List used only to wake a live turn's watcher (entries: `stop:<turn>`, `steer`, ...)."""
        return f"{self.prefix}:bell:{session_id}"

    def tombstone(self, turn_id: str) -> str:
        """Set when a turn was stopped; a tombstoned turn never calls the model."""
        return f"{self.prefix}:tomb:{turn_id}"

    def drain(self, turn_id: str) -> str:
        """Set to ask a live turn to suspend at its next cut so another worker resumes it."""
        return f"{self.prefix}:drain:{turn_id}"

    def begun(self, turn_id: str) -> str:
        """Set once a turn's inputs were appended, so a re-run does not append them twice."""
        return f"{self.prefix}:begun:{turn_id}"

    def journal(self, turn_id: str) -> str:
        """Hash of the open batch: `batch` (the assistant message) and one field per result."""
        return f"{self.prefix}:journal:{turn_id}"
