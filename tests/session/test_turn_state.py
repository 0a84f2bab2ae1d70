"""sidecar.session.state: whether a turn/start joins the thread's running
turn, and how Codex's own word ends a turn whose turn/completed never came
(issue 25). Pure: a ThreadSession and its TurnStates, no processes."""

from __future__ import annotations

from pathlib import Path

from sidecar.session.state import ThreadSession, TurnState, new_session


def running(turn_id: str | None = "t1") -> tuple[ThreadSession, TurnState]:
    """A thread whose held turn was sent to Codex (and answered with ``turn_id``)."""
    session = new_session("thr", "key", Path("/dev/null"))
    session.slot.acquire_nowait()
    state = TurnState(client_id=1, original_input=None, turn_id=turn_id, forwarded=True)
    session.current = state
    if turn_id is not None:
        session.turns[turn_id] = state
    return session, state


async def test_a_turn_start_joins_a_forwarded_turn_until_it_completes():
    session, state = running()
    assert session.joins_running_turn()
    session.completed_turns.add("t1")
    assert not session.joins_running_turn() and session.turn_over_in_codex()


async def test_a_turn_start_held_and_not_yet_forwarded_takes_no_joins():
    session, state = running()
    state.forwarded = False
    assert not session.joins_running_turn()


async def test_codex_idle_ends_a_running_turn_whose_completion_has_not_come():
    session, state = running()
    assert session.codex_idle() and state.ended
    assert not session.joins_running_turn() and session.turn_over_in_codex()
    assert session.busy  # the slot stays with it: its turn/completed may still come
    assert not session.codex_idle()  # not news twice


async def test_an_idle_status_before_codex_answered_the_turn_start_is_an_earlier_one():
    session, state = running(turn_id=None)
    assert not session.codex_idle() and not state.ended
    assert session.joins_running_turn()


async def test_an_idle_status_after_the_turn_completed_changes_nothing():
    session, state = running()
    session.completed_turns.add("t1")
    assert not session.codex_idle() and not state.ended


async def test_a_new_turn_from_a_join_takes_over_the_slot_of_a_turn_whose_completion_never_came():
    session, old = running()
    new, is_running = session.started_by_join("t2")
    assert is_running and session.current is new and old.ended
    assert new.forwarded and new.client_id is None and session.turns["t2"] is new
    assert session.joins_running_turn()  # later input joins the new turn
    session.end_turn(old)  # the old turn's late turn/completed: the slot stays with the new one
    assert session.busy and session.current is new
    session.end_turn(new)
    assert not session.busy and session.current is None


async def test_a_new_turn_from_a_join_waits_behind_a_turn_being_finalised():
    session, old = running()
    session.completed_turns.add("t1")
    new, is_running = session.started_by_join("t2")
    assert not is_running and session.current is old and not old.ended
    assert session.turns["t2"] is new


async def test_a_new_turn_from_a_join_on_a_free_thread_takes_the_slot():
    session = new_session("thr", "key", Path("/dev/null"))
    new, is_running = session.started_by_join("t2")
    assert is_running and session.current is new and session.busy
