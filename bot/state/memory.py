"""The memory of past analyses: each answered analysis booked once, found again by alert or words.

Contract:

- **Booking.** `book` writes one `PastAnalysis` per turn id (the analysis's own, the id its card
  and Stop button carry), in one transaction watching its record: booking the same turn again
  changes nothing, its first record and index entries are kept. The task is cut to
  `MAX_TASK_BYTES` and the answer to `MAX_ANSWER_BYTES` of UTF-8, on a character boundary and
  with `CUT_MARK`; the alert's name, labels and fingerprints are bounded too
  (`MAX_FIELD_CHARS`, `MAX_LABELS`, `MAX_FINGERPRINTS`). `book_safely` is how an analysis books:
  shielded from cancellation, time-bounded, a failure logged and never raised.
- **Retention.** A record expires `days` after it was booked (its own expiry); the sorted sets
  by time (every analysis; each alert's) drop what is older on every write, are capped at
  `MAX_INDEXED` entries, and expire when nothing was booked for `days`.
- **Search.** `search` reads at most `MAX_CANDIDATES` analyses, the newest in the window, plus
  up to `limit` of each alert looked up by name: `alert_name` (exact), and the query whole or
  any of its first `MAX_NAMED_ALERTS` words, as an alert's name. An analysis matches when it is
  of such an alert (a candidate's alert name equal to a query word counts too, whatever the
  case) or shares words with the query: the query's distinct words (at most `MAX_QUERY_WORDS`
  of its first `MAX_QUERY_CHARS` characters, common words left out) found among the words of
  its task, answer, alert name and labels, scored by how many, in one linear pass over each
  text. The best `limit` (at most `MAX_LIMIT`) are kept (the same alert first, then the score,
  ties the most recent first) and returned most recent first. Candidates holding more than
  `THREAD_SCORING_BYTES` of text are scored in a worker thread, off the event loop. No pattern
  is applied to the stored text: words are split by `str.translate` and `str.split`.
- **Marks.** `mark_wrong` records who marked an analysis's answer wrong and when; the first
  mark wins and is kept (a later one changes nothing, and still answers True), a turn not
  booked (or expired) answers False. The mark expires with its record.

Keys (`bot.keys.BotKeys`): `memory_index`, `memory_alert(name)`, `memory_record(turn_id)`,
`memory_wrong(turn_id)`, all under one hash tag so a booking is one transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict, ValidationError
from redis.exceptions import WatchError

from agent_core import map_redis_errors
from bot.events import ChatEvent
from bot.keys import BotKeys

__all__ = [
    "MAX_ANSWER_BYTES",
    "MAX_CANDIDATES",
    "MAX_LIMIT",
    "MAX_TASK_BYTES",
    "MemoryBook",
    "PastAnalysis",
]

log = logging.getLogger(__name__)

DAY_S = 24 * 3600
MAX_TASK_BYTES = 8 * 1024
"""A booked task's UTF-8 length, at most (its cut mark included)."""
MAX_ANSWER_BYTES = 16 * 1024
"""A booked answer's UTF-8 length, at most (its cut mark included)."""
CUT_MARK = " … [cut]"
MAX_FIELD_CHARS = 256
"""An alert name, label name or value, fingerprint, route, sender or marker's name, at most."""
MAX_LABELS = 32
MAX_FINGERPRINTS = 64
MAX_INDEXED = 100_000
"""Entries kept in each sorted set by time; the oldest go first."""
MAX_CANDIDATES = 500
"""Analyses a search reads and scores: the newest in its window."""
MAX_LIMIT = 20
"""Analyses a search returns, at most."""
MAX_QUERY_CHARS = 1_000
MAX_QUERY_WORDS = 32
MAX_NAMED_ALERTS = 8
"""Words of a query looked up as an alert's name (plus the query whole)."""
THREAD_SCORING_BYTES = 256 * 1024
"""Candidates' text past which scoring runs in a worker thread."""
READ_CHUNK = 100
"""Records per MGET: a search's reads stay short commands."""
BOOK_TIMEOUT_S = 10.0

_SEPARATORS = {c: " " for c in range(128) if not chr(c).isalnum()} | {
    ord(c): " " for c in "、。，：；！？「」『』（）【】《》—–…·“”‘’«»"
}
"""What splits words: ASCII punctuation and symbols, the common CJK and typographic marks
(whitespace of every kind is split by `str.split`)."""
_QUOTES = "\"'`,;:()[]{}<>"
_COMMON = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was"
    " were what when where which who why with alert alerts firing".split()
)
"""Words too common to tell analyses apart."""


class PastAnalysis(BaseModel):
    """One booked analysis: what it was asked, what it answered, and the alert it was about."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    turn_id: str
    """The analysis's turn id (the one its card and Stop button carry)."""
    session_id: str
    when: float
    """When it was booked (epoch seconds): as its answer was given."""
    platform: str
    channel: str
    thread: str
    task: str
    """The analysis's task, the text of the event that started it."""
    answer: str
    alert_name: str = ""
    incident: str = ""
    sender: str = ""
    route: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    fingerprints: tuple[str, ...] = ()
    wrong_by: str = ""
    """Who marked the answer wrong (empty: nobody)."""
    wrong_at: float = 0.0
    """When it was marked wrong (epoch seconds)."""

    @classmethod
    def of(cls, event: ChatEvent, *, turn_id: str, answer: str, when: float) -> PastAnalysis:
        """The analysis `event` started, answered with `answer` at `when`."""
        origin = event.alert
        return cls(
            turn_id=turn_id,
            session_id=event.session_id,
            when=when,
            platform=str(event.platform),
            channel=event.channel,
            thread=event.thread,
            task=event.text,
            answer=answer,
            alert_name=origin.alert_name if origin else "",
            incident=origin.incident if origin else "",
            sender=origin.sender if origin else "",
            route=origin.route if origin else "",
            labels=origin.labels if origin else (),
            fingerprints=origin.fingerprints if origin else (),
        )

    def bounded(self) -> PastAnalysis:
        """This analysis as it is booked: every text cut to its bound, no mark."""
        return self.model_copy(
            update={
                "task": cut_utf8(self.task, MAX_TASK_BYTES),
                "answer": cut_utf8(self.answer, MAX_ANSWER_BYTES),
                "alert_name": self.alert_name[:MAX_FIELD_CHARS],
                "incident": self.incident[:MAX_FIELD_CHARS],
                "sender": self.sender[:MAX_FIELD_CHARS],
                "route": self.route[:MAX_FIELD_CHARS],
                "labels": tuple(
                    (k[:MAX_FIELD_CHARS], v[:MAX_FIELD_CHARS]) for k, v in self.labels[:MAX_LABELS]
                ),
                "fingerprints": tuple(f[:MAX_FIELD_CHARS] for f in self.fingerprints)[
                    :MAX_FINGERPRINTS
                ],
                "wrong_by": "",
                "wrong_at": 0.0,
            }
        )

    def text(self) -> str:
        """What a search matches words against: task, answer, alert name and labels."""
        labels = " ".join(f"{k} {v}" for k, v in self.labels)
        return f"{self.alert_name} {labels} {self.task} {self.answer}"


class _Mark(BaseModel):
    model_config = ConfigDict(frozen=True)

    who: str
    at: float


def cut_utf8(text: str, max_bytes: int) -> str:
    """`text`, or its longest start that fits `max_bytes` of UTF-8 with `CUT_MARK` after it."""
    raw = text.encode()
    if len(raw) <= max_bytes:
        return text
    room = max_bytes - len(CUT_MARK.encode())
    return raw[:room].decode(errors="ignore") + CUT_MARK  # a split character is dropped whole


def _words(text: str) -> set[str]:
    """The distinct words of `text`, lower-cased, in one linear pass."""
    return set(text.lower().translate(_SEPARATORS).split())


@dataclass(frozen=True, slots=True)
class _Query:
    words: frozenset[str]
    """The words scored (distinct, not common)."""
    names: tuple[str, ...]
    """What may be an alert's name: the query whole, then its first words as written."""


def _query(text: str) -> _Query:
    head = text[:MAX_QUERY_CHARS]
    words: list[str] = []
    for word in head.lower().translate(_SEPARATORS).split():
        if len(word) > 1 and word not in _COMMON and word not in words:
            words.append(word)
            if len(words) == MAX_QUERY_WORDS:
                break
    names: list[str] = []
    whole = head.strip().strip(_QUOTES)
    if whole and len(whole) <= MAX_FIELD_CHARS:
        names.append(whole)
    for token in head.split():
        name = token.strip(_QUOTES)
        if name and len(name) <= MAX_FIELD_CHARS and name not in names:
            names.append(name)
            if len(names) > MAX_NAMED_ALERTS:
                break
    return _Query(frozenset(words), tuple(names))


def _rank(
    candidates: Sequence[PastAnalysis], query: _Query, alert_name: str, limit: int
) -> list[PastAnalysis]:
    """The best `limit` matches of `candidates`, most recent first (pure; linear in the text).

    Of the same alert: booked under `alert_name` exactly, or under a name the query gives
    (whatever its case).
    """
    named = {name.lower() for name in query.names}
    scored: list[tuple[bool, int, float, PastAnalysis]] = []
    for past in candidates:
        alike = bool(past.alert_name) and (
            past.alert_name == alert_name or past.alert_name.lower() in named
        )
        score = len(query.words & _words(past.text())) if query.words else 0
        if alike or score:
            scored.append((alike, score, past.when, past))
    scored.sort(key=lambda s: (s[0], s[1], s[2]), reverse=True)
    best = [s[3] for s in scored[:limit]]
    return sorted(best, key=lambda p: p.when, reverse=True)


class MemoryBook:
    """Books answered analyses and finds them again (see the module's contract)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: BotKeys | None = None,
        *,
        days: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Build the book.

        Args:
            redis: The client the memory is kept with.
            keys: The key layout.
            days: How long a booked analysis is kept and searched (`CHATOPS_MEMORY_DAYS`).
            clock: Epoch seconds now (a test's own clock).

        Raises:
            ValueError: `days` is not positive.
        """
        if days < 1:
            raise ValueError(f"the memory keeps analyses for at least 1 day, not {days}")
        self._redis = redis
        self._keys = keys or BotKeys()
        self._days = days
        self._clock = clock

    @property
    def days(self) -> int:
        """How many days an analysis is kept, and a search looks back by default."""
        return self._days

    def _window(self, days: int | None) -> int:
        return max(1, min(self._days if days is None else days, self._days))

    async def book(self, analysis: PastAnalysis) -> None:
        """Book an analysis, once per turn id (a second booking changes nothing).

        One already older than the book's window is not written.

        Raises:
            StoreError: Redis failed.
        """
        now, k = self._clock(), self._keys
        expires_at = analysis.when + self._days * DAY_S
        if expires_at <= now:
            return
        record = analysis.bounded()
        oldest = now - self._days * DAY_S
        sets = [k.memory_index]
        if record.alert_name:
            sets.append(k.memory_alert(record.alert_name))
        key = k.memory_record(record.turn_id)
        with map_redis_errors("book a past analysis"):
            async with self._redis.pipeline(transaction=True) as pipe:
                # Watched: only the first booking of a turn writes, record and index entries
                # alike (a second one, even under another alert's name, changes nothing).
                await pipe.watch(key)
                if await pipe.exists(key):
                    return
                pipe.multi()  # type: ignore[no-untyped-call]
                pipe.set(key, record.model_dump_json(), pxat=int(expires_at * 1000))
                for index in sets:
                    pipe.zadd(index, {record.turn_id: record.when})
                    pipe.zremrangebyscore(index, "-inf", f"({oldest!r}")
                    pipe.zremrangebyrank(index, 0, -(MAX_INDEXED + 1))
                    pipe.expire(index, self._days * DAY_S)
                try:
                    await pipe.execute()
                except WatchError:
                    return  # booked meanwhile, by a booking of the same turn

    async def book_safely(
        self, analysis: PastAnalysis, *, timeout_s: float = BOOK_TIMEOUT_S
    ) -> bool:
        """Book `analysis` without ever failing the caller: shielded, bounded, errors logged.

        A cancellation waits for the booking (at most `timeout_s`), then goes on.

        Returns:
            Whether it was booked (or already was).
        """
        bounded = asyncio.wait_for(self.book(analysis), timeout_s)
        task = asyncio.get_running_loop().create_task(bounded)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            await asyncio.wait({task})
            raise
        except Exception as exc:
            log.warning("analysis %s not booked in memory: %s", analysis.turn_id, _short(exc))
            return False
        return True

    async def search(
        self, query: str, *, alert_name: str = "", days: int | None = None, limit: int = 5
    ) -> list[PastAnalysis]:
        """Earlier analyses of the same alert or on the same words, most recent first.

        Args:
            query: Words, or an alert's name.
            alert_name: An alert whose analyses match whatever their words.
            days: How far back (default and at most: the book's `days`).
            limit: Analyses returned, at most (1 to `MAX_LIMIT`).

        Raises:
            StoreError: Redis failed.
        """
        limit = max(1, min(limit, MAX_LIMIT))
        oldest = self._clock() - self._window(days) * DAY_S
        parsed = _query(query)
        names = [n for n in (alert_name, *parsed.names) if n]
        k = self._keys
        with map_redis_errors("search past analyses"):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zrevrangebyscore(k.memory_index, "+inf", oldest, start=0, num=MAX_CANDIDATES)
                for name in dict.fromkeys(names):
                    pipe.zrevrangebyscore(k.memory_alert(name), "+inf", oldest, start=0, num=limit)
                found: list[list[bytes]] = await pipe.execute()
        # The alerts' own sets reach past the newest candidates; which analyses are of the
        # same alert is then read from their records (`_rank`).
        ids = list(dict.fromkeys(_text(t) for ids in found for t in ids))
        candidates = [p for p in await self._read(ids) if p.when >= oldest]
        size = sum(len(p.task) + len(p.answer) for p in candidates)
        if size > THREAD_SCORING_BYTES:
            return await asyncio.to_thread(_rank, candidates, parsed, alert_name, limit)
        return _rank(candidates, parsed, alert_name, limit)

    async def count_for_alert(self, alert_name: str, *, days: int | None = None) -> int:
        """How many analyses of `alert_name` were booked in the window (default the book's).

        Raises:
            StoreError: Redis failed.
        """
        if not alert_name:
            return 0
        oldest = self._clock() - self._window(days) * DAY_S
        with map_redis_errors("count past analyses"):
            count = await self._redis.zcount(self._keys.memory_alert(alert_name), oldest, "+inf")
        return int(count)

    async def mark_wrong(self, turn_id: str, who: str, when: float) -> bool:
        """Mark a booked analysis's answer wrong; the first mark is kept.

        Returns:
            False for a turn not booked (or expired); True otherwise, marked now or before.

        Raises:
            StoreError: Redis failed.
        """
        k = self._keys
        mark = _Mark(who=who[:MAX_FIELD_CHARS], at=when).model_dump_json()
        with map_redis_errors("mark a past analysis wrong"):
            left_ms = int(await self._redis.pttl(k.memory_record(turn_id)))
            if left_ms == -2:  # no such record
                return False
            # Expires with its record (one without an expiry, never written so, keeps it too).
            px = left_ms if left_ms > 0 else None
            await self._redis.set(k.memory_wrong(turn_id), mark, nx=True, px=px)
        return True

    async def _read(self, turn_ids: Sequence[str]) -> list[PastAnalysis]:
        """The records of `turn_ids` still kept, each with its mark."""
        if not turn_ids:
            return []
        k = self._keys
        with map_redis_errors("read past analyses"):
            async with self._redis.pipeline(transaction=False) as pipe:
                for chunk in _chunks(turn_ids, READ_CHUNK):
                    pipe.mget([k.memory_record(t) for t in chunk])
                    pipe.mget([k.memory_wrong(t) for t in chunk])
                replies: list[list[bytes | None]] = await pipe.execute()
        records = [raw for reply in replies[0::2] for raw in reply]
        marks = [raw for reply in replies[1::2] for raw in reply]
        found: list[PastAnalysis] = []
        for raw, mark in zip(records, marks, strict=True):
            if raw is None:
                continue
            try:
                past = PastAnalysis.model_validate_json(raw)
                if mark is not None:
                    marked = _Mark.model_validate_json(mark)
                    past = past.model_copy(update={"wrong_by": marked.who, "wrong_at": marked.at})
            except ValidationError:
                log.warning("a past analysis could not be read; left out")
                continue
            found.append(past)
        return found


def _chunks(items: Sequence[str], size: int) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 200 else text[:199] + "…"
