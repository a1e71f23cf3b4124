"""The steer-eligibility policy and the authority table (docs/design.md §Steer policy).

Why this way: the policy is data over a small finite product (720 cells), so the tests walk all
of it instead of sampling it. First totality: every cell has a decision, so an enum member added
without a row fails here. Then the issue's rules as statements quantified over every cell (no
source but a person ever steers, stops or approves; an edit never starts a turn; a deletion never
acts). Then the grid for people's messages is spelled out literally as the spec, and the
situation tables in `docs/control-commands.md` are read and compared with the table, so the page
users read cannot drift from the code. Last, end-to-end rows through `classify` with real
`ChatEvent`s, named after the issue's policy tests and docs/reliability.md rows, and the authority
table (A5: the two-person rule). One Hypothesis property feeds random text through the control
parser into the policy for every non-human source.
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.events import AuthorKind, ChatEvent, EventKind, Platform
from bot.policy.authority import (
    AUTHORITY,
    UNATTENDED_APPROVALS,
    Action,
    Role,
    approvals_needed,
    may,
)
from bot.policy.control_phrases import ControlIntent
from bot.policy.steer import (
    POLICY,
    RULES,
    Decision,
    Marker,
    PolicyKey,
    Rule,
    RunState,
    ThreadRelation,
    authorize,
    classify,
    decide,
    expand,
    marker_of,
    parse_rules,
    required_action,
)
from tests.paths import ROOT

A, K, T, S, M, D = AuthorKind, EventKind, ThreadRelation, RunState, Marker, Decision
PRODUCT = [PolicyKey(*cell) for cell in itertools.product(A, K, T, S, M)]
MACHINES = (A.OTHER_BOT, A.SELF, A.SUBAGENT, A.SYSTEM, A.SCHEDULER)


def cells(**fixed: object) -> list[PolicyKey]:
    """Every cell of the product whose named fields equal the given values."""
    return [key for key in PRODUCT if all(getattr(key, f) == v for f, v in fixed.items())]


# -- totality and the table's own checks ----------------------------------------------------


def test_the_table_covers_the_full_product() -> None:
    missing = [key for key in PRODUCT if key not in POLICY]
    assert missing == [], f"cells without a row (a new enum member?): {missing[:5]}"
    assert len(POLICY) == len(PRODUCT)


def test_a_missing_row_leaves_its_cells_uncovered() -> None:
    # What a new AuthorKind member without rows looks like: its cells have no decision, except
    # where a row written for every author (deletions, typed approvals) already speaks for it.
    self_row = next(rule for rule in RULES if rule.authors == {A.SELF})
    partial = expand(rule for rule in RULES if rule is not self_row)
    uncovered = {key for key in PRODUCT if key not in partial}
    assert uncovered <= set(cells(author=A.SELF))
    assert {k for k in cells(author=A.SELF, event=K.MESSAGE) if k.marker is not M.APPROVAL} <= (
        uncovered
    )


def test_rows_that_disagree_are_refused() -> None:
    rules = parse_rules("human * * * * stop\n# a conflicting row\nhuman message * * * ignore")
    with pytest.raises(ValueError, match="conflicting row"):
        expand(rules)


@pytest.mark.parametrize(
    "row",
    ["humans * * * * ignore", "human * * * * maybe", "human * * * ignore", "human * * * * x y"],
)
def test_a_malformed_row_is_refused(row: str) -> None:
    with pytest.raises(ValueError):
        Rule.parse(row, "why")


def test_every_row_says_why() -> None:
    assert all(rule.why for rule in RULES)


# -- the rules, over every cell -----------------------------------------------------


def test_only_a_person_steers_stops_approves_or_pulls_the_kill_switch() -> None:
    acting = {D.STEER, D.STOP, D.APPROVE, D.KILL_SWITCH}
    assert [k for k in PRODUCT if k.author in MACHINES and POLICY[k] in acting] == []


def test_own_posts_and_system_notices_are_never_input() -> (
    None
):  # S12, docs/design.md §External contract
    assert {POLICY[k] for k in cells(author=A.SELF) + cells(author=A.SYSTEM)} == {D.IGNORE}


def test_a_deletion_never_acts() -> None:
    assert {POLICY[k] for k in cells(event=K.DELETE)} == {D.IGNORE}


def test_an_edit_is_a_message_that_never_starts_or_pulls_the_kill_switch() -> None:
    for key in cells(event=K.EDIT):
        as_message = POLICY[key._replace(event=K.MESSAGE)]
        never = {D.START, D.KILL_SWITCH}
        expected = D.IGNORE if as_message in never or key.author is not A.HUMAN else as_message
        assert POLICY[key] is expected, key


def test_approvals_come_only_from_a_persons_button() -> None:
    approving = {k for k in PRODUCT if POLICY[k] is D.APPROVE}
    assert approving == set(cells(author=A.HUMAN, event=K.ACTION, marker=M.APPROVAL))


def test_the_kill_switch_is_only_a_persons_mentioned_message() -> None:
    pulling = {k for k in PRODUCT if POLICY[k] is D.KILL_SWITCH}
    assert pulling == set(cells(author=A.HUMAN, event=K.MESSAGE, marker=M.KILL_SWITCH))


def test_a_kill_switch_command_never_steers_stops_or_approves() -> None:
    # A machine's text that parses as one is content (it may start or queue, as any report);
    # a person's goes to the switch or nowhere: never a steer, a start or a session's stop.
    decisions = {POLICY[k] for k in cells(marker=M.KILL_SWITCH)}
    assert decisions.isdisjoint({D.STEER, D.STOP, D.APPROVE})
    assert {POLICY[k] for k in cells(author=A.HUMAN, marker=M.KILL_SWITCH)} == {
        D.KILL_SWITCH,
        D.IGNORE,
    }


def test_a_persons_stop_stops_in_every_thread_and_state() -> (
    None
):  # docs/design.md §Invariants I3, I4
    for event in (K.MESSAGE, K.EDIT, K.ACTION):
        assert {POLICY[k] for k in cells(author=A.HUMAN, event=event, marker=M.STOP)} == {D.STOP}


@pytest.mark.parametrize("author", [A.SUBAGENT, A.SCHEDULER])
def test_reports_and_scheduled_jobs_wait_for_a_live_turn(author: AuthorKind) -> None:
    for state, expected in [(S.IDLE, D.START), (S.QUEUED, D.QUEUE), (S.RUNNING, D.QUEUE)]:
        keys = cells(author=author, event=K.MESSAGE, relation=T.BOT_THREAD, state=state)
        assert {POLICY[k] for k in keys if k.marker is not M.APPROVAL} == {expected}


def test_another_bot_only_opens_an_analysis_with_a_mention() -> None:
    starting = {k for k in cells(author=A.OTHER_BOT) if POLICY[k] is D.START}
    assert starting == set(
        cells(author=A.OTHER_BOT, event=K.MESSAGE, relation=T.NO_SESSION, marker=M.MENTION)
    )
    assert {POLICY[k] for k in cells(author=A.OTHER_BOT)} == {D.START, D.IGNORE}


# -- a person's messages, literally -------------------------------------------------------

_ = D.IGNORE
KS = D.KILL_SWITCH
HUMAN_MESSAGE = {  # (relation, state): by marker NONE, MENTION, STOP, RESUME, APPROVAL, KILL_SWITCH
    (T.NO_SESSION, S.IDLE): (_, D.START, D.STOP, _, _, KS),
    (T.NO_SESSION, S.QUEUED): (_, D.START, D.STOP, _, _, KS),  # cannot happen: for totality
    (T.NO_SESSION, S.RUNNING): (_, D.START, D.STOP, _, _, KS),  # cannot happen: for totality
    (T.BOT_THREAD, S.IDLE): (_, D.START, D.STOP, D.START, _, KS),
    (T.BOT_THREAD, S.QUEUED): (D.STEER, D.STEER, D.STOP, _, _, KS),
    (T.BOT_THREAD, S.RUNNING): (D.STEER, D.STEER, D.STOP, _, _, KS),
}


def test_a_persons_messages_cell_by_cell() -> None:
    assert set(HUMAN_MESSAGE) == set(itertools.product(T, S)), "a new relation or state"
    assert [*M] == [M.NONE, M.MENTION, M.STOP, M.RESUME, M.APPROVAL, M.KILL_SWITCH], "a new marker"
    for (relation, state), row in HUMAN_MESSAGE.items():
        for marker, expected in zip(M, row, strict=True):
            got = decide(
                author=A.HUMAN, event=K.MESSAGE, relation=relation, state=state, marker=marker
            )
            assert got is expected, (relation, state, marker)


# -- the page users read --------------------------------------------------------------------

DOC = ROOT / "docs" / "control-commands.md"
SITUATIONS = [(T.NO_SESSION, S.IDLE), (T.BOT_THREAD, S.IDLE), (T.BOT_THREAD, S.QUEUED)]
SITUATIONS += [(T.BOT_THREAD, S.RUNNING)]
WORDS = {"ignored": D.IGNORE, "starts": D.START, "steers": D.STEER, "stops": D.STOP}


def doc_decisions(name: str) -> list[list[Decision]]:
    """The bold verb of each cell of a situation table in the doc, as decisions."""
    table = DOC.read_text(encoding="utf-8").split(f"<!-- table: {name} -->\n", 1)[1]
    rows = table.split("\n\n", 1)[0].splitlines()[2:]
    return [[WORDS[w] for w in re.findall(r"\*\*(\w+)\*\*", row)] for row in rows]


@pytest.mark.parametrize(
    ("table", "event", "columns"),
    [
        ("replies", K.MESSAGE, [(M.NONE,), (M.MENTION,), (M.STOP,), (M.RESUME,)]),
        ("edits", K.EDIT, [(M.NONE, M.MENTION), (M.STOP,), (M.RESUME,)]),
    ],
)
def test_the_doc_tells_what_the_table_does(
    table: str, event: EventKind, columns: list[tuple[Marker, ...]]
) -> None:
    documented = doc_decisions(table)
    assert len(documented) == len(SITUATIONS)
    for (relation, state), row in zip(SITUATIONS, documented, strict=True):
        for markers, expected in zip(columns, row, strict=True):
            for marker in markers:
                assert POLICY[PolicyKey(A.HUMAN, event, relation, state, marker)] is expected


# -- end to end through classify ------------------------------------------------------------


def chat(
    text: str = "",
    *,
    author: AuthorKind = A.HUMAN,
    kind: EventKind = K.MESSAGE,
    mentioned: bool = False,
    action: str = "",
) -> ChatEvent:
    return ChatEvent(
        platform=Platform.SLACK,
        event_id="Ev1",
        kind=kind,
        workspace="T1",
        channel="C1",
        thread="1700000000.000100",
        message_id="1700000000.000200",
        author="U1",
        author_kind=author,
        text=text,
        mentioned=mentioned,
        action=action,
    )


LIVE = (T.BOT_THREAD, S.RUNNING)
IDLE = (T.BOT_THREAD, S.IDLE)
NEW = (T.NO_SESSION, S.IDLE)


@pytest.mark.parametrize(
    ("event", "where", "expected"),
    [
        pytest.param(chat("check the db", author=A.OTHER_BOT), LIVE, D.IGNORE, id="other-bot"),
        pytest.param(
            chat("stop", author=A.OTHER_BOT, mentioned=True), LIVE, D.IGNORE, id="other-bot-stop"
        ),
        pytest.param(chat("Looking…", author=A.SELF), LIVE, D.IGNORE, id="own-message-S12"),
        pytest.param(chat("found it", author=A.SUBAGENT), LIVE, D.QUEUE, id="subagent-report"),
        pytest.param(chat("stop", author=A.SUBAGENT), LIVE, D.QUEUE, id="subagent-says-stop"),
        pytest.param(chat("found it", author=A.SUBAGENT), IDLE, D.START, id="report-wakes"),
        pytest.param(chat("bob joined", author=A.SYSTEM), LIVE, D.IGNORE, id="system-notice"),
        pytest.param(chat("it's the gateway"), LIVE, D.STEER, id="human-reply-steers"),
        pytest.param(chat("stop"), LIVE, D.STOP, id="stop-stops"),
        pytest.param(chat(" Stop!", mentioned=True), LIVE, D.STOP, id="mention-stop"),
        pytest.param(chat("别跑了"), (T.BOT_THREAD, S.QUEUED), D.STOP, id="tombstone-queued"),
        pytest.param(chat("stop the nginx pod"), LIVE, D.STEER, id="ambiguous-is-content"),
        pytest.param(chat("thanks!"), IDLE, D.IGNORE, id="chat-after-the-end"),
        pytest.param(chat("and redis?", mentioned=True), IDLE, D.START, id="follow-up"),
        pytest.param(chat("继续"), IDLE, D.START, id="resume"),
        pytest.param(chat("continue"), LIVE, D.IGNORE, id="resume-while-running"),
        pytest.param(chat("why slow?", mentioned=True), NEW, D.START, id="mention-starts"),
        pytest.param(chat("why slow?"), NEW, D.IGNORE, id="no-mention-no-session"),
        pytest.param(chat("fire!", author=A.OTHER_BOT, mentioned=True), NEW, D.START, id="alert"),
        pytest.param(chat("the gateway", kind=K.EDIT), LIVE, D.STEER, id="edit-steers"),
        pytest.param(chat("why?", kind=K.EDIT, mentioned=True), IDLE, D.IGNORE, id="edit-no-run"),
        pytest.param(chat("", kind=K.DELETE), LIVE, D.IGNORE, id="delete"),
        pytest.param(chat(kind=K.ACTION, action="stop"), LIVE, D.STOP, id="stop-button"),
        pytest.param(chat(kind=K.ACTION, action="approve"), LIVE, D.APPROVE, id="approve"),
        pytest.param(chat(kind=K.ACTION, action="deny"), IDLE, D.APPROVE, id="late-deny"),
        pytest.param(chat(kind=K.ACTION, action="frobnicate"), LIVE, D.IGNORE, id="unknown"),
        pytest.param(chat("approve"), LIVE, D.STEER, id="typed-approve-is-text"),
        pytest.param(
            chat("killswitch on", mentioned=True), LIVE, D.KILL_SWITCH, id="kill-switch-live"
        ),
        pytest.param(chat("开启急停", mentioned=True), NEW, D.KILL_SWITCH, id="kill-switch-new"),
        pytest.param(
            chat("killswitch status", mentioned=True), IDLE, D.KILL_SWITCH, id="switch-status"
        ),
        pytest.param(chat("killswitch on"), LIVE, D.STEER, id="kill-switch-needs-the-mention"),
        pytest.param(chat("killswitch off"), IDLE, D.IGNORE, id="unmentioned-switch-is-chat"),
        pytest.param(
            chat("is the killswitch on?", mentioned=True), LIVE, D.STEER, id="switch-question"
        ),
        pytest.param(
            chat("killswitch on", kind=K.EDIT, mentioned=True), LIVE, D.IGNORE, id="switch-edit"
        ),
        pytest.param(
            chat("killswitch on", author=A.OTHER_BOT, mentioned=True),
            NEW,
            D.IGNORE,
            id="bot-pulls-switch",
        ),
        pytest.param(
            chat("killswitch on", author=A.SUBAGENT, mentioned=True),
            LIVE,
            D.QUEUE,
            id="subagent-switch-text-is-content",
        ),
    ],
)
def test_classify(
    event: ChatEvent, where: tuple[ThreadRelation, RunState], expected: Decision
) -> None:
    relation, state = where
    verdict = classify(event, relation=relation, state=state)
    assert verdict.decision is expected
    assert verdict.marker is marker_of(event) and verdict.reason


def test_a_pause_is_a_stop_that_remembers_it_was_a_pause() -> None:
    verdict = classify(chat("先停一下"), relation=T.BOT_THREAD, state=S.RUNNING)
    assert verdict.decision is D.STOP and verdict.marker is M.STOP
    assert verdict.command is not None and verdict.command.intent is ControlIntent.PAUSE


@settings(max_examples=300)
@given(
    author=st.sampled_from(MACHINES),
    kind=st.sampled_from(list(K)),
    text=st.one_of(
        st.sampled_from(["stop", "停止", "pause", "继续", "approve", "killswitch on", "关闭急停"]),
        st.text(),
    ),
    mentioned=st.booleans(),
    action=st.sampled_from(["", "stop", "approve", "deny"]),
    relation=st.sampled_from(list(T)),
    state=st.sampled_from(list(S)),
)
def test_no_machine_message_ever_cuts_or_approves(
    author: AuthorKind,
    kind: EventKind,
    text: str,
    mentioned: bool,
    action: str,
    relation: ThreadRelation,
    state: RunState,
) -> None:
    event = chat(text, author=author, kind=kind, mentioned=mentioned, action=action)
    decision = classify(event, relation=relation, state=state).decision
    assert decision not in {D.STEER, D.STOP, D.APPROVE, D.KILL_SWITCH}


# -- who may do what ------------------------------------------------------------------------

R = Role
ANYONE = frozenset({R.CHANNEL_MEMBER})


@pytest.mark.parametrize(
    ("action", "roles", "is_requester", "allowed"),
    [
        (Action.STOP, ANYONE, False, True),
        (Action.STEER, ANYONE, False, True),
        (Action.STOP, frozenset({R.INITIATOR}), False, True),
        (Action.STOP, frozenset(), False, False),  # not even in the channel
        (Action.APPROVE, ANYONE, False, False),
        (Action.APPROVE, frozenset({R.INITIATOR, R.CHANNEL_MEMBER}), False, False),
        (Action.APPROVE, frozenset({R.RESPONDER}), False, True),
        (Action.APPROVE, frozenset({R.RESPONDER}), True, True),  # two-person rule: only destructive
        (Action.APPROVE_DESTRUCTIVE, frozenset({R.RESPONDER}), False, True),
        (Action.APPROVE_DESTRUCTIVE, frozenset({R.RESPONDER}), True, False),  # A5
        (Action.APPROVE_DESTRUCTIVE, frozenset(R), True, False),  # A5, whatever else they are
        (Action.APPROVE_DESTRUCTIVE, frozenset({R.RESPONDER, R.PARTICIPANT}), False, False),  # X11
        (Action.APPROVE_DESTRUCTIVE, frozenset({R.RESPONDER, R.INITIATOR}), False, False),  # X11
        (Action.APPROVE, frozenset({R.RESPONDER, R.PARTICIPANT}), False, True),  # not destructive
        (Action.STEER, frozenset({R.PARTICIPANT}), False, True),
        (Action.KILL_SWITCH, frozenset({R.ADMIN}), False, True),
        (Action.KILL_SWITCH, frozenset({R.ADMIN}), True, True),  # no second person needed
        (Action.KILL_SWITCH, frozenset(R) - {R.ADMIN}, False, False),  # responders included
        (Action.STOP, frozenset({R.ADMIN}), False, True),
    ],
)
def test_default_authority(
    action: Action, roles: frozenset[Role], is_requester: bool, allowed: bool
) -> None:
    assert may(action, roles, is_requester=is_requester) is allowed


def test_x12_a_call_nobody_asked_for_needs_two_approvals_only_when_destructive() -> None:
    """X12: unattended destructive calls need two distinct approvers; everything else one."""
    assert approvals_needed(Action.APPROVE_DESTRUCTIVE, unattended=True) == 2
    assert approvals_needed(Action.APPROVE, unattended=True) == 1
    for action in Action:
        assert approvals_needed(action, unattended=False) == 1
    assert set(UNATTENDED_APPROVALS) == {Action.APPROVE, Action.APPROVE_DESTRUCTIVE}


def test_the_authority_table_names_every_action() -> None:
    assert set(AUTHORITY) == set(Action)


def test_operators_can_replace_the_authority_table() -> None:
    lenient = {**AUTHORITY, Action.APPROVE: frozenset({R.INITIATOR, R.RESPONDER})}
    assert may(Action.APPROVE, frozenset({R.INITIATOR}), authority=lenient)
    assert not may(Action.APPROVE_DESTRUCTIVE, frozenset(R), is_requester=True, authority=lenient)


@pytest.mark.parametrize(
    ("decision", "roles", "expected"),
    [
        (D.STOP, ANYONE, D.STOP),
        (D.STEER, ANYONE, D.STEER),
        (D.STEER, frozenset(), D.IGNORE),
        (D.APPROVE, ANYONE, D.IGNORE),  # S17/F13: a non-approver's click does nothing
        (D.APPROVE, frozenset({R.RESPONDER}), D.APPROVE),
        (D.KILL_SWITCH, frozenset({R.ADMIN}), D.KILL_SWITCH),
        (D.KILL_SWITCH, frozenset({R.RESPONDER, R.CHANNEL_MEMBER}), D.IGNORE),
        (D.START, frozenset(), D.START),  # starting needs no authority (a mention suffices)
        (D.QUEUE, frozenset(), D.QUEUE),
    ],
)
def test_authorize(decision: Decision, roles: frozenset[Role], expected: Decision) -> None:
    assert authorize(decision, roles) is expected


def test_required_action() -> None:
    needed = {d: required_action(d) for d in D}
    assert needed == {
        D.START: None,
        D.STEER: Action.STEER,
        D.STOP: Action.STOP,
        D.APPROVE: Action.APPROVE,
        D.IGNORE: None,
        D.QUEUE: None,
        D.KILL_SWITCH: Action.KILL_SWITCH,
    }
