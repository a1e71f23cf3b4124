"""The context window's compaction, on built histories, and the 400 it maps.

Why this way: compaction is arithmetic over a history plus one async step (the summary), so it
is tested directly on `ContextWindow.prepare` with a summarizer that records what it was asked,
and every result is run through the strict validator (`validate_history`), the rule a provider
applies. Its cost promise (a request costs what its new messages cost) is checked by counting
the per-message estimates made, never by timing. The runtime's use of it, over HTTP against a
provider enforcing a window, is in `test_context_window_runtime.py`.
"""

from __future__ import annotations

import itertools

import pytest

import agent_core._context_window as cw
from agent_core import (
    AssistantMessage,
    ContextTooLong,
    SystemMessage,
    ToolCall,
    ToolMessage,
    Toolset,
    UserKind,
    UserMessage,
    validate_history,
)
from agent_core._context_window import ContextWindow, stub_text
from agent_core._llm.client import context_too_long
from agent_core._messages import Message
from agent_core._tokens import Calibration, message_tokens

SYSTEM = SystemMessage(content="You are an SRE assistant.")
_IDS = itertools.count(1)


def exchange(results: int = 2, chars: int = 4_000, text: str = "") -> list[Message]:
    """One assistant message with `results` calls and their results of `chars` characters."""
    calls = tuple(
        ToolCall(id=f"c{next(_IDS)}", name="prometheus_query", arguments=f'{{"query": "q{n}"}}')
        for n in range(results)
    )
    answers = [
        ToolMessage(call_id=c.id, name=c.name, content=f"{c.id} " + "r" * chars) for c in calls
    ]
    return [AssistantMessage(content=text, tool_calls=calls), *answers]


def analysis(task: str, exchanges: int, answer_chars: int = 200) -> list[Message]:
    out: list[Message] = [UserMessage(content=task, author="alice")]
    for _ in range(exchanges):
        out += exchange()
    out.append(AssistantMessage(content="a" * answer_chars))
    return out


class Summarizer:
    def __init__(self, text: str = "checked q0 and q1: both normal") -> None:
        self.requests: list[list[Message]] = []
        self.text = text

    async def __call__(self, messages: list[Message]) -> str:
        self.requests.append(messages)
        return self.text


async def prepare(window: ContextWindow, history: list[Message], summarize: Summarizer):
    return await window.prepare("s", SYSTEM, history, Toolset(), summarize)


def results(messages: list[Message]) -> list[ToolMessage]:
    return [m for m in messages if isinstance(m, ToolMessage)]


async def test_a_history_that_fits_is_sent_verbatim() -> None:
    history = analysis("Why is checkout slow?", exchanges=2)
    summarize = Summarizer()
    prepared = await prepare(
        ContextWindow(window_tokens=128_000, reserve_tokens=4_096), history, summarize
    )
    assert prepared.messages == [SYSTEM, *history]
    assert prepared.compacted == ""
    assert summarize.requests == []


async def test_older_results_become_stubs_before_any_summary() -> None:
    history = [*analysis("Why is checkout slow?", exchanges=0), UserMessage(content="And now?")]
    history += [m for _ in range(6) for m in exchange()]
    summarize = Summarizer()
    window = ContextWindow(window_tokens=12_000, reserve_tokens=1_000)
    prepared = await prepare(window, history, summarize)

    sent = prepared.messages
    validate_history(sent[1:])
    assert summarize.requests == []
    assert sent[0] == SYSTEM
    assert len(sent) == len(history) + 1  # nothing left out, results replaced
    stubs = [m for m in results(sent) if m.content.startswith("[result of")]
    assert stubs, "older results should be stubbed"
    first = results(history)[0]
    assert results(sent)[0].content == stub_text("prometheus_query", '{"query": "q0"}')
    assert results(sent)[0].content == (
        '[result of prometheus_query({"query": "q0"}) left out to fit the context window: '
        "call it again if you need it]"
    )
    assert results(sent)[0].call_id == first.call_id
    assert sent[-3:] == history[-3:]  # the latest exchange verbatim
    assert prepared.compacted.endswith("results stubbed")
    assert prepared.estimate <= window.calibration.estimate(11_000)


async def test_past_the_stubs_older_turns_become_a_summary_kept_for_later_requests() -> None:
    history: list[Message] = []
    for n in range(5):  # five earlier analyses whose long answers no stub can shrink
        history += analysis(f"incident {n}", exchanges=1, answer_chars=9_000)
    task = UserMessage(content="Why is checkout returning 503?", author="bob")
    context = UserMessage(content="alertmanager: CheckoutErrors firing", kind=UserKind.CONTEXT)
    history += [context, task, *exchange(), *exchange()]
    summarize = Summarizer()
    window = ContextWindow(window_tokens=12_000, reserve_tokens=1_000)

    prepared = await prepare(window, history, summarize)
    sent = prepared.messages
    validate_history(sent[1:])
    assert len(summarize.requests) == 1
    request = summarize.requests[0]
    assert isinstance(request[0], SystemMessage) and len(request) == 2  # tool-less, one transcript
    assert "incident 0" in request[1].content
    summary = [m for m in sent if isinstance(m, UserMessage) and "checked q0" in m.content]
    assert len(summary) == 1 and summary[0].content.startswith("[Summary of")
    assert context in sent and task in sent  # the latest analysis's inputs verbatim
    assert sent.index(context) + 1 == sent.index(task)
    assert sent[-3:] == history[-3:]
    assert prepared.estimate <= window.calibration.estimate(11_000)

    # The next request, one exchange later, reuses the summary: it is not written again.
    history += exchange()
    again = await prepare(window, history, summarize)
    validate_history(again.messages[1:])
    assert len(summarize.requests) == 1
    assert summary[0] in again.messages
    assert again.messages[-3:] == history[-3:]


async def test_a_correction_stays_verbatim_and_a_new_task_replaces_the_old_pins() -> None:
    history = analysis("incident 0", exchanges=0, answer_chars=40_000)
    steer = UserMessage(content="leave the database alone", author="carol", kind=UserKind.STEER)
    history += [UserMessage(content="incident 1", author="bob"), *exchange(), steer]
    history += [m for _ in range(8) for m in exchange()]
    window = ContextWindow(window_tokens=12_000, reserve_tokens=1_000)
    sent = (await prepare(window, history, Summarizer())).messages
    validate_history(sent[1:])
    assert steer in sent and history[-28] not in sent
    assert UserMessage(content="incident 1", author="bob") in sent
    assert history[0] not in sent  # the earlier analysis's task is summarised, not pinned


async def test_a_latest_exchange_too_big_for_the_window_is_cut_in_its_middle() -> None:
    history = [UserMessage(content="Why?"), *exchange(results=3, chars=40_000)]
    window = ContextWindow(window_tokens=8_000, reserve_tokens=1_000)
    prepared = await prepare(window, history, Summarizer())
    validate_history(prepared.messages[1:])
    cut = results(prepared.messages)
    assert [m.call_id for m in cut] == [m.call_id for m in results(history)]
    for original, kept in zip(results(history), cut, strict=True):
        assert "characters cut here to fit the context window" in kept.content
        assert kept.content.endswith(original.content[-200:])
        assert kept.content.startswith(original.content[:100])
    assert prepared.estimate <= window.calibration.estimate(7_000)


async def test_a_failed_summary_request_leaves_a_note_and_never_fails_the_request() -> None:
    from agent_core import ModelUnavailable

    async def failing(messages: list[Message]) -> str:
        raise ModelUnavailable("provider down")

    history: list[Message] = []
    for n in range(5):
        history += analysis(f"incident {n}", exchanges=1, answer_chars=9_000)
    history += [UserMessage(content="now"), *exchange()]
    window = ContextWindow(window_tokens=12_000, reserve_tokens=1_000)
    sent = (await window.prepare("s", SYSTEM, history, Toolset(), failing)).messages
    validate_history(sent[1:])
    assert any("no summary could be written: provider down" in m.content for m in sent)


async def test_each_request_estimates_only_the_messages_appended_since_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counted = 0
    real = message_tokens

    def counting(message: Message) -> int:
        nonlocal counted
        counted += 1
        return real(message)

    monkeypatch.setattr(cw, "message_tokens", counting)
    history: list[Message] = [UserMessage(content="Why?")]
    while len(history) < 2_000:
        history += exchange(results=3, chars=400)
    window = ContextWindow(window_tokens=16_000, reserve_tokens=1_000)
    summarize = Summarizer()
    await prepare(window, history, summarize)
    counts = []
    for _ in range(5):
        history += exchange(results=3, chars=400)
        counted = 0
        prepared = await prepare(window, history, summarize)
        counts.append(counted)
        validate_history(prepared.messages[1:])
    # Each of the four new messages estimated (a result with its stub), plus the system
    # prompt and the summary when it is rewritten: never the 2,000 before.
    assert max(counts) < 40, counts
    assert len(summarize.requests) <= 2


async def test_a_history_read_anew_keeps_its_summary() -> None:
    history: list[Message] = []
    for n in range(5):
        history += analysis(f"incident {n}", exchanges=1, answer_chars=9_000)
    history += [UserMessage(content="now"), *exchange()]
    window = ContextWindow(window_tokens=12_000, reserve_tokens=1_000)
    summarize = Summarizer()
    await prepare(window, history, summarize)
    reread = [m.model_copy() for m in history]  # equal messages, new objects (a new turn)
    sent = (await prepare(window, reread, summarize)).messages
    validate_history(sent[1:])
    assert len(summarize.requests) == 1


def test_calibration_rises_at_once_falls_slowly_and_stays_bounded() -> None:
    calibration = Calibration()
    calibration.observe(1_000, 1_300)
    assert calibration.ratio == pytest.approx(1.3 * 1.02)
    before = calibration.ratio
    calibration.observe(1_000, 1_000)
    assert 1.0 < calibration.ratio < before
    assert calibration.ratio == pytest.approx(before - (before - 1.0) * 0.1)
    calibration.observe(1_000, 100_000)
    assert calibration.ratio == 4.0
    for _ in range(500):
        calibration.observe(1_000, 1)
    assert calibration.ratio == 0.75
    calibration.observe(10, 10_000)  # too small to say anything
    calibration.observe(1_000, 0)  # the provider did not say
    assert calibration.ratio == 0.75


def test_a_context_length_exceeded_narrows_the_window_and_calibrates() -> None:
    window = ContextWindow(window_tokens=128_000, reserve_tokens=4_096)
    exc = ContextTooLong("too long", window=16_000, requested=17_210)
    assert window.learn(exc, 10_000) == 0.75
    assert window.window_tokens == 16_000
    assert window.calibration.ratio == pytest.approx(1.721 * 1.02)
    assert window.learn(ContextTooLong("too long"), 10_000) == 0.5


OPENAI = (
    "This model's maximum context length is 16000 tokens. However, your messages resulted in "
    "17210 tokens. Please reduce the length of the messages."
)
VLLM = (
    "This model's maximum context length is 16384 tokens. However, you requested 122946 tokens "
    "(112946 in the messages, 10000 in the completion). Please reduce the length of the "
    "messages or completion."
)


@pytest.mark.parametrize(
    ("message", "code", "type_", "body", "window", "requested"),
    [
        pytest.param(
            OPENAI,
            "context_length_exceeded",
            "invalid_request_error",
            {},
            16_000,
            17_210,
            id="openai",
        ),
        pytest.param(VLLM, "400", "BadRequestError", {}, 16_384, 112_946, id="vllm"),
        pytest.param(
            "request (4476 tokens) exceeds the available context size (4096 tokens)",
            "400",
            "exceed_context_size_error",
            {"n_ctx": 4096, "n_prompt_tokens": 4476},
            4096,
            4476,
            id="llama.cpp",
        ),
        pytest.param(
            "the request exceeds the available context size, try increasing it",
            "400",
            "invalid_request_error",
            {},
            None,
            None,
            id="llama.cpp-older",
        ),
    ],
)
def test_providers_context_errors_map_to_context_too_long(
    message: str,
    code: str,
    type_: str,
    body: dict[str, int],
    window: int | None,
    requested: int | None,
) -> None:
    error = context_too_long(message, code=code, type_=type_, body=body)
    assert isinstance(error, ContextTooLong)
    assert (error.window, error.requested, error.status) == (window, requested, 400)


def test_other_400s_are_not_about_the_window() -> None:
    message = (
        "Invalid parameter: messages with role 'tool' must be a response to a preceeding message"
    )
    assert context_too_long(message, code=None, type_="invalid_request_error", body={}) is None
