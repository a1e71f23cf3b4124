"""Every Redis key and stream name `bot` uses, in one place.

Session-scoped keys come from `agent_core.keys.Keys` (hash-tagged by session id, so a session's
keys share a Redis Cluster slot); this module adds the ingress and queue names around them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent_core.keys import Keys

__all__ = ["BotKeys"]


@dataclass(frozen=True, slots=True)
class BotKeys:
    """Key names for ingress, the queue and session bookkeeping."""

    prefix: str = "chatops"
    session: Keys = field(default_factory=Keys)

    @property
    def turns_stream(self) -> str:
        """Stream of turns to run; workers read it through a consumer group."""
        return f"{self.prefix}:turns"

    @property
    def turns_group(self) -> str:
        """The workers' consumer group on the turns stream."""
        return "workers"

    def seen_event(self, platform: str, event_id: str) -> str:
        """Dedupe marker of one platform event id (kept 24 h: Feishu redelivers for ~7 h)."""
        return f"{self.prefix}:seen:{platform}:{event_id}"

    def seen_message(self, platform: str, channel: str, message_id: str) -> str:
        """Dedupe marker of one message (Slack sends `app_mention` and `message` for it)."""
        return f"{self.prefix}:seen-msg:{platform}:{channel}:{message_id}"

    def seen_nonce(self, nonce: str) -> str:
        """Replay marker of one Feishu request nonce (kept as long as the time window)."""
        return f"{self.prefix}:nonce:{nonce}"

    def open_turns(self, session_id: str) -> str:
        """Set of the session's turns that are queued or running (not settled)."""
        return f"{self.session.session_prefix(session_id)}:open-turns"

    def live_turn(self, session_id: str) -> str:
        """The session's live turn id, held by a worker's lease."""
        return f"{self.session.session_prefix(session_id)}:live"

    def stopped_at(self, session_id: str) -> str:
        """Platform time of the session's latest stop: requests sent before it never start."""
        return f"{self.session.session_prefix(session_id)}:stopped-at"

    def inbox(self, session_id: str) -> str:
        """Messages queued for the session's next turn (never cut a running one)."""
        return f"{self.session.session_prefix(session_id)}:inbox"

    def approvals(self, session_id: str) -> str:
        """Approval decisions waiting for the session's worker."""
        return f"{self.session.session_prefix(session_id)}:approvals"
