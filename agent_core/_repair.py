"""History repair: turn any history into one `validate_history` accepts (invariant I1).

Repair is an ordered tuple of pure passes (`REPAIR_PASSES`). Each takes a history and returns a
repaired one, returns its input object unchanged when it has nothing to fix, and is idempotent.
Repair only renames call ids and adds, moves or removes `ToolMessage`s: it never drops, edits or
reorders any other message. What it invents is marked `ToolStatus.SYNTHETIC`.

Contract of `repair_history`, for any list of messages `x` (tested with Hypothesis):
`validate_history(repair_history(x).messages)` passes; repairing twice changes nothing more; a
history that already validates comes back as the same list with no changes reported.

The order of the passes matters, and each one relies on the ones before it:

1. `rename_empty_ids` (RENAME) runs first, so that empty ids become real ids that the duplicate
   pass can check; the ids it mints may collide with existing ones, which pass 2 then resolves.
2. `rename_duplicate_ids` (RENAME): after it, a call id names exactly one call, so the later
   passes can ask "which call does this result answer?" with a plain dict lookup. Renaming later
   would make the move and drop passes guess between calls sharing an id (docs/reliability.md H4).
3. `restore_displaced_results` (MOVE) must run before the drop and close passes: both see a
   displaced result as an orphan (H7), so running either first would drop a real tool result and
   replace it with a synthetic one.
4. `drop_orphan_results` (REMOVE) leaves every tool block holding only first answers to its own
   assistant message's calls (H8), so that the last pass only has to count what is missing.
5. `close_dangling_calls` (ADD) runs last: once everything real is in place, whatever call is
   still unanswered was interrupted (a crash, a stop) and gets a synthetic result (H1, W3).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from agent_core._history import validate_history
from agent_core._messages import AssistantMessage, Message, ToolCall, ToolMessage, ToolStatus
from agent_core._repair_ids import Renamer, all_ids, call_ids, rename_empty_block

__all__ = [
    "INTERRUPTED_RESULT",
    "REPAIR_PASSES",
    "Fix",
    "RepairPass",
    "RepairReport",
    "close_dangling_calls",
    "drop_orphan_results",
    "rename_duplicate_ids",
    "rename_empty_ids",
    "repair_history",
    "restore_displaced_results",
]

INTERRUPTED_RESULT = (
    "[history repaired] This tool call was interrupted before it returned a result, so this "
    "placeholder was written by history repair. Whether the call had any effect is unknown: "
    "verify before retrying it."
)
"""Content of the synthetic result that closes a dangling call (invariant 7: "in doubt")."""


class Fix(NamedTuple):
    """What one repair pass produced."""

    messages: list[Message]
    """The repaired history: the input object itself when nothing needed fixing."""
    notes: tuple[str, ...] = ()
    """One line per change, for logs; indices refer to the list the pass received."""


@dataclass(frozen=True, slots=True)
class RepairPass:
    """One repair pass: calling it maps a history to a history (`list[Message] -> list[Message]`).

    `fix` also says what it changed, which `repair_history` collects into its report.
    """

    fix: Callable[[list[Message]], Fix]
    """The pass itself; its docstring says whether it adds, removes, moves or renames."""

    @property
    def name(self) -> str:
        """Name of the pass, as used in change notes."""
        return self.fix.__name__

    def __call__(self, messages: list[Message]) -> list[Message]:
        """Repair `messages`; the input object itself when there is nothing to fix."""
        return self.fix(messages).messages


@dataclass(frozen=True, slots=True)
class RepairReport:
    """Result of `repair_history`."""

    messages: list[Message]
    """The repaired history; the input list itself when it was already closed."""
    changes: tuple[str, ...]
    """Human-readable changes, prefixed by the pass that made them; empty when none."""

    @property
    def changed(self) -> bool:
        """Whether repair had to change anything."""
        return bool(self.changes)


def rename_empty_ids(messages: list[Message]) -> Fix:
    """RENAME: give each empty call id a stable synthetic id, and the same id to its answer.

    The id hashes the call's position in its message, name and arguments, so it does not depend
    on where the message sits in the history (docs/reliability.md H5: "synthetic stable id"). An
    empty-id answer in the call's own tool block takes the id of an unpaired empty-id call with
    the same name, else of the first unpaired one; any other empty-id answer is left for
    `drop_orphan_results`.
    """
    out: list[Message] | None = None
    notes: list[str] = []
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage) and not all(c.id for c in message.tool_calls):
            out = list(messages) if out is None else out
            rename_empty_block(out, index, message, notes)
    return Fix(messages) if out is None else Fix(out, tuple(notes))


def rename_duplicate_ids(messages: list[Message]) -> Fix:
    """RENAME: give every reuse of a call id a fresh id `{id}~{n}`, and the same to its answers.

    The first use of an id keeps it. A later use, in the same or a later assistant message, gets
    the first `{id}~{n}` (n >= 2) not used anywhere in the history. A result carrying the reused
    id answers the occurrence in its own tool block (the k-th such result the k-th occurrence);
    outside that, the latest occurrence before it.
    """
    renamer = Renamer(all_ids(messages))
    out = [renamer.visit(index, message) for index, message in enumerate(messages)]
    return Fix(out, tuple(renamer.notes)) if renamer.notes else Fix(messages)


def restore_displaced_results(messages: list[Message]) -> Fix:
    """MOVE (REMOVE + ADD): put a displaced result back at the end of its call's tool block.

    A result is displaced when it answers a call of an earlier assistant message but is separated
    from it by other messages (docs/reliability.md H7). It is moved only when that call has no
    answer in its own block; the first displaced answer wins, and later ones are left for
    `drop_orphan_results`. Results moved into one block follow the order of their calls.
    """
    moves = _displaced(messages)
    if not moves:
        return Fix(messages)
    moved = {cursor for results in moves.values() for cursor, _ in results}
    out: list[Message] = []
    pending: list[tuple[int, ToolMessage]] = []
    for index, message in enumerate(messages):
        if index in moved:
            continue
        if not isinstance(message, ToolMessage):
            out.extend(result for _, result in pending)
            pending = moves.get(index, [])
        out.append(message)
    out.extend(result for _, result in pending)
    notes = tuple(
        f"messages[{cursor}]: result for {result.call_id!r} moved back after messages[{owner}]"
        for owner, results in moves.items()
        for cursor, result in results
    )
    return Fix(out, notes)


def drop_orphan_results(messages: list[Message]) -> Fix:
    """REMOVE: drop each result that is not a first answer to a call of its block's assistant.

    That is: a result after a non-assistant message, one whose id matches no call of the assistant
    message right before its block (docs/reliability.md H8), and a second answer to the same call.
    """
    kept: list[Message] = []
    notes: list[str] = []
    calls: list[str] = []
    open_ids: Counter[str] = Counter()
    for index, message in enumerate(messages):
        if not isinstance(message, ToolMessage):
            calls = call_ids(message)
            open_ids = Counter(calls)
            kept.append(message)
        elif open_ids[message.call_id] > 0:
            open_ids[message.call_id] -= 1
            kept.append(message)
        else:
            why = "a second answer" if message.call_id in calls else "no call in the block before"
            notes.append(f"messages[{index}]: dropped result for {message.call_id!r} ({why})")
    return Fix(kept, tuple(notes)) if notes else Fix(messages)


def close_dangling_calls(messages: list[Message]) -> Fix:
    """ADD: answer each unanswered call with a synthetic "interrupted" result.

    The results go right after the call's tool block, in call order, with
    `status=ToolStatus.SYNTHETIC` and `INTERRUPTED_RESULT` as content.
    """
    out: list[Message] = []
    notes: list[str] = []
    open_calls: list[ToolCall] = []
    owner = 0
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            _mark_answered(open_calls, message.call_id)
        else:
            out.extend(_interrupted(open_calls, owner, notes))
            open_calls = list(message.tool_calls) if isinstance(message, AssistantMessage) else []
            owner = index
        out.append(message)
    out.extend(_interrupted(open_calls, owner, notes))
    return Fix(out, tuple(notes)) if notes else Fix(messages)


REPAIR_PASSES: tuple[RepairPass, ...] = (
    RepairPass(rename_empty_ids),
    RepairPass(rename_duplicate_ids),
    RepairPass(restore_displaced_results),
    RepairPass(drop_orphan_results),
    RepairPass(close_dangling_calls),
)
"""The passes in the order they must run (see the module docstring)."""


def repair_history(messages: Sequence[Message]) -> RepairReport:
    """Run every pass of `REPAIR_PASSES` in order and report what changed.

    Args:
        messages: Any history, oldest first.

    Returns:
        The repaired history and the changes made. A closed history comes back unchanged (the
        same list object when a list was passed) with no changes.

    Raises:
        HistoryError: Only if a pass has a bug: the result is validated before it is returned,
            so a broken history is never handed to a provider.
    """
    current = messages if isinstance(messages, list) else list(messages)
    changes: list[str] = []
    for repair_pass in REPAIR_PASSES:
        fix = repair_pass.fix(current)
        current = fix.messages
        changes.extend(f"{repair_pass.name}: {note}" for note in fix.notes)
    validate_history(current)
    return RepairReport(current, tuple(changes))


def _block_owners(messages: list[Message]) -> list[int | None]:
    """Per message: for a result, the index of the assistant message its tool block follows."""
    owners: list[int | None] = []
    owner: int | None = None
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            owners.append(owner)
        else:
            owners.append(None)
            owner = index if isinstance(message, AssistantMessage) else None
    return owners


def _displaced(messages: list[Message]) -> dict[int, list[tuple[int, ToolMessage]]]:
    """Assistant index -> the displaced results (with their index) to move after its block."""
    sites: dict[str, tuple[int, int]] = {}
    for index, message in enumerate(messages):
        for position, call_id in enumerate(call_ids(message)):
            sites.setdefault(call_id, (index, position))
    owners = _block_owners(messages)
    results = [(i, m) for i, m in enumerate(messages) if isinstance(m, ToolMessage)]
    in_place = {
        m.call_id for i, m in results if m.call_id in sites and _site(sites, m) == owners[i]
    }
    found: dict[str, tuple[int, ToolMessage]] = {}
    for cursor, result in results:
        if result.call_id in sites and result.call_id not in in_place:
            if _site(sites, result) < cursor:
                found.setdefault(result.call_id, (cursor, result))
    moves: dict[int, list[tuple[int, ToolMessage]]] = {}
    for call_id, moved in sorted(found.items(), key=lambda item: sites[item[0]]):
        moves.setdefault(sites[call_id][0], []).append(moved)
    return moves


def _site(sites: dict[str, tuple[int, int]], result: ToolMessage) -> int:
    """Index of the assistant message holding the call `result` answers."""
    return sites[result.call_id][0]


def _mark_answered(open_calls: list[ToolCall], call_id: str) -> None:
    """Remove the first open call with `call_id`, if any."""
    for position, call in enumerate(open_calls):
        if call.id == call_id:
            del open_calls[position]
            return


def _interrupted(open_calls: list[ToolCall], owner: int, notes: list[str]) -> list[ToolMessage]:
    """Synthetic results for the calls still open after the block of `messages[owner]`."""
    notes.extend(
        f"messages[{owner}]: call {call.id!r} had no result; answered as interrupted"
        for call in open_calls
    )
    return [
        ToolMessage(
            call_id=call.id,
            name=call.name,
            content=INTERRUPTED_RESULT,
            status=ToolStatus.SYNTHETIC,
        )
        for call in open_calls
    ]
