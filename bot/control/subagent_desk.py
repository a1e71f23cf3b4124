"""The bot's side of the sub-agent tools, and the sub-agents' "card".

`SubagentDesk` implements `agent_core.tools._subagents.SubagentPort` over the registry: the turn
chain tells it which analysis each session is running (`running`/`done`), so a dispatch knows
its parent's event and a question knows its parent. A sub-agent cannot dispatch (one level of
children), and only a sub-agent can ask.

`SubagentCards` is the `ChatPlatform` of sub-agent analyses: nothing is posted anywhere; the
card's life is the child's record. Opening the card marks the child running; its final state is
the child's report (`done` with the answer, `failed` with the reason, `cancelled` when stopped),
which reaches the parent's inbox and, when it finishes the dispatch, wakes the parent. The
reaper finalizes a dead worker's child the same way, so a child whose worker vanished still
reports (as failed).

Everything a child or a parent writes to the other is quoted as untrusted data
(`agent_core._untrusted.quote_untrusted`, docs/reliability.md X9): a report and a question are
written by a model that read tool output. The note's first line is the runtime's (who, which
task, which state); the text itself is inside one block whose markers are neutralised.
"""

from __future__ import annotations

from agent_core import QuoteKind, ToolContext, ToolFailed, aquote_untrusted, neutralise_markers
from bot.control.subagents import ChildState, SubagentRegistry
from bot.events import ChatEvent, Platform
from bot.publishing.platform import CardRef, CardTarget
from cards import CardStatus, ProgressCard

__all__ = ["SubagentCards", "SubagentDesk"]

_FINAL_STATES = {
    CardStatus.ANSWERED: ChildState.DONE,
    CardStatus.FAILED: ChildState.FAILED,
    CardStatus.INTERRUPTED: ChildState.FAILED,
    CardStatus.STOPPED: ChildState.CANCELLED,
    CardStatus.CANCELLED: ChildState.CANCELLED,
}


class SubagentDesk:
    """Creates children, carries questions and answers, for the analyses of one worker."""

    def __init__(self, registry: SubagentRegistry) -> None:
        self._registry = registry
        self._events: dict[str, ChatEvent] = {}

    @property
    def registry(self) -> SubagentRegistry:
        """The registry the desk writes to."""
        return self._registry

    def running(self, session_id: str, event: ChatEvent) -> None:
        """The session runs the analysis `event` started (set for each of its turns)."""
        self._events[session_id] = event

    def done(self, session_id: str) -> None:
        """The session's turn ended."""
        self._events.pop(session_id, None)

    def _event(self, ctx: ToolContext) -> ChatEvent:
        event = self._events.get(ctx.session_id)
        if event is None:
            raise ToolFailed("this analysis cannot use sub-agents here")
        return event

    async def dispatch(self, ctx: ToolContext, task: str) -> str:
        """Create and queue a child of the caller's analysis; its id."""
        event = self._event(ctx)
        if event.platform is Platform.SUBAGENT:
            raise ToolFailed("a sub-agent cannot dispatch sub-agents of its own")
        record = await self._registry.dispatch(
            event, ctx.session_id, ctx.turn_id, task, call_id=ctx.call_id
        )
        if record is None:
            raise ToolFailed("the analysis was stopped: no sub-agent was created")
        return record.child_id

    async def ask(self, ctx: ToolContext, question: str) -> None:
        """Mark the calling child awaiting; its question to the parent's inbox, waking it."""
        event = self._event(ctx)
        if event.platform is not Platform.SUBAGENT:
            raise ToolFailed("only a sub-agent can ask its parent")
        record = await self._registry.child(event.workspace, event.thread)
        if record is None:
            raise ToolFailed("parent unavailable: its analysis is gone")
        quoted = await aquote_untrusted(record.child_id, question, kind=QuoteKind.SUBAGENT_MESSAGE)
        note = (
            f"Sub-agent {record.child_id} (task: {neutralise_markers(record.task)}) asks: "
            f'the question is below; answer it with answer_child(child_id="{record.child_id}", '
            f"answer=…).\n{quoted}"
        )
        state = await self._registry.move(record, ChildState.AWAITING, question=question, note=note)
        if state is not ChildState.AWAITING:
            raise ToolFailed("parent unavailable: its analysis was stopped")

    async def answer(self, ctx: ToolContext, child_id: str, answer: str) -> None:
        """Answer a waiting child of the caller's analysis and queue its continuation."""
        record = await self._registry.child(ctx.session_id, child_id)
        if record is None:
            raise ToolFailed(f"no sub-agent {child_id} of this analysis")
        if not await self._registry.answer(record, answer):
            raise ToolFailed(f"sub-agent {child_id} is not waiting for an answer")


class SubagentCards:
    """The `ChatPlatform` of sub-agent analyses: their card is their record."""

    def __init__(self, registry: SubagentRegistry) -> None:
        self._registry = registry

    @property
    def platform(self) -> Platform:
        """The sub-agent platform."""
        return Platform.SUBAGENT

    async def find_card(
        self, target: CardTarget, key: str, *, posted_after: float
    ) -> CardRef | None:
        """None: posting a child's card again is harmless (its card is its record)."""
        return None

    async def post_card(self, target: CardTarget, card: ProgressCard, *, key: str) -> CardRef:
        """Opening a child's card: the child is running."""
        record = await self._registry.child(target.channel, target.thread)
        if record is not None and record.state is ChildState.PENDING:
            await self._registry.move(record, ChildState.RUNNING)
        ref = CardRef(platform=Platform.SUBAGENT, channel=target.channel, message_id=target.thread)
        if card.is_final:  # a first post may be the last state (a reaper, a dead letter)
            await self.update_card(ref, card)
        return ref

    async def update_card(self, ref: CardRef, card: ProgressCard) -> None:
        """A final card is the child's report; other states change nothing."""
        state = _FINAL_STATES.get(card.status)
        if state is None:
            return
        record = await self._registry.child(ref.channel, ref.message_id)
        if record is None or record.state.is_final:
            return
        report = card.answer if state is ChildState.DONE else (card.error or card.status.value)
        quoted = await aquote_untrusted(record.child_id, report, kind=QuoteKind.SUBAGENT_REPORT)
        note = (
            f"Report from sub-agent {record.child_id} (task: {neutralise_markers(record.task)}), "
            f"{state.value}: the report is below.\n{quoted}"
        )
        await self._registry.move(record, state, report=report, note=note)

    async def set_status(self, target: CardTarget, status: str) -> None:
        """No status line: nothing is shown."""
        return None

    async def aclose(self) -> None:
        """Nothing to close: the registry's Redis client belongs to the worker."""
        return None
