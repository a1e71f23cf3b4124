"""What a provider's error means: the openai SDK's exceptions mapped to the `ModelError` tree.

Context window: a 400 saying the request exceeds the model's context window becomes
`ContextTooLong`, with the window and the request's size when the provider names them. Read
from `code` (OpenAI's `context_length_exceeded`), `type` (llama.cpp's
`exceed_context_size_error`, with `n_ctx` and `n_prompt_tokens`) or the message (vLLM answers
`code: 400` and says "maximum context length is N tokens. However, you requested M tokens (K in
the messages, …)"; older llama.cpp says "exceeds the available context size").

An invalid request answered 5xx: llama-cpp-python's server validates the request body with
FastAPI inside a route that turns every exception into `{"error": {"message": str(exc), "type":
"internal_server_error"}}` with HTTP 500 (its `llama_cpp/server/errors.py`), so a request it
cannot parse (an assistant `content: null`) is a 500 whose message is FastAPI's dump, "N
validation errors:" then one pydantic error dict per line, each located in the request `body`
(a dump that locates nothing in the body, such as a gateway's "1 validation error for
ModelResponse" about an answer it could not parse, is the provider failing: retried, then
`ModelUnavailable`). Sending it again cannot help: it is mapped like a 400 (`HistoryRejected`
when the errors are about `messages`, so the run loop repairs once; else `ModelRejected`), and
`openai_http_client`'s response hook marks such an answer `x-should-retry: false`, the header the
SDK obeys before its own 5xx retry (`_should_retry` in its `_base_client.py`).

Every message mapped here is one line of at most `MESSAGE_CHARS` characters: it ends up on a
card and in a log line, never as a provider's multi-line dump.

Retries: the openai SDK retries connection errors, 408, 409, 429 and 5xx with exponential backoff
(honouring `Retry-After`) and never retries other 4xx; we rely on it (`max_retries`) rather than
layering a second retry loop. A 400 is never retried here: when it is about the history, the run
loop repairs once and retries once (docs/design.md §Platform facts).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from agent_core._errors import (
    ContextTooLong,
    HistoryRejected,
    ModelError,
    ModelRejected,
    ModelUnavailable,
)

if TYPE_CHECKING:
    import openai

__all__ = [
    "MESSAGE_CHARS",
    "context_too_long",
    "invalid_request",
    "map_openai_errors",
    "one_line",
    "openai_http_client",
]

MESSAGE_CHARS = 300
"""The longest message a mapped error carries."""
# Substrings of the providers' 400 messages about broken tool-call histories (docs/design.md
# §Platform facts): unanswered or duplicate call ids, orphan tool messages, empty ids, Anthropic's
# tool_use blocks.
_HISTORY_MARKERS = ("tool_call", "role 'tool'", "tool_use", "tool_result")
# What OpenAI, vLLM and llama.cpp answer for a request over the context window (module docstring).
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
_CONTEXT_MARKERS = ("maximum context length", "exceeds the available context size")
_WINDOW = (
    re.compile(r"maximum context length is (\d{1,9}) tokens"),
    re.compile(r"available context size \((\d{1,9}) tokens\)"),
)
_REQUESTED = (
    re.compile(r"resulted in (\d{1,9}) tokens"),
    re.compile(r"(\d{1,9}) in the messages"),
    re.compile(r"request \((\d{1,9}) tokens\)"),
)
_MESSAGE_SCAN_CHARS = 2_000  # a provider's message is read this far, no further
# Statuses the SDK retries itself; when they still fail, the provider is unavailable.
_TRANSIENT = frozenset({408, 409, 429})
# FastAPI's "1 validation error:" / "3 validation errors:" and pydantic's "1 validation error for
# Model" open the dump; each error is then a dict with `loc` and `msg`.
_VALIDATION = re.compile(r"\b(\d{1,6}) validation errors?\b")
# Our request's errors are located in the request body: FastAPI's `'loc': ('body', ...)`, or a
# flattened `body.messages.2.content`. A gateway's pydantic error about a response it could not
# parse ("1 validation error for ModelResponse\nchoices.0.message ...") names no body: that is
# the provider failing, and stays retryable.
_REQUEST_LOC = re.compile(r"""'loc': \(\s*['"]body['"]|\bbody\.\w""")
_LOC = re.compile(r"'loc': \(([^)]{0,200})\)")
_MSG = re.compile(r"""'msg': (['"])(.{0,200}?)\1""")
_TYPE = re.compile(r"'type': '(\w{1,60})'")
# A union's branches that do not apply (another role) say only that; the error to name is another.
_BRANCH_MISMATCH = frozenset({"literal_error", "union_tag_invalid"})
_HOOK_BODY_BYTES = 65_536  # a 5xx body is read for the check only when it declares this or less


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text` with each run of whitespace one space, cut to `limit` characters (an ellipsis)."""
    flat = " ".join(text[: limit * 4].split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def invalid_request(status: int, message: str) -> ModelError | None:
    """The error a 5xx means when its message is a validation error of our request, else None.

    Args:
        status: The HTTP status (only 5xx are read: a 4xx is mapped as a 400 already).
        message: The provider's message (FastAPI's dump, for llama-cpp-python).
    """
    if status < 500:
        return None
    text = message[:_MESSAGE_SCAN_CHARS]
    found = _request_validation(text)
    if found is None:
        return None
    where, what = _first_error(text[found.end() :])
    count = int(found.group(1))
    more = f" (and {count - 1} more)" if count > 1 else ""
    said = one_line(
        f"the model provider could not read the request (HTTP {status}): "
        f"{where + ': ' if where else ''}{what}{more}"
    )
    about_history = "messages" in where or (not where and "messages" in text)
    return (HistoryRejected if about_history else ModelRejected)(said, status=status)


def _request_validation(text: str) -> re.Match[str] | None:
    """The count of a validation dump about our request's body in `text`, else None."""
    found = _VALIDATION.search(text)
    if found is None or _REQUEST_LOC.search(text, found.end()) is None:
        return None
    return found


def _first_error(dump: str) -> tuple[str, str]:
    """Where and what of the dump's first error that is not a union branch's mismatch.

    FastAPI writes one error dict a line; each line is matched on its own, so the location
    and the message named are the same error's.
    """
    first: tuple[str, str] | None = None
    for line in dump.splitlines():
        loc, msg, kind = _LOC.search(line), _MSG.search(line), _TYPE.search(line)
        if msg is None:
            continue
        parts = loc.group(1).split(",") if loc else []
        where = ".".join(p.strip(" '\"") for p in parts if p.strip())
        if kind is None or kind.group(1) not in _BRANCH_MISMATCH:
            return where, msg.group(2)
        first = first or (where, msg.group(2))
    return first or ("", "validation error")


@contextmanager
def map_openai_errors() -> Iterator[None]:
    """Translate openai SDK exceptions into the runtime's `ModelError` tree (module docstring)."""
    import openai  # here, not at the top: the SDK costs a second of CPU to import

    try:
        yield
    except openai.BadRequestError as exc:
        text = str(exc.message)
        body = exc.body if isinstance(exc.body, Mapping) else {}
        said = body.get("message")
        too_long = context_too_long(
            said if isinstance(said, str) else text, code=exc.code, type_=exc.type, body=body
        )
        if too_long is not None:
            raise too_long from exc
        kind = HistoryRejected if any(m in text for m in _HISTORY_MARKERS) else ModelRejected
        raise kind(one_line(text), status=exc.status_code) from exc
    except openai.APIStatusError as exc:
        raise _status_error(exc) from exc
    except openai.APIError as exc:  # connection errors, timeouts, malformed responses
        raise ModelUnavailable(one_line(f"{type(exc).__name__}: {exc}")) from exc
    except ValueError as exc:  # a stream chunk that is not valid JSON
        raise ModelUnavailable(one_line(f"malformed response stream: {exc}")) from exc


def _status_error(exc: openai.APIStatusError) -> ModelError:
    body = exc.body if isinstance(exc.body, Mapping) else {}
    said = body.get("message")
    message = said if isinstance(said, str) else str(exc.message)
    if (invalid := invalid_request(exc.status_code, message)) is not None:
        return invalid
    transient = exc.status_code in _TRANSIENT or exc.status_code >= 500
    kind: type[ModelError] = ModelUnavailable if transient else ModelRejected
    return kind(one_line(str(exc.message)), status=exc.status_code)


def context_too_long(
    message: str, *, code: str | None, type_: str | None, body: Mapping[str, Any]
) -> ContextTooLong | None:
    """The `ContextTooLong` a provider's 400 means, or None when it is about something else.

    Args:
        message: The error's message.
        code: Its `error.code` (OpenAI: `context_length_exceeded`; vLLM: `400`).
        type_: Its `error.type` (llama.cpp: `exceed_context_size_error`).
        body: Its `error` object (llama.cpp adds `n_ctx` and `n_prompt_tokens`).
    """
    text = message[:_MESSAGE_SCAN_CHARS]
    lowered = text.lower()
    if code not in _CONTEXT_CODES and type_ not in _CONTEXT_CODES:
        if not any(marker in lowered for marker in _CONTEXT_MARKERS):
            return None
    window = _first_number(_WINDOW, text, body.get("n_ctx"))
    requested = _first_number(_REQUESTED, text, body.get("n_prompt_tokens"))
    return ContextTooLong(text, status=400, window=window, requested=requested)


def _first_number(patterns: Sequence[re.Pattern[str]], text: str, given: object) -> int | None:
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return given
    for pattern in patterns:
        if (found := pattern.search(text)) is not None:
            return int(found.group(1))
    return None


async def _refuse_retry_of_invalid_request(response: Any) -> None:
    """Response hook: a 5xx that is a validation error of our request says `x-should-retry: false`.

    Only an uncompressed body that declares its length, at most 64 KiB, is read (FastAPI's
    `JSONResponse` does); any other 5xx is left to the SDK's retries unread. A compressed one is
    not: the declared length is the compressed size, `aread` returns the decompressed body, and
    64 KiB of gzip or brotli can expand a thousandfold.
    """
    if response.status_code < 500 or "x-should-retry" in response.headers:
        return
    if response.headers.get("content-encoding", "identity").strip().lower() != "identity":
        return
    declared = response.headers.get("content-length", "")
    if not declared.isdigit() or int(declared) > _HOOK_BODY_BYTES:
        return
    await response.aread()
    if _request_validation(response.text[:_MESSAGE_SCAN_CHARS]):
        response.headers["x-should-retry"] = "false"


def openai_http_client() -> Any:
    """The HTTP client to give `openai.AsyncOpenAI(http_client=...)`.

    The SDK's default client (its timeout, connection limits, redirects) with a response hook
    that stops the SDK retrying a 5xx that is a validation error of our request (module
    docstring).
    """
    import openai

    return openai.DefaultAsyncHttpxClient(
        event_hooks={"response": [_refuse_retry_of_invalid_request]}
    )
