"""A name resolver that answers chosen addresses, for the HTTP tools' address checks.

Why a fake: the tools' resolver is injected (`agent_core.tools._address_policy.Resolver`); a test
that must make an allowlisted name resolve to 169.254.169.254, or answer differently on a second
lookup (DNS rebinding), cannot ask the system's resolver to do so.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Answering"]


class Answering:
    """Answers each lookup with the next list of addresses (the last one repeats); counts calls."""

    def __init__(self, *answers: str | Sequence[str]) -> None:
        self.answers = [[a] if isinstance(a, str) else list(a) for a in answers]
        self.lookups: list[tuple[str, int]] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups.append((host, port))
        return self.answers[min(len(self.lookups), len(self.answers)) - 1]
