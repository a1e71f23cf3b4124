"""The model client reads the stream's events itself: every SSE shape a server may write, and junk.

Why this way: the client parses the body as plain JSON instead of through the SDK's pydantic
chunks (`agent_core._llm.sse`), so what the SDK's decoder used to absorb is checked here through
the public `OpenAIChatModel.respond`, the SDK still sending the request: bodies are answered by
an httpx2 `MockTransport` (the SDK's HTTP library), byte for byte as written below. A provider's
stream is text from outside: a chunk of the wrong shape is passed over, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import openai
import pytest

from agent_core import ModelUnavailable, OpenAIChatModel, Toolset, UserMessage


def chunk(delta: Any = None, *, finish: str | None = None, **extra: Any) -> str:
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", **extra}
    if "choices" not in extra:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    return json.dumps(body)


async def respond(body: str | Any) -> Any:
    """The response to one request answered with `body` (text, or an async byte iterator)."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        content = body.encode() if isinstance(body, str) else body
        return httpx2.Response(200, headers=headers, content=content)

    http = httpx2.AsyncClient(transport=httpx2.MockTransport(answer))
    client = openai.AsyncOpenAI(base_url="http://m/v1", api_key="k", http_client=http)
    deltas: list[str] = []

    async def sink(text: str) -> None:
        deltas.append(text)

    try:
        response = await OpenAIChatModel(client, "m").respond(
            [UserMessage(content="hi")], Toolset.of([]), sink
        )
    finally:
        await client.close()
    assert "".join(deltas) == response.message.content
    return response


async def test_comments_event_names_crlf_and_multiline_data_are_read_as_the_standard_says() -> None:
    first = json.loads(chunk({"content": "disk "}))
    split = json.dumps(first, indent=1).split("\n")  # one event over several data lines
    body = (
        ": keep-alive\r\n\r\n"
        + "".join(f"data:{line}\r\n" for line in split)
        + "\r\n"
        + "event: message\nid: 7\nretry: 1000\n"
        + f"data: {chunk({'content': 'full'}, finish='stop')}\n\n"
        + f"data: {chunk(choices=[], usage={'prompt_tokens': 3, 'completion_tokens': 2})}\n\n"
        + "data: [DONE]\n\n"
        + "data: this is never read\n\n"
    )
    response = await respond(body)
    assert response.message.content == "disk full"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (3, 2)
    assert response.response_id == "chatcmpl-1"


async def test_a_body_that_ends_without_a_blank_line_still_yields_its_last_event() -> None:
    response = await respond(f"data: {chunk({'content': 'ok'}, finish='stop')}")
    assert response.message.content == "ok"


async def test_an_error_event_mid_stream_is_the_providers_error() -> None:
    body = (
        f"data: {chunk({'content': 'partial'})}\n\n"
        'data: {"error": {"message": "The server is overloaded", "type": "server_error"}}\n\n'
    )
    with pytest.raises(ModelUnavailable, match="The server is overloaded"):
        await respond(body)


async def test_data_that_is_not_json_is_a_malformed_stream() -> None:
    with pytest.raises(ModelUnavailable, match="malformed response stream"):
        await respond("data: {not json\n\n")


async def test_chunks_of_the_wrong_shape_are_passed_over() -> None:
    junk = [
        "[1, 2]",
        '"text"',
        chunk(choices="nope"),
        chunk(choices=[7, None]),
        chunk(5),
        chunk({"content": 7, "tool_calls": "x"}),
        chunk({"tool_calls": [3, {"index": "a", "function": "f"}]}),
        chunk(usage="lots", id=9),
    ]
    body = "".join(f"data: {line}\n\n" for line in junk)
    body += f"data: {chunk({'content': 'fine'}, finish='stop')}\n\n"
    response = await respond(body)
    assert response.message.content == "fine"
    assert response.message.tool_calls == ()  # nothing of a call was in the junk
    assert response.response_id == "chatcmpl-1"


async def test_line_separators_inside_json_strings_are_text_not_line_breaks() -> None:
    said = "quoted:\u2028next\u2029para\x85nel\x0bvt\x1cfs"
    raw = json.dumps(json.loads(chunk({"content": said}, finish="stop")), ensure_ascii=False)
    assert "\u2028" in raw and "\x85" in raw  # written unescaped, as JSON allows
    response = await respond(f"data: {raw}\n\n")
    assert response.message.content == said


async def test_crlf_split_across_reads_is_one_line_break() -> None:
    event = f"data: {chunk({'content': 'split'}, finish='stop')}".encode()

    async def reads() -> AsyncIterator[bytes]:
        yield event[:10]
        yield event[10:] + b"\r"  # the CR of a CRLF ends this read, its LF starts the next
        yield b"\n\r"
        yield b"\ndata: [DONE]\r\n\r\n"

    assert (await respond(reads())).message.content == "split"


async def test_what_follows_done_is_read_to_the_end_of_the_body() -> None:
    """An HTTP/1.1 connection goes back to the pool only once its body was read to the end."""
    finished = False

    async def reads() -> AsyncIterator[bytes]:
        nonlocal finished
        yield f"data: {chunk({'content': 'done'}, finish='stop')}\n\ndata: [DONE]\n\n".encode()
        yield b": trailing bytes a proxy added\n\n"
        finished = True

    assert (await respond(reads())).message.content == "done"
    assert finished


async def test_a_line_without_end_is_a_malformed_stream_at_a_bound() -> None:
    """Five MiB with no line break: refused at the bound, not held whole in memory."""
    sent = 0

    async def reads() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b"data: "
        for _ in range(80):
            sent += 65_536
            yield b"x" * 65_536

    with pytest.raises(ModelUnavailable, match="malformed response stream: a line of more than"):
        await respond(reads())
    assert sent < 80 * 65_536  # the rest of the body was never read


async def test_an_event_of_many_data_lines_is_a_malformed_stream_at_a_bound() -> None:
    body = "data: x\n" * 600_000  # 1.2 M characters of data and never a blank line
    with pytest.raises(ModelUnavailable, match="malformed response stream: an event of more"):
        await respond(body)


async def test_json_nested_past_the_decoder_is_a_malformed_stream() -> None:
    with pytest.raises(ModelUnavailable, match="malformed response stream: JSON nested too"):
        await respond("data: " + "[" * 200_000 + "\n\n")
