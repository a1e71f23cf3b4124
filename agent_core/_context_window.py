"""The context window: what one model request sends, compacted to fit the model's window.

Contract (docs/design.md §Context window):
- **What is sent only.** `ContextWindow.prepare` returns the messages of one request; the
  persisted history, its journal and the audit trail keep every original.
- **Verbatim:** the system prompt; the latest analysis's inputs (its task, its thread context,
  and any input kind this module does not know, treated like the task) and the corrections
  sent after them; the latest exchange (the last assistant message with all its results, or
  the last message).
- **Levels**, each only when the one before does not fit `window - reserve` (in the provider's
  tokens, `Calibration`): (0) everything; (1) every tool result before the *frontier* replaced
  by a stub naming its call (`[result of f({...}) left out to fit the context window: call it
  again if you need it]`); (2) everything before the frontier replaced by a summary the model
  wrote in a tool-less request of its own (`summary_request`), the verbatim messages kept;
  (3) the latest exchange's results cut in their middle.
- **Closed** (docs/design.md §Invariants I1): the frontier and the summary's edge are always
  at a message that is not a tool result, a stub answers the same call id as its original, so
  every call sent keeps exactly one answer.
- **Sticky, cached, amortised.** Per session, the estimate of each message and their running
  sums are kept and extended by the messages appended since (the history grows by appends), so
  a request costs what its new messages cost, not the whole history. The frontier only moves
  forward, by half the window when it moves, and a summary is kept until the frontier passes
  it: a summary is written again only once the room it made is used up, then from the previous
  summary and the messages it newly covers, never the whole history. A summary request that
  fails (`ModelError`) leaves a note in this request only, never kept: the next request asks
  for the summary again, and the note is never the previous summary of one. A history that
  is not a continuation of the one seen (a new turn read anew, a repair) is estimated once
  again; its frontier and summary are kept when the message they end at is still there.

`prepare` is the one async step (the summary request, `agent_core._context_summary`, made by
the caller's `Summarize`); everything else is pure arithmetic on the cached sums.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from agent_core._context_summary import (
    Summarize,
    SummaryJob,
    no_summary,
    summary_body,
    summary_message,
    summary_request,
)
from agent_core._errors import ContextTooLong, ModelError
from agent_core._llm.convert import tools_json
from agent_core._messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolMessage,
    UserKind,
    UserMessage,
)
from agent_core._tokens import Calibration, cut_to_tokens, estimate_tokens, message_tokens
from agent_core.tools._base import Toolset

__all__ = ["STUB", "ContextWindow", "Prepared", "Summarize", "stub_text"]

STUB = "[result of {call} left out to fit the context window: call it again if you need it]"
"""What a tool result before the frontier is replaced by."""
_CUT = "\n[… {cut:,} characters cut here to fit the context window …]\n"
_ARGUMENT_CHARS = 200  # of a call's arguments, in its stub
_SUMMARY_TOKENS = 1_000  # at most; less in a small window (an eighth of it)
_SUMMARY_INPUT_TOKENS = 8_000  # at most; less in a small window (half of it)
_TAIL_END_CHARS = 200  # a cut result keeps its end (the untrusted block's closing tag)
_MIN_RESULT_TOKENS = 64
_HARDER = 0.75  # the share of the budget a retry after a named window aims at
_HARDEST = 0.5  # … and after a 400 that named nothing
_SESSIONS = 512  # sessions whose sums are kept (least recently used dropped)


def stub_text(name: str, arguments: str) -> str:
    """The stub that replaces the result of `name(arguments)`."""
    if len(arguments) > _ARGUMENT_CHARS:
        arguments = arguments[:_ARGUMENT_CHARS] + "…"
    return STUB.format(call=f"{name}({arguments})")


def _is_input(message: Message) -> bool:
    """An analysis's input (task, thread context, an unknown kind): kept like the task."""
    return isinstance(message, UserMessage) and message.kind not in (
        UserKind.STEER,
        UserKind.NOTICE,
    )


@dataclass(frozen=True)
class _Summary:
    upto: int
    anchor: Message  # history[upto - 1] when it was written
    message: UserMessage
    size: int


@dataclass(eq=False)
class _Session:
    """One session's cached estimates, pins, frontier and summary."""

    sizes: list[int] = field(default_factory=list)
    cum: list[int] = field(default_factory=lambda: [0])
    cum_stub: list[int] = field(default_factory=lambda: [0])
    call_args: dict[str, str] = field(default_factory=dict)
    pins: list[int] = field(default_factory=list)
    group_start: int = 0
    first: Message | None = None
    last: Message | None = None
    frontier: int = 0
    frontier_anchor: Message | None = None
    summary: _Summary | None = None
    prefix: list[Message] = field(default_factory=list)
    prefix_stubs: int = 0
    prefix_span: tuple[int, int] = (0, 0)

    def continues(self, history: Sequence[Message]) -> bool:
        """Whether `history` is the history these sums were taken of, plus appended messages."""
        seen = len(self.sizes)
        if seen == 0:
            return True
        return seen <= len(history) and history[seen - 1] is self.last and history[0] is self.first

    def extend(self, history: Sequence[Message]) -> None:
        """Estimate the messages appended since the last call."""
        for index in range(len(self.sizes), len(history)):
            self._add(index, history[index], history[index - 1] if index else None)
        if history:
            self.first, self.last = history[0], history[-1]

    def _add(self, index: int, message: Message, before: Message | None) -> None:
        size = stub = message_tokens(message)
        if isinstance(message, ToolMessage):
            arguments = self.call_args.get(message.call_id, "")
            stub = min(size, message_tokens(_stub(message, arguments)))
        else:
            self.group_start = index
        if isinstance(message, AssistantMessage):
            self.call_args.update((call.id, call.arguments) for call in message.tool_calls)
        elif isinstance(message, UserMessage):
            self._pin(index, message, before)
        self.sizes.append(size)
        self.cum.append(self.cum[-1] + size)
        self.cum_stub.append(self.cum_stub[-1] + stub)

    def _pin(self, index: int, message: UserMessage, before: Message | None) -> None:
        if message.kind is UserKind.STEER:
            if self.pins:
                self.pins.append(index)
        elif _is_input(message):
            same_inputs = before is not None and _is_input(before)
            if same_inputs and self.pins and self.pins[-1] == index - 1:
                self.pins.append(index)
            else:  # a new analysis: its inputs replace the last one's
                self.pins = [index]

    def carry(self, old: _Session, history: Sequence[Message]) -> None:
        """Keep `old`'s frontier and summary where the message each ends at is still there."""
        summary = old.summary
        if summary is not None and _ends_at(history, summary.upto, summary.anchor):
            self.summary = summary
        if old.frontier and _ends_at(history, old.frontier, old.frontier_anchor):
            self.frontier, self.frontier_anchor = old.frontier, old.frontier_anchor


def _ends_at(history: Sequence[Message], index: int, anchor: Message | None) -> bool:
    return 0 < index <= len(history) and history[index - 1] == anchor


def _stub(message: ToolMessage, arguments: str) -> ToolMessage:
    return message.model_copy(update={"content": stub_text(message.name, arguments)})


@dataclass(frozen=True)
class _Plan:
    start: int  # the summary's edge (0: no summary)
    frontier: int  # results before it are stubs
    job: SummaryJob | None = None


@dataclass(frozen=True)
class Prepared:
    """The messages of one request and what the window made of them."""

    messages: list[Message]
    """What to send: the system prompt first."""
    estimate: int
    """Its estimated size (before calibration), which `ContextWindow.observe` compares."""
    compacted: str
    """What was compacted ("" when nothing was), for the run's trace."""


class ContextWindow:
    """Fits each request of a runtime's turns into the model's context window.

    One per runtime: the calibration is the model's; the cached sums are per session.
    """

    def __init__(self, *, window_tokens: int, reserve_tokens: int) -> None:
        self._window = window_tokens
        self._reserve = reserve_tokens
        self.calibration = Calibration()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._tools: dict[tuple[str, ...], int] = {}

    @property
    def window_tokens(self) -> int:
        """The window in force (the configured one, or a smaller one a provider named)."""
        return self._window

    def narrow(self, window_tokens: int) -> None:
        """Use a smaller window from now on (a provider named its own in a 400)."""
        self._window = max(self._reserve + 1, min(self._window, window_tokens))

    def observe(self, estimate: int, reported: int) -> None:
        """Calibrate from one request: its estimate and the provider's `usage.prompt_tokens`."""
        self.calibration.observe(estimate, reported)

    async def prepare(
        self,
        session_id: str,
        system: SystemMessage | None,
        history: Sequence[Message],
        toolset: Toolset,
        summarize: Summarize,
        *,
        harder: float = 1.0,
    ) -> Prepared:
        """The messages one request sends, compacted to fit the window.

        Args:
            session_id: Whose history it is (its sums are cached under it).
            system: The system prompt, kept first and verbatim.
            history: The (closed) history.
            toolset: The tools the request offers (their schemas count).
            summarize: Makes the summary request when one is needed.
            harder: The share of the budget to aim at (below 1 after a provider's 400).
        """
        state = self._session(session_id, history)
        fixed = self._tools_tokens(toolset) + (message_tokens(system) if system else 0)
        tokens = int((self._window - self._reserve) * harder)
        budget = max(0, self.calibration.estimate(tokens) - fixed)
        plan = _plan(state, history, budget)
        kept = state.summary
        written = True
        if plan.job is not None:
            text, written = await _write_summary(plan.job, summarize)
            _keep_summary(state, history, plan.job, text)
            plan = _plan(state, history, budget, summarise=False)
        sent, size, compacted = _build(state, history, plan, budget)
        if not written:  # the note serves this request only: the next one tries again
            state.summary = kept
        head = [system] if system else []
        return Prepared([*head, *sent], size + fixed, compacted)

    def learn(self, exc: ContextTooLong, estimate: int) -> float:
        """Learn from a `context_length_exceeded` 400; return the budget share to retry at.

        The window it names is used from now on; the size it counted calibrates the estimate.
        """
        if exc.window:
            self.narrow(exc.window)
        if exc.requested:
            self.observe(estimate, exc.requested)
        return _HARDER if exc.window or exc.requested else _HARDEST

    def _session(self, session_id: str, history: Sequence[Message]) -> _Session:
        state = self._sessions.pop(session_id, None)
        if state is None or not state.continues(history):
            fresh = _Session()
            fresh.extend(history)
            if state is not None:
                fresh.carry(state, history)
            state = fresh
        else:
            state.extend(history)
        self._sessions[session_id] = state
        while len(self._sessions) > _SESSIONS:
            self._sessions.popitem(last=False)
        return state

    def _tools_tokens(self, toolset: Toolset) -> int:
        key = tuple(tool.name for tool in toolset)
        if key not in self._tools:
            if len(self._tools) >= _SESSIONS:
                self._tools.clear()
            self._tools[key] = estimate_tokens(tools_json(toolset).decode()) if key else 0
        return self._tools[key]


def _cost(state: _Session, start: int, frontier: int, end: int) -> int:
    """The estimate of sending: pins before `start`, its summary, stubs to `frontier`, the rest."""
    cost = (state.cum_stub[frontier] - state.cum_stub[start]) + (
        state.cum[end] - state.cum[frontier]
    )
    if start and state.summary is not None:
        cost += state.summary.size + sum(state.sizes[p] for p in state.pins if p < start)
    return cost


def _plan(
    state: _Session, history: Sequence[Message], budget: int, *, summarise: bool = True
) -> _Plan:
    end = len(history)
    if state.cum[end] <= budget:
        return _Plan(0, 0)
    start = state.summary.upto if state.summary is not None else 0
    frontier = min(max(state.frontier, start), state.group_start)
    if _cost(state, start, frontier, end) > budget:
        frontier = _advance(state, history, frontier, budget // 2)
        state.frontier = frontier
        state.frontier_anchor = history[frontier - 1] if frontier else None
    if not summarise or frontier <= start or _cost(state, start, frontier, end) <= budget:
        return _Plan(start, frontier)
    job = SummaryJob(
        upto=frontier,
        previous=_summary_text(state),
        messages=tuple(history[start:frontier]),
        covered=frontier,
        budget=min(_SUMMARY_INPUT_TOKENS, budget // 2),
        words=max(60, min(_SUMMARY_TOKENS, budget // 8) * 3 // 4),
    )
    return _Plan(start, frontier, job)


def _advance(state: _Session, history: Sequence[Message], frontier: int, tail: int) -> int:
    """The first message at or after `frontier`, not a result, whose tail fits `tail`."""
    end = len(history)
    for index in range(frontier, state.group_start):
        if (
            not isinstance(history[index], ToolMessage)
            and state.cum[end] - state.cum[index] <= tail
        ):
            return index
    return state.group_start


def _summary_text(state: _Session) -> str:
    if state.summary is None:
        return ""
    return summary_body(state.summary.message)


async def _write_summary(job: SummaryJob, summarize: Summarize) -> tuple[str, bool]:
    """The summary's text and whether the model wrote it (else a note saying why not)."""
    try:
        return await summarize(summary_request(job)), True
    except ModelError as exc:  # the analysis goes on without the summary, never fails
        return no_summary(str(exc), job.covered), False


def _keep_summary(state: _Session, history: Sequence[Message], job: SummaryJob, text: str) -> None:
    message = summary_message(job, text)
    anchor = history[job.upto - 1]
    state.summary = _Summary(job.upto, anchor, message, message_tokens(message))


def _build(
    state: _Session, history: Sequence[Message], plan: _Plan, budget: int
) -> tuple[list[Message], int, str]:
    """The history to send for `plan`, its estimate, and what was compacted."""
    end = len(history)
    if plan.frontier == 0 and plan.start == 0:
        return list(history), state.cum[end], ""
    head: list[Message] = []
    notes = []
    if plan.start and state.summary is not None:
        head = [history[p] for p in state.pins if p < plan.start]
        head.append(state.summary.message)
        notes.append(f"summary of {plan.start} messages")
    prefix = _prefix(state, history, plan)
    if state.prefix_stubs:
        notes.append(f"{state.prefix_stubs} results stubbed")
    tail = list(history[plan.frontier :])
    cost = _cost(state, plan.start, plan.frontier, end)
    if cost > budget:
        tail, cut = _cut_results(
            tail, budget - (cost - (state.cum[end] - state.cum[plan.frontier]))
        )
        cost = budget
        notes.append(f"{cut} latest results cut")
    return [*head, *prefix, *tail], cost, ", ".join(notes)


def _prefix(state: _Session, history: Sequence[Message], plan: _Plan) -> list[Message]:
    """`history[start:frontier]` with its results as stubs, extended from the last request's."""
    start, done = state.prefix_span
    if start != plan.start or done > plan.frontier:
        state.prefix, state.prefix_stubs, done = [], 0, plan.start
    for index in range(done, plan.frontier):
        message = history[index]
        if (
            isinstance(message, ToolMessage)
            and state.cum_stub[index + 1] - state.cum_stub[index] < state.sizes[index]
        ):
            message = _stub(message, state.call_args.get(message.call_id, ""))
            state.prefix_stubs += 1
        state.prefix.append(message)
    state.prefix_span = (plan.start, plan.frontier)
    return state.prefix


def _cut_results(tail: list[Message], room: int) -> tuple[list[Message], int]:
    """The latest exchange with its results cut in the middle to share `room` tokens."""
    results = [m for m in tail if isinstance(m, ToolMessage)]
    fixed = sum(message_tokens(m) for m in tail if not isinstance(m, ToolMessage))
    share = max(_MIN_RESULT_TOKENS, (room - fixed) // max(1, len(results)))
    cut = 0
    out: list[Message] = []
    for message in tail:
        if isinstance(message, ToolMessage) and estimate_tokens(message.content) > share:
            message = message.model_copy(update={"content": _cut_middle(message.content, share)})
            cut += 1
        out.append(message)
    return out, cut


def _cut_middle(text: str, tokens: int) -> str:
    """`text` cut to about `tokens`: its start and its last characters, the cut marked."""
    end = text[-_TAIL_END_CHARS:]
    start = cut_to_tokens(text, max(1, tokens - estimate_tokens(end) - 20))
    return start + _CUT.format(cut=len(text) - len(start) - len(end)) + end
