"""The configured groups of people: `CHATOPS_ADMINS` and `CHATOPS_RESPONDERS`.

Each entry is a platform-qualified id (`slack:U0123`, `feishu:ou_abc`, `console:alice`), the
form `ChatEvent.person` gives every author. How a bare id (`U0123`, written before ids were
qualified) is read: it matches that id on Slack and on Feishu, never on the console. Slack ids
(`U…`, `W…`) and Feishu open ids (`ou_…`) never look alike, so a bare id still names one
person; the console is left out because a console client names its user freely, so a bare id
must never let a console token holder pass for an admin (docs/reliability.md X10). Each bare id is
warned about once where the group is read at start-up (the ingress's approval and kill switch
desks), naming the qualified forms to write instead.

An entry with any other qualifier (`teams:…`, `scheduler:…`, a typo such as `slak:U0123`) is a
configuration error: `Settings` refuses it, so no process starts with an admin it cannot match.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from bot.events import Platform

__all__ = ["BARE_PLATFORMS", "PEOPLE_PLATFORMS", "People", "parse_people"]

log = logging.getLogger(__name__)

PEOPLE_PLATFORMS = frozenset({Platform.SLACK, Platform.FEISHU, Platform.CONSOLE})
"""The platforms whose users are people an entry may name."""
BARE_PLATFORMS = frozenset({Platform.SLACK, Platform.FEISHU})
"""Where a bare id matches (never the console: its users are whoever the client says)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class People:
    """One configured group, matched against qualified ids."""

    qualified: frozenset[str] = frozenset()
    """Entries written `platform:id`."""
    bare: frozenset[str] = frozenset()
    """Entries written without a platform: matched on Slack and Feishu only."""

    def __contains__(self, person: object) -> bool:
        """Whether `person` (a qualified id, `ChatEvent.person`) is in the group."""
        if not isinstance(person, str):
            return False
        if person in self.qualified:
            return True
        platform, sep, raw = person.partition(":")
        return bool(sep) and platform in BARE_PLATFORMS and raw in self.bare

    def __bool__(self) -> bool:
        return bool(self.qualified or self.bare)

    def warn_bare(self, variable: str) -> None:
        """Log one warning per bare entry: how it is read, and what to write instead."""
        for raw in sorted(self.bare):
            log.warning(
                "%s entry %r has no platform: read as slack:%s or feishu:%s, never a console "
                "user; write it qualified",
                variable,
                raw,
                raw,
                raw,
            )

    @classmethod
    def of(cls, entries: People | str | Iterable[str]) -> People:
        """A group from a `People`, a comma-separated setting, or single entries.

        Raises:
            ValueError: An entry names no id, or a platform whose users are not people.
        """
        return entries if isinstance(entries, People) else parse_people(entries)


def parse_people(entries: str | Iterable[str]) -> People:
    """Read a comma-separated list (or single entries) of ids, qualified or bare.

    Raises:
        ValueError: An entry names no id, or a platform whose users are not people.
    """
    parts = entries.split(",") if isinstance(entries, str) else entries
    qualified: set[str] = set()
    bare: set[str] = set()
    for part in (p.strip() for p in parts):
        if not part:
            continue
        platform, sep, raw = part.partition(":")
        if not sep:
            bare.add(part)
        elif platform not in PEOPLE_PLATFORMS or not raw or raw != raw.strip() or ":" in raw:
            choices = ", ".join(sorted(PEOPLE_PLATFORMS))
            raise ValueError(f"{part!r} is not <platform>:<id> with a platform of {choices}")
        else:
            qualified.add(part)
    return People(qualified=frozenset(qualified), bare=frozenset(bare))
