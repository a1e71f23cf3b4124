"""Benchmark of the model client's CPU: per streamed chunk, and per request as the history grows.

Run it with `.venv/bin/python bench/model_client.py` (`--help` for the options). No server runs:
the same SSE bytes (a chat-completions stream of `--chunks` one-word content deltas, with usage
and `[DONE]`, as OpenAI writes them) are answered by an in-process `MockTransport` of httpx2
(the openai SDK's HTTP library), so only client-side CPU is measured (`time.process_time`).

Printed: CPU per streamed chunk through `OpenAIChatModel.respond` (the worker's client, the
openai SDK under it), next to a bare `aiter_lines` + `json.loads` loop over the same bytes
through the same transport (the parsing floor); the goal is 10 µs a chunk. Then the CPU of one
request (a one-chunk answer) with a history of `--history` messages, as a ratio to the same
request with a tenth of that history: a client whose request building is proportional to the
new messages would stay near 1x between requests of one turn.

`--smoke` streams 200 chunks and builds requests of 50 and 5 messages, once each, in under a
second, to check that every figure can still be produced (`make test` runs it). The figures end
the output as `ratio <name> = <number>` lines (`bench/_figures.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import httpx2 as httpx  # noqa: E402  (the openai SDK's HTTP library)
import openai  # noqa: E402
from _figures import SMOKE_HELP, print_ratios, ratio, run  # noqa: E402

from agent_core import (  # noqa: E402
    AssistantMessage,
    Message,
    OpenAIChatModel,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Toolset,
    UserMessage,
)

GOAL_US = 10.0
BASE_URL = "http://model.bench/v1"


def sse_body(chunks: int) -> bytes:
    """A chat-completions stream of `chunks` content deltas, a finish, usage and `[DONE]`."""
    head = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    lines = []
    for n in range(chunks):
        delta = {"content": f" w{n}"} if n else {"role": "assistant", "content": "w0"}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        lines.append({**head, "choices": [choice]})
    finish = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    lines.append({**head, "choices": [finish]})
    usage = {"prompt_tokens": 10, "completion_tokens": chunks, "total_tokens": 10 + chunks}
    lines.append({**head, "choices": [], "usage": usage})
    events = [f"data: {json.dumps(line, separators=(',', ':'))}\n\n" for line in lines]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def transport(body: bytes) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx.MockTransport(answer)


def history(size: int) -> list[Message]:
    """A turn's history of `size` messages: calls, results and redirects, as a long turn has."""
    messages: list[Message] = [SystemMessage(content="You are an SRE assistant. " * 40)]
    messages.append(UserMessage(content="why is checkout returning 500s?"))
    n = 0
    while len(messages) < size:
        call = ToolCall(
            id=f"call_{n}", name="http_get", arguments=json.dumps({"url": f"http://s/{n}"})
        )
        messages.append(AssistantMessage(content=f"Checking {n}.", tool_calls=(call,)))
        messages.append(
            ToolMessage(call_id=call.id, name="http_get", content="HTTP 200 OK\n" + "x" * 400)
        )
        n += 1
    return messages[:size]


def cpu_of(work: Callable[[], Awaitable[object]], rounds: int) -> float:
    """CPU seconds of `rounds` runs of `work` on one event loop."""

    async def all_rounds() -> float:
        await work()  # warm: imports, first-call caches
        started = time.process_time()
        for _ in range(rounds):
            await work()
        return time.process_time() - started

    return asyncio.run(all_rounds())


def model_over(body: bytes) -> tuple[OpenAIChatModel, openai.AsyncOpenAI]:
    http = httpx.AsyncClient(transport=transport(body))
    client = openai.AsyncOpenAI(base_url=BASE_URL, api_key="bench", http_client=http, max_retries=0)
    return OpenAIChatModel(client, "m"), client


def client_cpu_per_chunk(chunks: int, rounds: int) -> float:
    model, _ = model_over(sse_body(chunks))
    messages = history(2)

    async def once() -> None:
        response = await model.respond(messages, Toolset.of([]))
        assert response.usage.completion_tokens == chunks

    return cpu_of(once, rounds) / (rounds * chunks)


def floor_cpu_per_chunk(chunks: int, rounds: int) -> float:
    http = httpx.AsyncClient(transport=transport(sse_body(chunks)))

    async def once() -> None:
        seen = 0
        async with http.stream("POST", f"{BASE_URL}/chat/completions", json={}) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    json.loads(line[6:])
                    seen += 1
        assert seen == chunks + 2

    return cpu_of(once, rounds) / (rounds * chunks)


def request_cpu(size: int, rounds: int) -> float:
    model, _ = model_over(sse_body(1))
    messages = history(size)

    async def once() -> None:
        await model.respond(messages, Toolset.of([]))

    return cpu_of(once, rounds) / rounds


_MODES = """\
modes:
  (default)  2,000-chunk streams, 20 rounds; requests of 500 and 50 messages, 50 rounds each
  --smoke    200-chunk streams and requests of 50 and 5 messages, 2 rounds each (under a second)

Figures: the client's CPU per chunk ÷ the bare aiter_lines + json.loads loop over the same
bytes, and ÷ the 10 µs goal; a request's CPU with the full history ÷ with a tenth of it."""


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the bench; return the exit status."""
    parser = argparse.ArgumentParser(
        description="The model client's CPU per streamed chunk and per request, against the "
        "parsing floor measured in the same run.",
        epilog=_MODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--chunks", type=int, default=2000, help="content deltas per stream")
    parser.add_argument("--rounds", type=int, default=20, help="streams measured")
    parser.add_argument("--history", type=int, default=500, help="messages of the long request")
    parser.add_argument("--smoke", "--quick", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args(argv)
    if args.smoke:
        args.chunks, args.rounds, args.history = 200, 2, 50
    return run(lambda: _bench(max(1, args.chunks), max(1, args.rounds), max(10, args.history)))


def _bench(chunks: int, rounds: int, size: int) -> int:
    ours = client_cpu_per_chunk(chunks, rounds) * 1e6
    floor = floor_cpu_per_chunk(chunks, rounds) * 1e6
    long = request_cpu(size, rounds * 2) * 1e3
    short = request_cpu(size // 10, rounds * 2) * 1e3
    print(
        f"streamed chunk: {ours:.1f} µs of CPU through OpenAIChatModel, {floor:.1f} µs for "
        f"aiter_lines + json.loads over the same bytes; goal {GOAL_US:g} µs"
    )
    print(f"request with {size} messages: {long:.2f} ms of CPU; with {size // 10}: {short:.2f} ms")
    print_ratios(
        {
            "chunk_vs_parsing_floor": ratio(ours, floor, name="chunk ÷ floor"),
            "chunk_vs_goal": ratio(ours, GOAL_US, name="chunk ÷ goal"),
            "request_full_vs_tenth_history": ratio(long, short, name="request ÷ request"),
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
