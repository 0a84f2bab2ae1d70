"""What the sidecar learns about a thread (sidecar.session.state, its second half): the
state machine, its journal replay, and the budget rules. Pure: no files, no
processes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sidecar.session.state import (
    DEFAULT_CONTEXT_WINDOW,
    AdditionSent,
    BootstrapFailed,
    Bootstrapped,
    Journal,
    Learned,
    LearnedMachine,
    MaintainedOnOpening,
    Restored,
    SessionChanged,
    ToolsGiven,
    WindowReported,
    addition_digest,
    replay,
    restore,
    token_budget,
)
from sidecar.store.learned import LearnedEntry as E

T = "thread-a"

events = st.one_of(
    st.builds(WindowReported, st.integers(min_value=-5, max_value=400_000)),
    st.builds(ToolsGiven, st.frozensets(st.sampled_from(["exec", "message", "memory_search", "web_fetch"]))),
    st.just(Bootstrapped()),
    st.just(BootstrapFailed()),
    st.just(MaintainedOnOpening()),
    st.builds(AdditionSent, st.one_of(st.none(), st.sampled_from(["d1", "d2"]))),
)


def test_a_new_fact_is_journaled_and_a_repeated_one_is_not():
    m = LearnedMachine(T)
    assert m.handle(WindowReported(258_400)) == [Journal(E(T, window=258_400))]
    assert m.handle(WindowReported(258_400)) == []  # Codex reports it on every turn: no write
    assert m.handle(ToolsGiven(frozenset({"b", "a"}))) == [Journal(E(T, tools=("a", "b")))]
    assert m.handle(ToolsGiven(frozenset({"a", "b"}))) == []
    assert m.handle(Bootstrapped()) == [Journal(E(T, bootstrapped=True))]
    assert m.handle(Bootstrapped()) == []
    assert m.state == Learned(window=258_400, tools=frozenset({"a", "b"}), bootstrapped=True, opened_here=True)


def test_a_window_that_is_no_window_is_ignored():
    m = LearnedMachine(T)
    assert m.handle(WindowReported(0)) == [] and m.handle(WindowReported(-1)) == []
    assert m.state.window is None


def test_bootstrap_runs_once_a_session_and_its_maintenance_once_a_process():
    m = LearnedMachine(T)
    assert m.opening_step(had_history=False) is None  # the engine follows the session from its first turn
    assert m.opening_step(had_history=True) == "bootstrap"
    assert m.handle(BootstrapFailed()) == []  # not journaled: the next process tries again
    assert m.opening_step(had_history=True) is None  # ...but not this one
    again = LearnedMachine(T, replay([], T))
    assert again.opening_step(had_history=True) == "bootstrap"
    journal = [a.entry for a in again.handle(Bootstrapped())]
    assert again.opening_step(had_history=True) is None
    later = LearnedMachine(T, replay(journal, T))  # a later process
    assert later.opening_step(had_history=True) == "maintain"  # bootstrap maintenance only
    assert later.handle(MaintainedOnOpening()) == []
    assert later.opening_step(had_history=True) is None


def test_restored_facts_fill_what_this_process_does_not_know_yet():
    m = LearnedMachine(T)
    m.handle(ToolsGiven(frozenset({"new"})))  # learned here before the journal was read
    m.handle(Restored(Learned(window=100_000, tools=frozenset({"old"}), bootstrapped=True)))
    assert m.state == Learned(window=100_000, tools=frozenset({"new"}), bootstrapped=True)


def test_a_thread_s_own_journal_does_not_bootstrap_another_session():
    # The thread was a session of its own (its journal says that session
    # was bootstrapped); now it belongs to another one: its tools, the
    # addition its history carries and the window come along, the bootstrap
    # is the new session's.
    own = [E(T, tools=("message",)), E(T, bootstrapped=True), E(T, addition="d1"), E(T, window=100_000)]
    assert restore(own, [], T) == Learned(window=100_000, tools=frozenset({"message"}), addition="d1")
    assert restore(own, [E("t9", bootstrapped=True)], T).bootstrapped
    assert LearnedMachine(T, restore(own, [], T)).opening_step(had_history=True) == "bootstrap"


def test_a_thread_that_changes_session_opens_the_new_one():
    m = LearnedMachine(T)
    m.handle(ToolsGiven(frozenset({"message"})))
    m.handle(AdditionSent("d1"))
    m.handle(Bootstrapped())  # as a session of its own, in this process
    assert m.opening_step(had_history=True) is None
    assert m.handle(SessionChanged(Learned(window=100_000))) == []
    assert m.state == Learned(window=100_000, tools=frozenset({"message"}), addition="d1")
    assert m.opening_step(had_history=True) == "bootstrap"  # the new session's, once
    m.handle(SessionChanged(Learned(bootstrapped=True)))
    assert m.opening_step(had_history=True) == "maintain"


def test_replay_takes_the_sessions_window_and_this_threads_tools():
    entries = [
        E("old", window=128_000),
        E("old", tools=("x",)),
        E("old", bootstrapped=True),
        E(T, tools=("y",)),
        E("old", window=258_400),
        E(T, window=0),  # not a window
    ]
    assert replay(entries, T) == Learned(window=258_400, tools=frozenset({"y"}), bootstrapped=True)
    # A thread new to the session (OpenClaw moved it to a new Codex thread):
    # the session's window and bootstrap, no tools of its own yet.
    assert replay(entries, "new") == Learned(window=258_400, tools=None, bootstrapped=True)


@given(st.lists(events, max_size=30))
def test_replaying_the_journal_gives_back_the_state(evs):
    """Whatever happened, a fresh process reading the journal the machine
    asked for knows what this one knew (what is never journaled aside)."""
    m = LearnedMachine(T)
    journal = [a.entry for e in evs for a in m.handle(e)]
    restored = replay(journal, T)
    assert restored.window == m.state.window
    assert restored.tools == m.state.tools
    assert restored.bootstrapped == m.state.bootstrapped
    assert restored.addition == m.state.addition


@given(st.lists(events, max_size=30))
def test_each_entry_records_a_change(evs):
    m = LearnedMachine(T)
    for e in evs:
        before = m.state
        actions = m.handle(e)
        assert bool(actions) == ((before.window, before.tools, before.bootstrapped, before.addition) != (m.state.window, m.state.tools, m.state.bootstrapped, m.state.addition))


def test_the_addition_a_thread_carries_is_journaled_as_a_digest_and_stays_with_its_thread():
    m = LearnedMachine(T)
    digest = addition_digest("  Prefer metric units.\n")
    assert digest == addition_digest("Prefer metric units.") and "metric" not in digest  # no prompt text on disk
    journal = [a.entry for a in m.handle(AdditionSent(digest))]
    assert journal == [E(T, addition=digest)]
    assert m.handle(AdditionSent(digest)) == []  # sent again unchanged: nothing to write
    assert replay(journal, T).addition == digest  # a later process knows the thread has it
    assert replay(journal, "new").addition is None  # a new Codex thread of the session does not
    journal += [a.entry for a in m.handle(AdditionSent(None))]  # a revert took it
    assert replay(journal, T).addition is None


# ---------------------------------------------------------------- budget


def test_the_default_budget_is_the_window_minus_the_reserve():
    assert token_budget(258_400) == 238_400
    assert token_budget(258_400, reserve=0) == 258_400
    assert token_budget(None) == DEFAULT_CONTEXT_WINDOW - 20_000  # nothing known yet: still a number
    assert token_budget(258_400, explicit=50_000) == 50_000  # an explicit budget wins
    assert token_budget(258_400, explicit=1_000_000) == 1_000_000  # even above the window: the user's choice
    assert token_budget(16_000) == 8_000  # too small for the reserve: OpenClaw's floor
    assert token_budget(1) == 1


@given(
    window=st.one_of(st.none(), st.integers(min_value=1, max_value=10_000_000)),
    reserve=st.integers(min_value=0, max_value=1_000_000),
)
def test_the_default_budget_is_a_number_within_the_window_and_never_above_window_minus_reserve(window, reserve):
    budget = token_budget(window, reserve=reserve)
    known = window if window is not None else DEFAULT_CONTEXT_WINDOW
    assert isinstance(budget, int) and 1 <= budget <= known
    floor = min(8_000, max(1, known // 2))
    if known - reserve >= floor:
        assert budget == known - reserve
    else:  # the reserve would leave less than the floor: the floor
        assert budget == floor


def test_a_window_the_thread_knows_joins_a_session_journal_without_one():
    machine = LearnedMachine("t1")
    assert machine.joined(Learned()) == []  # nothing known: nothing to tell
    machine.handle(WindowReported(258_400))
    assert machine.joined(Learned()) == [Journal(E("t1", window=258_400))]
    assert machine.joined(Learned(window=128_000)) == []  # the session's own window stays
