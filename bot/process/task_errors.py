"""Task-group errors reported as the one error that caused them.

A task group that fails raises an `ExceptionGroup`; callers of the actor and the worker want
the error itself ("the lease was lost", "Redis is unavailable"), not "unhandled errors in a
TaskGroup". The error keeps its own cause (the `RedisError` behind a `StoreError`); only the
group is hidden from its traceback.
"""

from __future__ import annotations

__all__ = ["cause_of"]


def cause_of(
    group: BaseExceptionGroup[Exception], *, first: type[Exception] = Exception
) -> Exception:
    """The error to raise for `group`: the first of type `first` if any, else the first.

    Raise it from the one `except* Exception` clause: two clauses that both raise would be
    combined into a new group again.
    """
    errors = [e for e in group.exceptions if isinstance(e, Exception)]
    chosen = next((e for e in errors if isinstance(e, first)), errors[0])
    chosen.__suppress_context__ = True  # the group is not the cause; `__cause__` is kept
    return chosen
