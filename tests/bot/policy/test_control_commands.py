"""Control-command parsing (docs/design.md): the reply "stop" stops; ambiguity is content.

Why this way: a command is routed to the control plane and cannot be taken back, so the tests
aim at misfires more than at recognition. The phrase tables users learn from
`docs/control-commands.md` are read from that page and checked row by row, so the page and the
parser cannot drift. The misfire classes the issue names — a control word followed by an object,
a negation — are Hypothesis properties over generated sentences, as is robustness to the noise
people type around a command (case, full-width characters, punctuation, emoji). The brief's own
examples are spelled out as table-driven spot checks.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.policy.control_phrases import (
    KILL_SWITCH_INTENTS,
    MAX_COMMAND_CHARS,
    PHRASES,
    ControlCommand,
    ControlIntent,
    normalize,
    parse_control,
)
from tests.paths import ROOT

DOC = ROOT / "docs" / "control-commands.md"
STOP, PAUSE, RESUME = ControlIntent.STOP, ControlIntent.PAUSE, ControlIntent.RESUME
COMMANDS = sorted(phrase for phrase, intent in PHRASES.items() if intent is not None)
SWITCH = sorted(phrase for phrase, intent in PHRASES.items() if intent in KILL_SWITCH_INTENTS)
FILLERS = sorted(phrase for phrase, intent in PHRASES.items() if intent is None)


def doc_table(name: str) -> list[list[str]]:
    """The body rows of the table after `<!-- table: name -->` in the doc, as cells."""
    table = DOC.read_text(encoding="utf-8").split(f"<!-- table: {name} -->\n", 1)[1]
    rows = table.split("\n\n", 1)[0].splitlines()[2:]  # after the header and the |---| line
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


@pytest.mark.parametrize(
    ("phrase", "intent"),
    [(phrase, cells[1]) for cells in doc_table("phrases") for phrase in ticked(cells[0])],
)
def test_documented_commands_parse_as_documented(phrase: str, intent: str) -> None:
    command = parse_control(phrase)
    assert command is not None and command.intent == ControlIntent(intent)


@pytest.mark.parametrize(
    ("phrase", "state"),
    [(phrase, cells[1]) for cells in doc_table("admin") for phrase in ticked(cells[0])],
)
def test_documented_kill_switch_commands_parse_as_documented(phrase: str, state: str) -> None:
    command = parse_control(phrase)
    assert command is not None and command.intent == ControlIntent(f"killswitch_{state}")


@pytest.mark.parametrize(
    "phrase", [phrase for cells in doc_table("conversation") for phrase in ticked(cells[0])]
)
def test_documented_conversation_is_content(phrase: str) -> None:
    assert parse_control(phrase) is None


def test_the_doc_lists_every_phrase_the_parser_knows() -> None:
    documented = set(ticked(DOC.read_text(encoding="utf-8")))
    assert set(PHRASES) <= documented


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        *[(t, STOP) for t in ["stop!", "Stop.", "STOP", " stop ", "please stop", "stop please"]],
        *[(t, STOP) for t in ["stop it", "stop now", "cancel", "停止", "停下", "别跑了"]],
        *[
            (t, STOP)
            for t in ["不要再跑了", "取消", "停止！", "ＳＴＯＰ", "🛑 stop", "stop :pray:"]
        ],
        *[(t, PAUSE) for t in ["pause", "暂停", "先停一下", "Pause…"]],
        *[(t, RESUME) for t in ["resume", "继续", "continue", "Continue!"]],
    ],
)
def test_the_briefs_commands(text: str, intent: ControlIntent) -> None:
    # " stop " is how "@chatops stop" arrives: the adapter strips the bot's mention.
    assert parse_control(text) == ControlCommand(intent=intent, text=normalize(text))


@pytest.mark.parametrize(
    "text",
    [
        "stop the nginx pod",
        "why did the job stop?",
        "don't stop investigating",
        "can you check why it stopped",
        "停止服务的原因是什么",
        "暂停是什么意思",
        "<@U0ALICE> stop",  # a mention the adapter left in is someone else's
        "stop and resume",  # contradictory
        "please",
        "",
        "  \n ",
        "🛑",
        "stop " * (MAX_COMMAND_CHARS // 4),  # longer than any command
    ],
)
def test_the_briefs_conversation(text: str) -> None:
    assert parse_control(text) is None


@pytest.mark.parametrize(
    ("text", "intent"),
    [
        ("killswitch on", ControlIntent.KILL_SWITCH_ON),
        (" Killswitch ON! ", ControlIntent.KILL_SWITCH_ON),  # how "@chatops Killswitch ON!" arrives
        ("please killswitch on now", ControlIntent.KILL_SWITCH_ON),
        ("ＫＩＬＬＳＷＩＴＣＨ ＯＦＦ", ControlIntent.KILL_SWITCH_OFF),
        ("kill-switch off", ControlIntent.KILL_SWITCH_OFF),
        ("killswitch status?", ControlIntent.KILL_SWITCH_STATUS),
        ("请开启急停", ControlIntent.KILL_SWITCH_ON),
        ("马上关闭急停！", ControlIntent.KILL_SWITCH_OFF),
        ("急停状态", ControlIntent.KILL_SWITCH_STATUS),
    ],
)
def test_kill_switch_commands(text: str, intent: ControlIntent) -> None:
    assert parse_control(text) == ControlCommand(intent=intent, text=normalize(text))


@pytest.mark.parametrize(
    "text",
    [
        "is the killswitch on?",
        "is the kill switch on",
        "killswitch",
        "kill switch",
        "on",
        "status",
        "turn the killswitch on for payments",
        "killswitch on the payments service",
        "the killswitch is off",
        "who turned the killswitch on",
        "don't killswitch on",
        "killswitch on and stop",
        "<@U0ALICE> killswitch on",
        "急停",
        "熔断",
        "触发熔断",
        "不要开启急停",
        "开启急停了吗",
        "急停状态怎么样",
    ],
)
def test_kill_switch_near_misses_are_conversation(text: str) -> None:
    assert parse_control(text) is None


def test_stop_everything_stays_this_threads_stop() -> None:
    for text in ["stop everything", "全部停止", "所有都停止", "stop all"]:
        command = parse_control(text)
        assert command is not None and command.intent is STOP, text


@settings(max_examples=300)
@given(switch=st.sampled_from(SWITCH), other=st.sampled_from(COMMANDS), swap=st.booleans())
def test_a_kill_switch_command_never_mixes_with_another(
    switch: str, other: str, swap: bool
) -> None:
    text = f"{other}, {switch}" if swap else f"{switch}, {other}"
    command = parse_control(text)
    if PHRASES[other] is PHRASES[switch]:  # the same command twice is still that command
        assert command is not None and command.intent is PHRASES[switch]
    else:
        assert command is None, text


def test_pause_and_stop_together_stop() -> None:
    assert parse_control("pause, no, stop!") is None  # "no" is not a filler
    command = parse_control("pause, stop!")
    assert command is not None and command.intent is STOP


# Objects: systems people talk about in incident threads, and random words outside the table.
NOUNS = ["pod", "nginx", "job", "deployment", "service", "cluster", "database", "task", "run"]
CJK_NOUNS = ["服务", "数据库", "集群", "任务", "部署", "进程", "告警", "容器"]
words = st.one_of(
    st.sampled_from(NOUNS),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=10).filter(
        lambda word: word not in PHRASES
    ),
)


@settings(max_examples=500)
@given(
    before=st.sampled_from(["", *FILLERS]),
    command=st.sampled_from(COMMANDS),
    article=st.sampled_from(["", "the ", "this ", "that "]),
    nouns=st.lists(words, min_size=1, max_size=3),
)
def test_a_command_word_with_an_object_is_content(
    before: str, command: str, article: str, nouns: list[str]
) -> None:
    text = f"{before} {command} {article}{' '.join(nouns)}"
    assert parse_control(text) is None, text


@settings(max_examples=300)
@given(command=st.sampled_from(COMMANDS), noun=st.sampled_from(CJK_NOUNS))
def test_a_chinese_command_with_an_object_is_content(command: str, noun: str) -> None:
    assert parse_control(command + noun) is None
    assert parse_control(noun + command) is None  # "服务停止": a report about a system


@settings(max_examples=300)
@given(
    negation=st.sampled_from(["don't ", "do not ", "never ", "不要", "别", "不"]),
    command=st.sampled_from(COMMANDS),
)
def test_a_negated_command_is_content(negation: str, command: str) -> None:
    assert parse_control(negation + command) is None


# Noise around a message: whitespace, ASCII and CJK punctuation, emoji. Not ":" (it would make
# ":stop" + ":" an emoji shortcode) and not combining marks (NFKC would fold them into a letter).
NOISE = " \t\n.,!?;…。，！？、~-—*_()[]\"'「」🛑✋🙏👍⏸"
texts = st.one_of(
    st.sampled_from(COMMANDS + FILLERS + ["stop the pod", "why did it stop?", "停止服务"]),
    st.text(max_size=30),
)


@settings(max_examples=1000)
@given(text=texts, before=st.text(alphabet=NOISE), after=st.text(alphabet=NOISE))
def test_surrounding_noise_changes_nothing(text: str, before: str, after: str) -> None:
    assert parse_control(before + text + after) == parse_control(text)


def full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


@settings(max_examples=300)
@given(text=texts)
def test_case_and_full_width_change_nothing(text: str) -> None:
    assert parse_control(text.upper()) == parse_control(text.lower())
    assert parse_control(full_width(text)) == parse_control(text)


@settings(max_examples=1000)
@given(text=st.text(max_size=80))
def test_a_command_is_its_own_normal_form(text: str) -> None:
    command = parse_control(text)
    if command is not None:
        assert command.intent in set(ControlIntent)
        assert parse_control(command.text) == command


@settings(max_examples=1000)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_the_ascii_fast_path_normalizes_exactly_like_the_general_one(text: str) -> None:
    from bot.policy.control_phrases import _normalize_unicode

    assert normalize(text) == _normalize_unicode(text)
