r"""A field of a form-encoded body (`application/x-www-form-urlencoded`), decoded in linear time.

Contract: `form_value(body, name)` is what `parse_qs(body.decode(), strict_parsing=True)[name][0]`
gives: the first non-blank value of the field, `+` a space and %-escapes decoded as UTF-8 with bad
sequences replaced (U+FFFD); `ValueError` for a body that is not UTF-8 or has a field without
`=`, `KeyError` when no field has the name with a value. Two refusals of its own, both
`ValueError`: a `%` that starts no escape (which `parse_qs` would keep as it is, but which no
form encoder writes: Slack sends `%25`), and more than `MAX_FIELDS` fields (as
`parse_qs(max_num_fields=)` has it). The property tests check it against `parse_qs` itself.

Why not `parse_qs`: it decodes in Python one %-escape at a time, a Python step per escape that
an authentic body of a megabyte of escapes multiplies while the event loop waits (a button
press's body alone holds about 300). Here every backslash is doubled and every `%` becomes `\x`:
the `unicode_escape` codec decodes the result in C in one pass, no other escape can exist in it,
and a `%` without two hex digits after it is the codec's own error, raised where it is found. The
loop over fields, the one part in Python, is at most `MAX_FIELDS` long.
"""

from __future__ import annotations

__all__ = ["MAX_FIELDS", "form_value"]

MAX_FIELDS = 64
"""Fields a body may have: Slack's interactivity bodies have one, its slash commands a dozen."""


def form_value(body: bytes, name: str) -> str:
    """The first non-blank value of field `name` in `body`, as `parse_qs` decodes it.

    Raises:
        ValueError: The body is not UTF-8 (`UnicodeDecodeError`), has a field without `=` or a
            `%` that starts no escape, or more than `MAX_FIELDS` fields.
        KeyError: No field `name` has a value.
    """
    body.decode()  # parse_qs reads text: a body that is not UTF-8 is refused as it refuses it
    if not body:
        raise KeyError(name)
    if body.count(b"&") >= MAX_FIELDS:
        raise ValueError(f"more than {MAX_FIELDS} form fields")
    found: bytes | None = None
    for field in body.split(b"&"):  # every field, as parse_qs checks them all before answering
        key, equals, value = field.partition(b"=")
        if not equals:
            raise ValueError("a form field without '='")
        if found is None and value and _unquote_plus(key) == name:
            found = value
    if found is None:
        raise KeyError(name)
    return _unquote_plus(found)


def _unquote_plus(raw: bytes) -> str:
    escaped = raw.replace(b"+", b" ").replace(b"\\", b"\\\\").replace(b"%", b"\\x")
    try:
        latin = escaped.decode("unicode_escape")
    except UnicodeDecodeError as exc:
        raise ValueError("a '%' that starts no escape") from exc
    return latin.encode("latin-1").decode("utf-8", "replace")
