"""Checking a call's arguments against its tool's JSON schema, before the handler runs.

Each tool's schema is checked and compiled once, when its `Toolset` is built: a tool whose schema
is itself invalid is a `ConfigError` at construction, never a surprise mid-turn. A call whose
arguments break the schema raises `ToolFailed` naming the failing field (a JSON path) and the rule,
so the model reads what to fix (docs/reliability.md A2); no traceback and no argument value beyond a
short excerpt reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator, exceptions, validators
from jsonschema.protocols import Validator

from agent_core._errors import ConfigError, ToolFailed

__all__ = ["ArgumentSchema"]

MAX_REPORTED = 3
"""At most this many violations are reported in one error result, the most relevant first."""
MAX_MESSAGE_CHARS = 200
"""Each violation's message is cut to this length (it may quote a long argument value)."""


class ArgumentSchema:
    """A tool's compiled argument schema."""

    def __init__(self, tool_name: str, schema: Mapping[str, Any]) -> None:
        """Compile `schema`; raise `ConfigError` if it is not a valid JSON schema."""
        cls = validators.validator_for(schema, default=Draft202012Validator)
        try:
            cls.check_schema(dict(schema))
        except exceptions.SchemaError as exc:
            raise ConfigError(
                f"tool {tool_name!r} has an invalid parameters schema: {exc.message}"
            ) from exc
        self._validator: Validator = cls(schema)

    def check(self, args: Mapping[str, Any]) -> None:
        """Raise `ToolFailed` naming each failing field when `args` break the schema."""
        errors = sorted(self._validator.iter_errors(args), key=exceptions.relevance)
        if not errors:
            return
        shown = "; ".join(_describe(error) for error in errors[:MAX_REPORTED])
        more = f" (and {len(errors) - MAX_REPORTED} more)" if len(errors) > MAX_REPORTED else ""
        raise ToolFailed(f"invalid arguments: {shown}{more}")


def _describe(error: exceptions.ValidationError) -> str:
    message = error.message
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "…"
    return f"{error.json_path}: {message}"
