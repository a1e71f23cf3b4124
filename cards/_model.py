"""The platform-neutral progress card: what a person in the thread sees of a turn.

A `ProgressCard` is an immutable value; the worker builds a new one for every change and the
renderers (`cards._slack`, `cards._feishu`) turn it into each platform's JSON. Nothing here knows
about a platform, Redis or the runtime.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

__all__ = [
    "LINK_CHARS",
    "ORIGIN_CHARS",
    "CardApproval",
    "CardChild",
    "CardStatus",
    "CardStep",
    "Intervention",
    "InterventionKind",
    "ProgressCard",
    "StepState",
]


LINK_CHARS = 500
"""Longest `ProgressCard.link` shown. A link is never cut (a cut one leads nowhere), so a longer
one is left off; 500 stays within the Feishu byte plan's frame (`cards._limits`)."""
ORIGIN_CHARS = 300
"""Longest `ProgressCard.origin` shown (characters, before escaping); a longer one is cut."""
_LINK = re.compile(r"https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+")
"""An http(s) URL of RFC 3986 characters only: no space, quote or `<`, so no markup can form."""


class CardStatus(StrEnum):
    """Where the analysis stands. The first three are live; the rest are final."""

    QUEUED = "queued"
    """Accepted, waiting for a worker."""
    WORKING = "working"
    """A turn is running."""
    STOPPING = "stopping"
    """A stop was accepted; in-flight calls are being answered "interrupted"."""
    AWAITING_APPROVAL = "awaiting_approval"
    """Calls that would change something wait for a person's decision (Approve/Deny)."""
    DISPATCHED = "dispatched"
    """Sub-agents work on parts of the analysis; it goes on when they report."""
    ANSWERED = "answered"
    """Final: the model gave its answer (possibly after being redirected)."""
    STOPPED = "stopped"
    """Final: a person stopped the analysis."""
    FAILED = "failed"
    """Final: the turn ended with an error (`ProgressCard.error` says which, briefly)."""
    INTERRUPTED = "interrupted"
    """Final: the worker running the turn died and the turn could not be resumed."""
    CANCELLED = "cancelled"
    """Final: a stop arrived before the turn started; the model was never called."""

    @property
    def is_final(self) -> bool:
        """A final card has no Stop button and never changes again."""
        return self not in _LIVE


_LIVE = frozenset(
    {
        CardStatus.QUEUED,
        CardStatus.WORKING,
        CardStatus.STOPPING,
        CardStatus.AWAITING_APPROVAL,
        CardStatus.DISPATCHED,
    }
)


class StepState(StrEnum):
    """One tool call's state on the card."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True, kw_only=True)
class CardStep:
    """One tool call, as the card lists it."""

    tool: str
    """The tool's name (`http_get`)."""
    args: str
    """A one-line summary of the arguments (`url=https://status.example.com`)."""
    state: StepState = StepState.RUNNING
    duration_s: float | None = None
    """How long the call took; None while it runs."""
    call_id: str = ""
    """The call's id (never shown): a call the runtime books again, as a resumed batch does,
    keeps its one step and so its number. Empty on cards stored before steps had it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CardApproval:
    """A call waiting for a person's decision: the card shows it exactly, with two buttons."""

    tool: str
    args: str
    """The call's arguments (secrets redacted), as the decision is about exactly them."""
    risk: str
    """`side_effect` or `destructive` (a destructive call needs a second person), or
    `read_only` for a call the intent check held."""
    value: str
    """What the Approve and Deny buttons carry back (the call and a digest of its arguments)."""
    why: str = ""
    """Why a call waits that changes nothing: it goes against a person's correction (the intent
    check's reason). Empty for a call that changes something (`risk` says why)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CardChild:
    """A sub-agent of the analysis, as the card lists it."""

    child_id: str
    task: str
    state: str
    """`pending`, `running`, `awaiting`, `done`, `failed` or `cancelled`."""


class InterventionKind(StrEnum):
    """How a person changed the course of the analysis."""

    STEER = "steer"
    STOP = "stop"


@dataclass(frozen=True, slots=True, kw_only=True)
class Intervention:
    """A person redirected or stopped the analysis."""

    kind: InterventionKind
    by: str
    """Who (display name or platform user id)."""
    text: str = ""
    """What they said (for a steer); empty for a button press."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressCard:
    """Everything the card shows. Renderers truncate; this holds the full values."""

    title: str
    """The task, usually the mention's text."""
    turn_id: str
    """The live turn: the Stop button's value names it."""
    thread: str = ""
    """The thread the card lives in (Feishu's button value carries it back)."""
    status: CardStatus = CardStatus.WORKING
    steps: tuple[CardStep, ...] = ()
    interventions: tuple[Intervention, ...] = ()
    elapsed_s: float = 0.0
    pending_calls: int = 0
    """While stopping: how many in-flight calls the stop still waits for."""
    answer: str = ""
    """The final answer (markdown-ish plain text)."""
    error: str = ""
    """For FAILED: a short reason fit for people."""
    cutoff: str = ""
    """For ANSWERED: the budget that ended the analysis early (it answered with what it had)."""
    handed_over: bool = False
    """The worker running the analysis is shutting down; another one continues it."""
    approvals: tuple[CardApproval, ...] = ()
    """While awaiting approval: the waiting calls."""
    children: tuple[CardChild, ...] = ()
    """The sub-agents the analysis dispatched, with their states."""
    redirect_pending: bool = False
    """Someone redirected the analysis; it takes the redirect at its next cut, once the calls
    still running have answered."""
    link: str = ""
    """Where the analysis can be replayed (`CHATOPS_PUBLIC_URL` + `/runs/{turn}`); empty: none."""
    note: str = ""
    """A remark on how the analysis runs, under its status (it started without the thread's
    earlier messages, and why); empty: none."""
    origin: str = ""
    """What started the analysis, shown near the top (`Started by alert HighLatency (critical)
    from alertmanager`); empty: a person asked."""
    origin_link: str = ""
    """A link to the message that started it (the incident's root message); shown only as
    `shown_origin_link` allows, empty: none."""
    marked_wrong_by: str = ""
    """Who marked the answer wrong (display name or platform user id); empty: nobody. A marked
    card shows it and no longer offers the control."""

    @property
    def is_final(self) -> bool:
        """True once the card shows how the analysis ended."""
        return self.status.is_final

    @property
    def redirected(self) -> bool:
        """Someone steered the analysis at least once."""
        return any(i.kind is InterventionKind.STEER for i in self.interventions)

    @property
    def shown_link(self) -> str:
        """`link` when the card may show it (an http(s) URL of at most `LINK_CHARS`), else ""."""
        fits = len(self.link) <= LINK_CHARS and _LINK.fullmatch(self.link)
        return self.link if fits else ""

    @property
    def shown_origin_link(self) -> str:
        """`origin_link` when the card may show it (as `shown_link`), else ""."""
        fits = len(self.origin_link) <= LINK_CHARS and _LINK.fullmatch(self.origin_link)
        return self.origin_link if fits else ""

    @property
    def can_mark_wrong(self) -> bool:
        """The card offers "Mark answer wrong": it answered, and nobody marked it yet."""
        return (
            self.status is CardStatus.ANSWERED
            and bool(self.answer.strip())
            and not self.marked_wrong_by
        )

    def ended(self, status: CardStatus, **changes: Any) -> ProgressCard:
        """This card in the final `status`: a step still running can no longer finish."""
        assert status.is_final
        steps = tuple(
            replace(step, state=StepState.INTERRUPTED) if step.state is StepState.RUNNING else step
            for step in self.steps
        )
        return replace(self, status=status, steps=steps, pending_calls=0, approvals=(), **changes)

    def evolve(self, **changes: Any) -> ProgressCard:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def to_json(self) -> str:
        """The card as JSON (stored so a reaper can finalize what the last worker showed)."""
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | bytes) -> ProgressCard:
        """Rebuild a card from `to_json` output.

        Raises:
            ValueError: The JSON is not a card.
        """
        try:
            data = json.loads(raw)
            steps = tuple(
                CardStep(**{**s, "state": StepState(s["state"])}) for s in data.pop("steps")
            )
            interventions = tuple(
                Intervention(**{**i, "kind": InterventionKind(i["kind"])})
                for i in data.pop("interventions")
            )
            approvals = tuple(CardApproval(**a) for a in data.pop("approvals", ()))
            children = tuple(CardChild(**c) for c in data.pop("children", ()))
            status = CardStatus(data.pop("status"))
            return cls(
                **data,
                status=status,
                steps=steps,
                interventions=interventions,
                approvals=approvals,
                children=children,
            )
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not a progress card: {exc}") from exc
