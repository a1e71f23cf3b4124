"""What the progress card shows, folded from a chain of turns' run events.

The tracker is the runtime's per-run event sink: a model response's tool calls become running
steps, each tool result finishes its step (done, failed or interrupted, with its duration), an
accepted stop turns the card to "stopping" with the number of calls still in flight. Every change
hands the new card to `on_change` (the publisher coalesces them). Pure state, no I/O.

Step numbers: a step's number is its position on the card, from 1, and the answer cites it
(`[3]`). The model reads the same number on the call's result (`agent_core`'s step labels: the
analysis's calls after its task, in history order). They agree because the card adds one step
per call of the analysis, in the order the runtime books them, which is the history's order:
every call of a batch (run, refused by the budget, waiting for approval) is booked; a call
booked again (a batch resumed after an approval, a drain or a worker's death, whose calls are
on the card it continues) keeps its step, found by call id; follow-up turns, approvals and
take-overs continue the same card and so the same count. A continued card is first reconciled
with the history (`reconciled`): its record is written only when an update is sent, so a worker
that died can leave it without the last steps whose calls the history holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from agent_core import (
    Approval,
    AssistantMessage,
    Message,
    RunEvent,
    ToolCall,
    ToolMessage,
    ToolStatus,
    redact,
    step_numbers,
)
from bot.control.approval_desk import approval_button_value
from bot.control.subagents import ChildRecord
from cards import (
    CardApproval,
    CardChild,
    CardStatus,
    CardStep,
    Intervention,
    InterventionKind,
    ProgressCard,
    StepState,
)

__all__ = ["CardTracker", "reconciled", "summarize_args"]

ARG_SUMMARY_CHARS = 120

_STEP_STATE = {
    ToolStatus.OK: StepState.DONE,
    ToolStatus.ERROR: StepState.FAILED,
    ToolStatus.INTERRUPTED: StepState.INTERRUPTED,
    ToolStatus.SYNTHETIC: StepState.INTERRUPTED,
}


def summarize_args(call: ToolCall) -> str:
    """One line for a call's arguments: `url=https://…, limit=5` (raw text if not an object).

    Secrets in the arguments (a password in a URL, a token) are redacted: the card is public.
    """
    try:
        args = json.loads(call.arguments)
    except ValueError:
        args = call.arguments
    if isinstance(args, dict):
        text = ", ".join(f"{k}={v}" for k, v in args.items())
    else:
        text = str(args)
    text = redact(" ".join(text.split()))  # e.g. a URL with a password in it (A7)
    return text if len(text) <= ARG_SUMMARY_CHARS else text[: ARG_SUMMARY_CHARS - 1] + "…"


def reconciled(card: ProgressCard, history: Sequence[Message]) -> ProgressCard:
    """`card`, continued, with one step for each call of its analysis in `history` it lacks.

    The steps become the analysis's calls in step order (`agent_core.step_numbers`), each step
    the card had kept as it was, then the steps the history does not hold yet (a batch still
    open). A step added is shown as its call ended (from its answer in the history). A card
    stored before steps had call ids is returned as it is: its steps cannot be matched.
    """
    numbers = step_numbers(history)
    shown = {step.call_id: step for step in card.steps}
    if "" in shown or numbers.keys() <= shown.keys():
        return card
    calls = {
        call.id: call
        for message in history
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
        if call.id in numbers
    }
    answers = {m.call_id: m.status for m in history if isinstance(m, ToolMessage)}
    steps = [
        shown.get(call.id) or _ended_step(call, answers.get(call.id, ToolStatus.OK))
        for call in sorted(calls.values(), key=lambda call: numbers[call.id])
    ]
    steps += [step for step in card.steps if step.call_id not in numbers]
    return card.evolve(steps=tuple(steps))


def _ended_step(call: ToolCall, status: ToolStatus) -> CardStep:
    """The step of a call the history holds answered, as the tracker would have shown it."""
    state = _STEP_STATE[status]
    return CardStep(tool=call.name, args=summarize_args(call), state=state, call_id=call.id)


@dataclass(eq=False)
class _Running:
    index: int
    started: float


class CardTracker:
    """Holds the card of one analysis (a chain of turns) and updates it from events."""

    def __init__(
        self,
        card: ProgressCard,
        on_change: Callable[[ProgressCard], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._card = card
        self._on_change = on_change
        self._clock = clock
        self._started = clock()
        self._running: dict[str, _Running] = {}

    @property
    def card(self) -> ProgressCard:
        """The current card."""
        return self._card

    @property
    def in_flight(self) -> int:
        """Calls started and not answered yet."""
        return len(self._running)

    def _show(self, card: ProgressCard) -> ProgressCard:
        self._card = card.evolve(elapsed_s=self._clock() - self._started)
        self._on_change(self._card)
        return self._card

    def _set(self, **changes: object) -> ProgressCard:
        return self._show(self._card.evolve(**changes))

    def begin_turn(self, turn_id: str) -> None:
        """A (next) turn of the chain starts: the Stop button names it."""
        self._running.clear()
        self._set(
            turn_id=turn_id,
            status=CardStatus.WORKING,
            pending_calls=0,
            handed_over=False,
            redirect_pending=False,
            approvals=(),
        )

    def note(self, text: str) -> None:
        """A remark under the status for the rest of the analysis (e.g. no thread context)."""
        self._set(note=text)

    def handed_over(self) -> None:
        """The turn was drained: another worker continues the analysis on this card."""
        self._set(handed_over=True)

    async def sink(self, event: RunEvent) -> None:
        """The runtime's event sink for the running turn."""
        if event.partial:
            return
        steps = list(self._card.steps)
        now = self._clock()
        for call in event.calls:
            index = self._step_of(steps, call)
            if index is None:
                index = len(steps)
                steps.append(CardStep(tool=call.name, args=summarize_args(call), call_id=call.id))
            if steps[index].state is StepState.RUNNING:  # an answered one keeps its answer
                self._running[call.id] = _Running(index, now)
        for response in event.responses:
            running = self._running.pop(response.call_id, None)
            if running is None:
                continue
            steps[running.index] = replace(
                steps[running.index],
                state=_STEP_STATE[response.status],
                duration_s=round(now - running.started, 3),
            )
        if event.calls or event.responses:
            pending = self.in_flight if self._card.status is CardStatus.STOPPING else 0
            self._set(steps=tuple(steps), pending_calls=pending)

    def _step_of(self, steps: list[CardStep], call: ToolCall) -> int | None:
        """The step already on the card for `call` (a resumed batch books its calls again).

        By call id; a card stored before steps had one is matched as it was, by a step still
        shown running with the same tool and arguments. None: a new call, a new step.
        """
        for index in range(len(steps) - 1, -1, -1):
            if steps[index].call_id == call.id:
                return index
        step = CardStep(tool=call.name, args=summarize_args(call))
        return self._shown_unanswered(steps, step)

    def _shown_unanswered(self, steps: list[CardStep], step: CardStep) -> int | None:
        """The index of a step still shown running that no call of this tracker owns."""
        owned = {running.index for running in self._running.values()}
        for index in range(len(steps) - 1, -1, -1):
            shown = steps[index]
            if index not in owned and shown.state is StepState.RUNNING and shown == step:
                return index
        return None

    def awaiting_approval(self, approvals: Sequence[Approval]) -> None:
        """Calls wait for people's decisions: the card shows each, with Approve and Deny."""
        shown = tuple(
            CardApproval(
                tool=a.tool,
                args=summarize_args(ToolCall(id=a.call_id, name=a.tool, arguments=a.arguments)),
                risk=a.risk.value,
                value=approval_button_value(a),
                why=a.why,
            )
            for a in approvals
        )
        self._running.clear()
        self._set(status=CardStatus.AWAITING_APPROVAL, approvals=shown)

    def children(self, records: Sequence[ChildRecord], *, waiting: bool = False) -> None:
        """The analysis's sub-agents and their states; `waiting`: it waits for them now."""
        shown = tuple(
            CardChild(child_id=r.child_id, task=r.task, state=r.state.value) for r in records
        )
        changes: dict[str, object] = {"children": shown}
        if waiting:
            self._running.clear()
            changes["status"] = CardStatus.DISPATCHED
        self._set(**changes)

    def stopping(self, by: str) -> None:
        """A stop was accepted: say who, and how many calls it still waits for."""
        stop = Intervention(kind=InterventionKind.STOP, by=by)
        self._set(
            status=CardStatus.STOPPING,
            pending_calls=self.in_flight,
            interventions=(*self._card.interventions, stop),
        )

    def redirect_received(self) -> None:
        """A redirect is queued: the card says so until the turn reaches its cut."""
        if self._card.status is CardStatus.WORKING and not self._card.redirect_pending:
            self._set(redirect_pending=True)

    def steered(self, steers: list[tuple[str, str]]) -> None:
        """People redirected the analysis: `(who, what they said)` in order."""
        added = tuple(Intervention(kind=InterventionKind.STEER, by=b, text=t) for b, t in steers)
        self._set(interventions=(*self._card.interventions, *added))

    def final(
        self,
        status: CardStatus,
        *,
        answer: str = "",
        error: str = "",
        by: str = "",
        cutoff: str = "",
    ) -> ProgressCard:
        """The card's last state (no Stop button; steps still running end interrupted)."""
        interventions = self._card.interventions
        stopped = any(i.kind is InterventionKind.STOP for i in interventions)
        if status is CardStatus.STOPPED and by and not stopped:
            interventions = (*interventions, Intervention(kind=InterventionKind.STOP, by=by))
        ended = self._card.ended(
            status, answer=answer, error=error, cutoff=cutoff, interventions=interventions
        )
        return self._show(ended)
