"""The per-process cache of session histories that `HistoryStore` reads through.

Contract:
- An entry is what a session's Redis list held at one moment: its generation (the counter
  `HistoryStore.replace` increments in the transaction that rewrites the list), its messages,
  the SHA-1 of its last item, and the validator's state for all of it (`CheckedPrefix`; None
  when it breaks a rule, so the run validates it and repairs it).
- A read sends the entry's (generation, length, last item's SHA-1), and Redis answers with only
  the items past that length while all three still hold, else with the whole list. Every other
  history write appends, so an entry that was true once stays a prefix of the list for as long
  as the generation holds, whichever worker appends meanwhile; the SHA-1 also catches a list
  deleted and written again behind the store's back (its generation key gone with it).
- Bounded: at most `max_sessions` entries and `max_bytes` of their items' JSON (what Redis
  holds; the parsed messages take about twice that, measured), the least recently used evicted
  first; a history larger than `max_bytes` on its own is not kept.
- Entries are immutable: an update replaces a session's entry, so a reader holding the previous
  one (a read in flight) is never affected by it.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from agent_core._errors import HistoryError
from agent_core._history import CheckedPrefix, validate_from
from agent_core._messages import Message, load_message

__all__ = ["CachedHistory", "HistoryCache", "digest", "read_from"]

MAX_SESSIONS = 256
"""Default bound on cached sessions (a worker runs a few analyses at once; threads come back)."""
MAX_BYTES = 32 * 1024 * 1024
"""Default bound on the cached histories' JSON: fifteen sessions of 2,000 messages. The process
holds about three times that at most: the parsed messages take twice their JSON, and their wire
dicts (`agent_core._llm.convert`) most of the third."""


def digest(raw: bytes | str) -> str:
    """The SHA-1 of one stored item, as Lua's `redis.sha1hex` computes it."""
    return hashlib.sha1(_encoded(raw), usedforsecurity=False).hexdigest()


def read_from(cached: CachedHistory | None) -> tuple[int, int, str]:
    """What a read sends of a cached history: its generation, length and last item's SHA-1."""
    if cached is None:
        return 0, 0, ""
    return cached.generation, cached.length, cached.digest


def _encoded(raw: bytes | str) -> bytes:
    return raw if isinstance(raw, bytes) else raw.encode()


def _checked(messages: Sequence[Message], prefix: CheckedPrefix | None) -> CheckedPrefix | None:
    """The validator's state after `messages`, going on from `prefix`; None when invalid."""
    try:
        return validate_from(messages, prefix)
    except HistoryError:
        return None


@dataclass(frozen=True, slots=True)
class CachedHistory:
    """What a session's history list held at one moment (see the module docstring)."""

    generation: int
    """The session's history generation when it was read or written."""
    messages: tuple[Message, ...] = ()
    digest: str = ""
    """SHA-1 of the last item's JSON ("" when empty)."""
    size: int = 0
    """Bytes of the items' JSON."""
    checked: CheckedPrefix | None = None
    """The validator's state after all of `messages`; None when they break a rule."""

    @property
    def length(self) -> int:
        """How many items the list held."""
        return len(self.messages)

    @classmethod
    def read(cls, generation: int, raws: Sequence[bytes | str]) -> CachedHistory:
        """An entry for a whole list read from Redis."""
        return cls(generation).extended(raws)

    def extended(
        self, raws: Sequence[bytes | str], messages: Sequence[Message] | None = None
    ) -> CachedHistory:
        """This entry with `raws` appended (parsed, unless their `messages` are given).

        Only the new items are parsed and validated.
        """
        if not raws:
            return self
        added = tuple(messages) if messages is not None else tuple(map(load_message, raws))
        whole = self.messages + added
        known = self.checked is not None or not self.messages
        checked = _checked(whole, self.checked) if known else None
        return CachedHistory(
            generation=self.generation,
            messages=whole,
            digest=digest(raws[-1]),
            size=self.size + sum(len(_encoded(raw)) for raw in raws),
            checked=checked,
        )


class HistoryCache:
    """Session histories by session id, least recently used first, bounded (module docstring)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS, max_bytes: int = MAX_BYTES) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, CachedHistory] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def held_bytes(self) -> int:
        """Bytes of JSON the cached histories hold (never above `max_bytes`)."""
        return self._bytes

    def get(self, session_id: str) -> CachedHistory | None:
        """The session's entry (now the most recently used), or None."""
        entry = self._entries.get(session_id)
        if entry is not None:
            self._entries.move_to_end(session_id)
        return entry

    def put(self, session_id: str, entry: CachedHistory) -> None:
        """Keep `entry` as the session's, evicting the least recently used beyond the bounds."""
        self.drop(session_id)
        if entry.size > self.max_bytes or self.max_sessions < 1:
            return
        self._entries[session_id] = entry
        self._bytes += entry.size
        while len(self._entries) > self.max_sessions or self._bytes > self.max_bytes:
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.size

    def appended(
        self,
        session_id: str,
        length: int,
        generation: int,
        messages: Sequence[Message],
        raw: Sequence[bytes | str],
    ) -> None:
        """Extend the session's entry by what its store just appended, if nothing came between.

        `length` (RPUSH's answer) and `generation` were read in the append's transaction: a list
        that grew by exactly `messages` since the entry was true holds the entry plus them. When
        another writer appended meanwhile the entry is kept as it is (the next read gets the
        rest); a generation that moved drops it.
        """
        cached = self._entries.get(session_id)
        if cached is None:
            return
        if cached.generation != generation:
            self.drop(session_id)
        elif cached.length + len(messages) == length:
            self.put(session_id, cached.extended(raw, messages))

    def drop(self, session_id: str) -> None:
        """Forget the session's entry, if any."""
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self._bytes -= entry.size
