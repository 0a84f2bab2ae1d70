"""A thread's state transitions (``sidecar/thread/``) as pure functions: a
ThreadSession and its TurnStates in, the fields they change out; no
processes, no fake app-server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from sidecar.session.state import ThreadSession, TurnState, Unfollowed, new_session
from sidecar.store.ledger import LedgerState
from sidecar.thread import holdings, opening
from sidecar.thread.files import Injection


def thread(**fields: Any) -> ThreadSession:
    session = new_session("thr", "key", Path("/dev/null"))
    for name, value in fields.items():
        setattr(session, name, value)
    return session


# ------------------------------------------------------------ holdings


def test_a_finalised_turn_adds_its_messages_to_what_the_projection_put_in() -> None:
    session = thread(held=["a"], turns_since_rebuild=["t0"])
    state = TurnState(client_id=1, original_input=None, held_plan=["a", "p"])
    holdings.turn_finalised(session, state, "t1", ["u", "r"])
    assert (session.held, session.turns_since_rebuild) == (["a", "p", "u", "r"], ["t0", "t1"])


def test_a_finalised_rebuilt_turn_starts_the_turns_since_the_rebuild_and_an_unknown_count_stays_unknown() -> None:
    session = thread(held=None, turns_since_rebuild=None)
    holdings.turn_finalised(session, TurnState(client_id=1, original_input=None, rebuilt=True, held_plan=[]), "t1", ["u"])
    assert (session.held, session.turns_since_rebuild) == (["u"], ["t1"])
    session = thread(held=["x"], turns_since_rebuild=None)
    holdings.turn_finalised(session, TurnState(client_id=1, original_input=None), "t2", ["u"])
    assert (session.held, session.turns_since_rebuild) == (["x", "u"], None)


def test_the_holdings_record_is_what_a_ledger_reset_writes(tmp_path: Path) -> None:
    from sidecar.store.ledger import Ledger

    session = thread(held=["a"], sizes={"a": 3}, turns_since_rebuild=["t1"], rebuilds=2, force_rebuild=True, projected_epoch="e")
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.reset(holdings.holdings(session))
    assert ledger.load() == LedgerState(held=["a"], sizes={"a": 3}, turns_since_rebuild=["t1"], rebuilds=2, force_rebuild=True, projected_epoch="e")


def test_an_opening_restores_the_ledger_and_a_rebuild_cut_short_holds_only_the_framing() -> None:
    session = thread()
    holdings.restored(session, LedgerState(held=["a"], sizes={"a": 1}, turns_since_rebuild=["t"], rebuilds=1, projected_epoch="e", rebuilding=True), None)
    assert (session.held, session.force_rebuild, session.rebuilds, session.projected_epoch, session.turns_since_rebuild) == ([], True, 1, "e", ["t"])


def test_no_ledger_journal_takes_the_rebuild_count_from_the_inspection_log() -> None:
    session = thread()
    holdings.restored(session, LedgerState(), {"rebuilds": 3})
    assert (session.held, session.rebuilds, session.force_rebuild) == (None, 3, True)
    session = thread()
    holdings.restored(session, LedgerState(rebuilds=1), {"rebuilds": 3})
    assert (session.rebuilds, session.force_rebuild) == (1, False)  # a journal: the inspection log is not read


def test_caught_up_turns_are_held_once() -> None:
    session = thread(held=["a", "b"], turns_since_rebuild=["t0"], live_turns=["t0"])
    holdings.caught_up(session, ["t1", "t2"], [["b"], ["c"]])
    assert (session.held, session.turns_since_rebuild, session.live_turns) == (["a", "b", "c"], ["t0", "t1", "t2"], ["t0", "t1", "t2"])


def test_a_client_revert_into_the_archive_leaves_codex_at_its_framing() -> None:
    session = thread(held=["a"], turns_since_rebuild=["t1", "t2"], projected_epoch="e", live_turns=["t1"])
    assert holdings.revert_followed(session, "t1", into_archive=True) is False
    assert (session.held, session.turns_since_rebuild, session.projected_epoch, session.live_turns) == ([], [], None, [])


def test_a_client_revert_of_a_never_rebuilt_thread_works_out_what_codex_holds_afresh() -> None:
    session = thread(held=["a", "b"], turns_since_rebuild=["t1", "t2"])
    assert holdings.revert_followed(session, "t2", into_archive=False) is False
    assert (session.held, session.turns_since_rebuild) == (None, ["t1"])


def test_a_client_revert_of_a_rebuilt_thread_reads_the_ledger_after_the_last_turn_kept() -> None:
    session = thread(held=["a", "b"], turns_since_rebuild=["t1", "t2"], rebuilds=1)
    assert holdings.revert_followed(session, "t2", into_archive=False) is True
    assert holdings.last_kept(session) == "t1"
    holdings.ledger_found(session, (["a"], "e", False))
    assert (session.held, session.projected_epoch, session.force_rebuild) == (["a"], "e", False)
    holdings.ledger_found(session, None)
    assert (session.held, session.force_rebuild) == (None, True)


def test_turns_a_client_reverted_leave_what_codex_holds() -> None:
    session = thread(live_turns=["t1", "t2", "t3"])
    holdings.turns_gone(session, ["t2", "t3"])
    assert session.live_turns == ["t1"]


def test_a_rebuild_that_moved_the_thread_times_the_current_turn() -> None:
    session = thread(live_turns=["t1"], turns_since_rebuild=["t1"])
    session.current = TurnState(client_id=1, original_input=None)
    holdings.moved(session, 12.5, switched=True)
    assert (session.live_turns, session.turns_since_rebuild, session.current.switched, session.current.revert_ms) == ([], [], True, 12.5)


def test_an_abandoned_retry_after_a_rebuild_holds_nothing_and_gives_the_slot_back_to_the_first_attempt() -> None:
    first = TurnState(client_id=1, original_input=None, turn_id="t1", held_plan=["a"])
    retry = TurnState(client_id=1, original_input=None, rebuilt=True)
    session = thread(held=["a"], turns_since_rebuild=["t0", "t1"], projected_epoch="e")
    session.current = retry
    holdings.retry_abandoned(session, first, retry)
    assert (session.held, session.turns_since_rebuild, session.projected_epoch, first.held_plan, session.current) == ([], [], None, None, first)


def test_an_abandoned_retry_without_a_rebuild_leaves_the_first_attempt_to_the_finalizer() -> None:
    first = TurnState(client_id=1, original_input=None, turn_id="t1")
    session = thread(turns_since_rebuild=["t0"])
    retry = TurnState(client_id=1, original_input=None)
    holdings.retry_started(session, first, retry)
    assert (session.turns_since_rebuild, session.force_rebuild, session.current) == (["t0", "t1"], True, retry)
    holdings.retry_abandoned(session, first, retry)
    assert (session.turns_since_rebuild, session.current) == (["t0"], first)


# ------------------------------------------------------------ the turn slot


def test_an_accepted_turn_keeps_what_a_turn_codex_joined_it_to_collected() -> None:
    session = thread()
    known = TurnState(client_id=None, original_input=[{"type": "text", "text": "joined"}], turn_id="t1", forwarded=True, items={"i1": {"id": "i1"}})
    session.turns["t1"] = known
    state = TurnState(client_id=7, original_input=[{"type": "text", "text": "mine"}], items={"i2": {"id": "i2"}})
    session.accept(state, "t1")
    assert session.turns["t1"] is state
    assert (state.turn_id, sorted(state.items), state.original_input) == ("t1", ["i1", "i2"], known.original_input)


def test_a_projection_codex_refused_left_nothing_in_the_thread() -> None:
    state = TurnState(client_id=1, original_input=None, projected=True, channels=["x"], addition_pending="a", epoch_pending="e", held_plan=["p"], rebuilt=True)
    state.refused_by_codex()
    assert (state.projected, state.channels, state.addition_pending, state.epoch_pending, state.held_plan, state.fallback_reason) == (
        False, [], None, None, [], "codex-refused"
    )


def test_a_forwarded_turn_ends_the_threads_first_turn_and_counts() -> None:
    session = thread(fresh=True)
    state = TurnState(client_id=1, original_input=[], trigger="heartbeat", received=3.0)
    session.take_slot(state)
    session.turn_forwarded(state, 1.5)
    assert (state.forwarded, state.hold_ms, session.fresh, session.turns_this_opening, session.current) == (True, 1.5, False, 1, state)


def test_a_finalised_turn_is_the_newest_and_codex_holds_it() -> None:
    session = thread(live_turns=[])
    session.finalised("t1", "i9")
    assert (session.last_turn, session.live_turns, session.last_items) == ("t1", ["t1"], {"t1": "i9"})


def test_items_of_an_unknown_turn_get_a_record() -> None:
    session = thread()
    session.item_completed("t1", {"id": "i1"}, 5)
    session.item_completed("t1", {"id": "i2"}, "not a stamp")
    assert (list(session.turns["t1"].items), session.turns["t1"].item_times) == (["i1", "i2"], {"i1": 5})


def test_the_double_projection_warning_goes_once_a_thread() -> None:
    session = thread()
    assert [session.warn_double_projection() for _ in range(2)] == [True, False]


# ------------------------------------------- opening, reverts, injections


def test_an_answered_start_opens_the_thread_fresh_and_a_fork_of_the_framing_holds_only_it() -> None:
    session = thread(closed=True, turns_this_opening=4, cwd="/old")
    opening.answered_open(session, "thread/start", relay="r1", cwd=None, model="m", framing_fork=False)
    assert (session.closed, session.relay, session.fresh, session.turns_this_opening, session.cwd, session.model) == (False, "r1", True, 0, "/old", "m")
    opening.answered_open(session, "thread/fork", relay="r2", cwd="/new", model=None, framing_fork=True)
    assert (session.relay, session.cwd, session.model, session.framing_only) == ("r1", "/new", "m", True)


def test_turns_wait_until_the_last_client_revert_is_answered() -> None:
    session = thread()
    answered = trio.Event()
    opening.revert_sent(session, trio.Event())
    opening.revert_sent(session, answered)
    assert session.reverts_answered is answered
    assert [opening.revert_answered(session), opening.revert_answered(session), opening.revert_answered(session)] == [False, True, True]


def test_a_follow_that_failed_stays_for_the_next_turn() -> None:
    pending = Unfollowed("t1", False, frozenset(), None)
    session = thread(unfollowed=pending)
    opening.follow_ended(session, pending, followed=False)
    assert session.unfollowed is pending
    opening.follow_ended(session, pending, followed=True)
    assert session.unfollowed is None
    opening.follow_ended(session, pending, followed=False)  # a restart's intent
    assert session.unfollowed is pending


def test_injections_before_the_first_turn_count_as_framing_and_a_revert_drops_what_came_after_its_turns() -> None:
    session = thread(turns_since_rebuild=[])
    first = Injection(None, [{"a": 1}])
    opening.injected(session, first)
    assert (session.injected_framing, session.injected) == (1, [first])
    session.current = TurnState(client_id=1, original_input=None)
    second = Injection(None, [{"b": 2}])
    opening.injected(session, second)
    assert session.injected_framing == 1
    placed = Injection("t1", second.items)
    opening.injection_placed(session, second, placed)
    assert session.injected == [first, placed]
    assert opening.injections_dropped(session, {"t9"}) is False
    assert opening.injections_dropped(session, {"t1"}) is True
    assert session.injected == [first]


def test_a_replay_is_unsure_until_settled() -> None:
    session = thread()
    opening.replaying(session)
    assert session.injected_unsure
    opening.replay_settled(session, 2)
    assert (session.injected_unsure, session.injected_framing) == (False, 2)


def test_a_retry_projects_again_from_what_the_first_attempt_projected_from() -> None:
    first = TurnState(client_id=3, original_input=[{"type": "text", "text": "with continuity"}], trigger="heartbeat", openclaw_context="continuity")
    first.continuity_cut({"input": first.original_input, "model": "m"}, [{"type": "text", "text": "cut"}])
    retry = first.retry()
    retry.retry_forwarded(first)
    assert (retry.client_id, retry.original_input, retry.heartbeat, retry.attempt, retry.openclaw_context, retry.forwarded) == (
        3, [{"type": "text", "text": "cut"}], True, 1, "continuity", True
    )


def test_a_projection_that_failed_after_a_rebuild_left_only_the_framing() -> None:
    state = TurnState(client_id=1, original_input=None)
    state.note_plan(["a", "b"], "e1", None)
    state.mark_rebuilt()
    state.projection_failed("projection-too-big")
    assert (state.held_plan, state.epoch_pending, state.fallback_reason) == ([], "e1", "projection-too-big")
    state.rebuild_unavailable()
    assert (state.held_plan, state.epoch_pending, state.fallback_reason) == (None, None, "rebuild-unavailable")


def test_a_projection_notes_its_channels_and_holds_its_addition_until_codex_accepts() -> None:
    state = TurnState(client_id=1, original_input=None)
    state.note_projection(["turn/start.input"], None, {"input": "x"})
    assert (state.projected, state.channels, state.addition_pending, state.sent_text) == (True, ["turn/start.input"], None, {"input": "x"})
    state.note_projection(["addition"], "be brief", None)
    assert (state.channels, state.addition_pending) == (["turn/start.input", "addition"], "be brief")


# ------------------------------------------------ the smaller transitions


def test_what_makes_the_next_turn_rebuild_and_what_a_rebuild_settles() -> None:
    session = thread(held=["a"], turns_since_rebuild=["t1"], rebuilds=1)
    holdings.codex_compacted(session)
    assert session.force_rebuild
    holdings.rebuilt(session)
    assert (session.rebuilds, session.force_rebuild) == (2, False)
    holdings.untracked_projection(session)
    assert session.force_rebuild
    holdings.unknown(session)
    assert (session.held, session.force_rebuild, session.turns_since_rebuild) == (None, True, None)
    holdings.at_framing(session)
    assert session.turns_since_rebuild == []
    holdings.first_turn_unknown(session)
    assert session.turns_since_rebuild is None
    holdings.revert_unsupported(session)
    assert session.revert_unsupported
    holdings.epoch_accepted(session, "e2")
    assert session.projected_epoch == "e2"


def test_a_new_codex_thread_of_a_known_session_holds_nothing_once() -> None:
    session = thread(held=None, turns_since_rebuild=None)
    assert holdings.holds_nothing(session) is True
    assert (session.held, session.turns_since_rebuild) == ([], [])
    session.held = ["a"]
    assert holdings.holds_nothing(session) is False
    assert session.held == ["a"]
    holdings.framing_only(session)
    assert (session.held, session.turns_since_rebuild, session.live_turns) == ([], [], [])


def test_an_opening_binds_the_thread_and_keeps_its_files() -> None:
    session = thread()
    opening.bound(session, "s1", "agent:s1", Path("/tmp/s1.jsonl"), "relay")
    assert (session.session_id, session.session_key, session.path, session.via) == ("s1", "agent:s1", Path("/tmp/s1.jsonl"), "relay")
    mirror, inspect, ledger = object(), object(), object()
    opening.mirror_opened(session, mirror, had_history=True)  # type: ignore[arg-type]
    opening.files_opened(session, inspect=inspect)  # type: ignore[arg-type]
    opening.files_opened(session, ledger=ledger)  # type: ignore[arg-type]
    assert (session.mirror, session.had_history, session.inspect, session.ledger) == (mirror, True, inspect, ledger)
    opening.mirror_opened(session, None)
    assert (session.mirror, session.had_history) == (None, True)
    opening.history_known(session, False)
    opening.history_imported(session, False)
    assert not session.had_history
    opening.history_imported(session, True)
    assert session.had_history


def test_a_closed_thread_is_released_only_when_nothing_of_it_is_under_way() -> None:
    session = thread()
    assert not opening.releasable(session)
    opening.closed(session)
    assert opening.releasable(session)
    session.take_slot(TurnState(client_id=1, original_input=None))
    assert not opening.releasable(session)
    session.current = None
    opening.revert_sent(session, trio.Event())
    assert not opening.releasable(session)
    opening.revert_answered(session)
    opening.closed(session, False)
    assert not opening.releasable(session)


def test_a_fork_cut_at_a_turn_sends_the_addition_again() -> None:
    assert opening.fork_keeps_addition({"threadId": "p"})
    assert not opening.fork_keeps_addition({"threadId": "p", "lastTurnId": "t1"})
    assert not opening.fork_keeps_addition({"threadId": "p", "beforeTurnId": "t1"})


def test_usage_and_learned_facts_are_the_threads() -> None:
    from engines import PromptCacheInfo, Usage
    from sidecar.session.state import LearnedMachine

    session = thread()
    usage, cache = Usage(input=1, output=2, cache_read=0, cache_write=0, total_tokens=3), PromptCacheInfo(cached_input_tokens=0, input_tokens=1)
    opening.usage_reported(session, usage, cache, 1)
    machine = LearnedMachine("thr")
    opening.learned_read(session, machine, "key")
    assert (session.last_usage, session.prompt_cache, session.current_token_count, session.learned, session.learned_key) == (usage, cache, 1, machine, "key")


def test_a_turns_record_notes_what_the_assembly_and_the_projection_did() -> None:
    state = TurnState(client_id=1, original_input=None, params={"input": []})
    state.context_carried("continuity")
    state.history_read([])
    state.note_assembly(count=3, tokens=40, budget=100, roles=[["user", 2]], mode="delta", epoch=None)
    state.note_render(rendered=3, dropped=1, context_chars=10, original_chars=4, sent_chars=14)
    state.fell_back("no-mirror")
    assert (state.params, state.openclaw_context, state.pre_prompt_count, state.assembled_count, state.estimated_tokens, state.budget, state.mode) == (
        {"input": []}, "continuity", 0, 3, 40, 100, "delta"
    )
    assert (state.rendered, state.dropped, state.context_chars, state.original_chars, state.sent_chars, state.fallback_reason) == (3, 1, 10, 4, 14, "no-mirror")


def test_a_finalised_turn_leaves_the_table_and_a_join_codex_made_its_own_takes_the_slot() -> None:
    session = thread()
    session.item_completed("t1", {"id": "i1"}, None)
    state = session.finalising("t1")
    assert "t1" not in session.turns and list(state.items) == ["i1"]
    assert session.finalising("t2").turn_id == "t2"  # never seen: a record of its own
    session.finalising_join(state)
    assert session.current is state
    session.turns["t0"] = TurnState(client_id=1, original_input=None, turn_id="t0")
    session.retry_accepted(TurnState(client_id=1, original_input=None, turn_id="t0"))
    assert "t0" not in session.turns
