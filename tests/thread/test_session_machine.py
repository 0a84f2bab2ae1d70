"""The per-thread machine's session half (``sidecar/thread/session_rules.py``):
a thread opened, bound and its files opened, released, the client's own
reverts, compaction and a turn's overflow retry. Each test is a pure call
of ``handle(session, event)``: a thread's records and an event in, the
actions and the fields they changed out (no processes, no fake app-server)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import trio

from sidecar.session.state import LearnedMachine, ThreadSession, TurnState, Unfollowed, new_session
from sidecar.thread.events import Learn, ResetLedger, SwitchRolledBack
from sidecar.thread.holdings import Holdings
from sidecar.thread.learned import AdditionSent
from sidecar.thread.session_events import (
    EngineToolAnswered,
    FilesOpened,
    FollowEnded,
    ForkedAtFraming,
    ForkOpened,
    HistoryImported,
    HistoryKnown,
    HoldingsChanged,
    InheritAddition,
    LearnedRead,
    LedgerAfterRead,
    LedgerRestored,
    MirrorOpened,
    NativeCompactionAnswered,
    NativeCompactionSent,
    NewThreadOfHistory,
    ReadLedgerAfter,
    Release,
    ReleaseAsked,
    Reported,
    RetryAbandoned,
    RetryAccepted,
    RetryForwarded,
    RetryStarted,
    RevertAnswered,
    RevertFollowed,
    RevertSent,
    RevertsSettled,
    RevertTurnsGone,
    RevertUnfollowed,
    SessionBound,
    ThreadClosed,
    ThreadOpened,
    TurnsCaughtUp,
)
from sidecar.thread.state import handle


class Handle:
    """Stands in for an open file of the thread (mirror, ledger, inspection log)."""


def thread(**fields: Any) -> ThreadSession:
    session = new_session("thr", "key", Path("/dev/null"))
    for name, value in fields.items():
        setattr(session, name, value)
    return session


def turn(**fields: Any) -> TurnState:
    return TurnState(client_id=fields.pop("client_id", 7), original_input=fields.pop("original_input", None), **fields)


def recorded(**fields: Any) -> SimpleNamespace:
    base: dict[str, Any] = {"held": None, "sizes": {}, "turns_since_rebuild": None, "rebuilds": 0, "force_rebuild": False,
                            "projected_epoch": None, "rebuilding": False}
    return SimpleNamespace(**{**base, **fields})


# ------------------------------------------------------------------ opening


def test_a_thread_start_answer_opens_the_thread_fresh_with_its_relay_cwd_and_model() -> None:
    session = thread(closed=True, turns_this_opening=3)
    assert handle(session, ThreadOpened("thread/start", "relay-1", "/w", "gpt", framing_fork=False)) == []
    assert (session.closed, session.relay, session.fresh, session.turns_this_opening, session.cwd, session.model) == (False, "relay-1", True, 0, "/w", "gpt")


def test_a_fork_answer_keeps_the_relay_and_a_fork_of_the_framing_holds_the_framing_only() -> None:
    session = thread(relay="kept", model="old")
    handle(session, ThreadOpened("thread/fork", "other", None, None, framing_fork=True))
    assert (session.relay, session.model, session.framing_only) == ("kept", "old", True)
    session.held, session.turns_since_rebuild, session.live_turns = ["a"], ["t1"], ["t1"]
    assert handle(session, ForkedAtFraming()) == []
    assert (session.held, session.turns_since_rebuild, session.live_turns) == ([], [], [])


def test_a_thread_bound_to_its_session_takes_its_id_key_path_and_how_it_was_found() -> None:
    session = thread()
    handle(session, SessionBound("sess", "agent:sess", Path("/s/sess.jsonl"), "relay"))
    assert (session.session_id, session.session_key, session.path, session.via) == ("sess", "agent:sess", Path("/s/sess.jsonl"), "relay")


def test_an_opened_mirror_and_files_are_the_thread_s_and_none_leaves_a_file_as_it_was() -> None:
    session, mirror, ledger, log = thread(), Handle(), Handle(), Handle()
    handle(session, MirrorOpened(mirror))  # type: ignore[arg-type]
    handle(session, HistoryKnown(True))
    handle(session, FilesOpened(inspect=log))  # type: ignore[arg-type]
    handle(session, FilesOpened(ledger=ledger))  # type: ignore[arg-type]
    assert (session.mirror, session.had_history, session.inspect, session.ledger) == (mirror, True, log, ledger)
    handle(session, MirrorOpened(None))
    assert session.mirror is None and session.had_history


def test_a_restored_ledger_killed_mid_rebuild_holds_the_framing_and_rebuilds() -> None:
    session = thread()
    handle(session, LedgerRestored(recorded(held=["a", "b"], sizes={"a": 1}, turns_since_rebuild=["t1"], rebuilds=2), None))  # type: ignore[arg-type]
    assert (session.held, session.sizes, session.rebuilds, session.force_rebuild) == (["a", "b"], {"a": 1}, 2, False)
    handle(session, LedgerRestored(recorded(held=["a"], rebuilding=True), None))  # type: ignore[arg-type]
    assert (session.held, session.force_rebuild) == ([], True)


def test_a_new_thread_of_a_session_with_history_holds_none_of_it_and_the_ledger_says_so_once() -> None:
    session = thread(ledger=Handle())
    [reset] = handle(session, NewThreadOfHistory())
    assert isinstance(reset, ResetLedger) and reset.holdings.held == [] and session.turns_since_rebuild == []
    assert handle(session, NewThreadOfHistory()) == []  # known now: nothing to say
    assert handle(thread(), NewThreadOfHistory()) == []  # no ledger: nothing written


def test_a_thread_back_from_a_switch_codex_never_accepted_holds_what_is_not_known() -> None:
    session = thread(held=["a"], turns_since_rebuild=["t1"])
    handle(session, SwitchRolledBack())
    assert (session.held, session.force_rebuild, session.turns_since_rebuild) == (None, True, None)


def test_a_whole_fork_inherits_its_parent_s_addition_and_one_cut_at_a_turn_does_not() -> None:
    assert handle(thread(), ForkOpened({"threadId": "parent"})) == [InheritAddition()]
    assert handle(thread(), ForkOpened({"threadId": "parent", "lastTurnId": "t3"})) == []
    assert handle(thread(), ForkOpened({"threadId": "parent", "beforeTurnId": "t3"})) == []


def test_an_import_with_messages_gives_the_session_history_and_one_without_keeps_what_it_had() -> None:
    session = thread()
    handle(session, HistoryImported(False))
    assert not session.had_history
    handle(session, HistoryImported(True))
    handle(session, HistoryImported(False))
    assert session.had_history


def test_turns_caught_up_are_held_as_finalisation_would_have_recorded_them_and_the_ledger_says_so() -> None:
    session = thread(held=["a"], turns_since_rebuild=["t1"], live_turns=["t1"], ledger=Handle())
    [reset] = handle(session, TurnsCaughtUp(["t2", "t3"], [["a"], ["b"]]))  # t2's recorded already (a write that failed)
    assert (session.held, session.turns_since_rebuild, session.live_turns) == (["a", "b"], ["t1", "t2", "t3"], ["t1", "t2", "t3"])
    assert isinstance(reset, ResetLedger) and reset.holdings.held == ["a", "b"]
    assert handle(thread(), TurnsCaughtUp(["t1"], [])) == []  # no ledger: nothing written


def test_the_learned_facts_read_are_the_thread_s_under_their_key() -> None:
    session, machine = thread(), LearnedMachine("thr")
    handle(session, LearnedRead(machine, "agent:k"))
    assert (session.learned, session.learned_key) == (machine, "agent:k")


# ------------------------------------------------------------------ release


def test_a_closed_idle_thread_is_released_only_when_still_its_session_and_no_rebuild_reverts_it() -> None:
    session = thread()
    assert handle(session, ReleaseAsked(ours=True, reverting=False)) == []  # not closed by Codex
    handle(session, ThreadClosed())
    assert session.closed
    assert handle(session, ReleaseAsked(ours=True, reverting=False)) == [Release()]
    assert handle(session, ReleaseAsked(ours=False, reverting=False)) == []
    assert handle(session, ReleaseAsked(ours=True, reverting=True)) == []


def test_a_closed_thread_with_a_native_compaction_unanswered_is_not_released_until_codex_answers() -> None:
    session = thread(closed=True)
    handle(session, NativeCompactionSent())
    assert handle(session, ReleaseAsked(ours=True, reverting=False)) == []
    handle(session, NativeCompactionAnswered())
    handle(session, NativeCompactionAnswered())  # never below zero
    assert session.native_compactions == 0
    assert handle(session, ReleaseAsked(ours=True, reverting=False)) == [Release()]


def test_a_closed_thread_with_a_client_revert_unanswered_or_unfollowed_is_not_released() -> None:
    session = thread(closed=True)
    handle(session, RevertSent(trio.Event()))
    assert handle(session, ReleaseAsked(ours=True, reverting=False)) == []
    handle(session, RevertAnswered())
    pending = Unfollowed("t1", False, frozenset(), "holder")
    handle(session, RevertUnfollowed(pending))
    assert handle(session, ReleaseAsked(ours=True, reverting=False)) == []
    handle(session, FollowEnded(pending, followed=True))
    assert handle(session, ReleaseAsked(ours=True, reverting=False)) == [Release()]


# ------------------------------------------------------------------ client reverts


def test_turns_wait_for_client_reverts_until_the_last_is_answered() -> None:
    session, answered = thread(), trio.Event()
    handle(session, RevertSent(trio.Event()))
    handle(session, RevertSent(answered))
    assert (session.reverts_unanswered, session.reverts_answered) == (2, answered)
    assert handle(session, RevertAnswered()) == []
    assert handle(session, RevertAnswered()) == [RevertsSettled()]
    assert handle(session, RevertAnswered()) == [RevertsSettled()] and session.reverts_unanswered == 0


def test_a_failed_follow_keeps_the_revert_for_the_next_turn_and_one_it_replaced_is_left_alone() -> None:
    first, second = Unfollowed("t1", False, frozenset(), "a"), Unfollowed("t2", False, frozenset(), "b")
    session = thread()
    handle(session, RevertUnfollowed(first))
    handle(session, FollowEnded(first, followed=False))
    assert session.unfollowed is first
    handle(session, RevertUnfollowed(second))
    handle(session, FollowEnded(first, followed=True))
    assert session.unfollowed is second


def test_reverted_turns_are_no_longer_live() -> None:
    session = thread(live_turns=["t1", "t2", "t3"])
    handle(session, RevertTurnsGone(["t2", "t3"]))
    assert session.live_turns == ["t1"]


def test_a_revert_of_a_never_rebuilt_thread_works_what_it_holds_out_afresh() -> None:
    session = thread(held=["a", "b"], turns_since_rebuild=["t1", "t2"])
    assert handle(session, RevertFollowed("t2", into_archive=False)) == []
    assert (session.held, session.turns_since_rebuild) == (None, ["t1"])


def test_a_revert_to_codex_s_first_turn_or_into_the_archive_leaves_the_thread_at_its_framing() -> None:
    session = thread(held=["a"], turns_since_rebuild=["t1"], projected_epoch="e", live_turns=["t1"])
    assert handle(session, RevertFollowed("t1", into_archive=False)) == []
    assert (session.held, session.turns_since_rebuild, session.projected_epoch) == ([], [], None)
    archived = thread(held=["a"], turns_since_rebuild=["t1"], live_turns=["t1"], rebuilds=1)
    assert handle(archived, RevertFollowed("t0", into_archive=True)) == []
    assert (archived.held, archived.live_turns) == ([], [])


def test_a_revert_of_a_rebuilt_thread_reads_the_ledger_after_the_last_turn_kept_and_sends_the_addition_again() -> None:
    session = thread(held=["p", "a", "b"], turns_since_rebuild=["t1", "t2"], rebuilds=1)
    assert handle(session, RevertFollowed("t2", into_archive=False)) == [ReadLedgerAfter("t1")]
    assert handle(session, LedgerAfterRead((["p", "a"], "e1", False))) == [Learn(AdditionSent(None))]
    assert (session.held, session.projected_epoch, session.force_rebuild) == (["p", "a"], "e1", False)


def test_a_revert_whose_ledger_no_longer_reaches_back_projects_afresh() -> None:
    session = thread(held=["p"], turns_since_rebuild=["t1", "t2"], rebuilds=1)
    handle(session, RevertFollowed("t2", into_archive=False))
    assert handle(session, LedgerAfterRead(None)) == []
    assert (session.held, session.force_rebuild) == (None, True)


def test_what_the_thread_holds_after_a_revert_is_written_to_its_ledger_when_it_has_one() -> None:
    session = thread(held=["a"], sizes={"a": 3}, turns_since_rebuild=["t1"], ledger=Handle())
    assert handle(session, HoldingsChanged()) == [ResetLedger(Holdings(["a"], {"a": 3}, ["t1"], 0, False, None))]
    assert handle(thread(held=["a"]), HoldingsChanged()) == []


# ------------------------------------------------------------------ compaction, overflow


def test_what_the_sidecar_did_for_the_thread_is_reported() -> None:
    session = thread()
    handle(session, Reported("lastOverflow", {"retried": False}))
    assert session.stats["lastOverflow"] == {"retried": False}


def test_a_turn_keeps_its_first_engine_tool_calls_and_none_are_kept_outside_a_turn() -> None:
    idle = thread()
    handle(idle, EngineToolAnswered({"tool": "lcm_grep"}, kept=2))
    assert idle.current is None
    session = thread(current=turn(turn_id="t1"))
    for n in range(3):
        handle(session, EngineToolAnswered({"tool": "lcm_grep", "n": n}, kept=2))
    assert session.current is not None and session.current.engine_tools == [{"tool": "lcm_grep", "n": 0}, {"tool": "lcm_grep", "n": 1}]


def test_an_overflowed_turn_retried_is_a_turn_the_thread_holds_and_the_next_assembly_rebuilds() -> None:
    first = turn(turn_id="t2", params={"input": []}, openclaw_context="continuity")
    session = thread(turns_since_rebuild=["t1"], current=first)
    retry = first.retry()
    handle(session, RetryStarted(first, retry))
    assert (session.turns_since_rebuild, session.force_rebuild, session.current) == (["t1", "t2"], True, retry)
    handle(session, RetryForwarded(first, retry))
    assert retry.forwarded and retry.openclaw_context == "continuity"


def test_an_accepted_retry_is_the_turn_and_the_first_attempt_is_never_finalised() -> None:
    first = turn(turn_id="t2")
    session = thread(turns={"t2": first})
    handle(session, RetryAccepted(first))
    assert session.turns == {}


def test_an_abandoned_retry_ends_the_first_attempt_as_codex_ended_it() -> None:
    first = turn(turn_id="t2")
    session = thread(turns_since_rebuild=["t1", "t2"], current=first.retry())
    handle(session, RetryAbandoned(first, session.current))
    assert (session.current, session.turns_since_rebuild) == (first, ["t1"])
    rebuilt = first.retry()
    rebuilt.mark_rebuilt()
    session = thread(held=["a"], current=rebuilt)
    handle(session, RetryAbandoned(first, rebuilt))
    assert session.current is first and first.held_plan is None
