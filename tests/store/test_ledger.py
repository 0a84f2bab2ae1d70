"""sidecar.store.ledger: the ledger's journal, replayed."""

from __future__ import annotations

import os

from sidecar.store.ledger import COMPACT_AFTER, Ledger, LedgerState, ledger_path


def journal(tmp_path) -> Ledger:
    return Ledger(ledger_path(tmp_path, "thread-1"))


def test_turns_add_and_a_rebuild_resets(tmp_path):
    led = journal(tmp_path)
    led.turn("t1", [("a", 3), ("b", 4)], reset=True, turns=["t1"], rebuilds=0, force=False, epoch=None)
    led.turn("t2", [("c", 5)], reset=False, turns=None, rebuilds=0, force=False, epoch=None)
    state = journal(tmp_path).load()
    assert state.held == ["a", "b", "c"] and state.turns_since_rebuild == ["t1", "t2"]
    assert state.sizes == {"a": 3, "b": 4, "c": 5}
    led.rebuilding(0, None)
    led.turn("t3", [("s", 9), ("c", 5)], reset=True, turns=["t3"], rebuilds=1, force=False, epoch="e1")
    state = journal(tmp_path).load()
    assert state.held == ["s", "c"] and state.turns_since_rebuild == ["t3"]
    assert (state.rebuilds, state.force_rebuild, state.projected_epoch, state.rebuilding) == (1, False, "e1", False)


def test_a_rebuild_marker_left_last_means_the_thread_may_hold_only_its_framing(tmp_path):
    led = journal(tmp_path)
    led.turn("t1", [("a", 3)], reset=True, turns=["t1"], rebuilds=0, force=False, epoch=None)
    led.rebuilding(0, None)
    state = journal(tmp_path).load()
    assert state.rebuilding and state.held == [] and state.force_rebuild
    assert state.turns_since_rebuild == ["t1"], "Codex may still hold the turn: the revert goes before it"


def test_a_torn_last_line_is_skipped(tmp_path):
    led = journal(tmp_path)
    led.turn("t1", [("a", 3)], reset=True, turns=["t1"], rebuilds=0, force=False, epoch=None)
    with open(led.path, "ab") as f:
        f.write(b'{"turn":"t2","add":[["b"')  # killed mid-write
    assert journal(tmp_path).load().held == ["a"]
    journal(tmp_path).turn("t3", [("c", 1)], reset=False, turns=None, rebuilds=0, force=False, epoch=None)
    assert journal(tmp_path).load().held == ["a", "c"]


def test_the_journal_is_compacted_so_its_size_is_bounded_by_the_ledger(tmp_path):
    led = journal(tmp_path)
    led.turn("t0", [("f0", 1)], reset=True, turns=["t0"], rebuilds=0, force=False, epoch=None)
    sizes = []
    for n in range(1, 3 * COMPACT_AFTER):
        if n % 10 == 0:  # a sliding window: every tenth turn rebuilds to the last few
            led.turn(f"t{n}", [(f"f{k}", 1) for k in range(n - 4, n + 1)], reset=True, turns=[f"t{n}"], rebuilds=n // 10, force=False, epoch=None)
        else:
            led.turn(f"t{n}", [(f"f{n}", 1)], reset=False, turns=None, rebuilds=n // 10, force=False, epoch=None)
        sizes.append(os.path.getsize(led.path))
    assert max(sizes[-COMPACT_AFTER:]) <= max(sizes[:COMPACT_AFTER]) * 1.1, "the file does not grow with the thread's age"
    state = journal(tmp_path).load()
    last = 3 * COMPACT_AFTER - 1
    rebuilt_at = last // 10 * 10
    assert state.held == [f"f{k}" for k in range(rebuilt_at - 4, rebuilt_at + 1)] + [f"f{k}" for k in range(rebuilt_at + 1, last + 1)]
    assert state.rebuilds == last // 10


def test_after_turn_replays_up_to_that_turn(tmp_path):
    led = journal(tmp_path)
    led.turn("t1", [("a", 1)], reset=True, turns=["t1"], rebuilds=0, force=False, epoch=None)
    led.turn("t2", [("b", 1)], reset=False, turns=None, rebuilds=0, force=True, epoch="e")
    led.turn("t3", [("c", 1)], reset=False, turns=None, rebuilds=0, force=False, epoch="e")
    at = journal(tmp_path).after_turn("t2")
    assert at is not None and at.held == ["a", "b"] and at.force_rebuild and at.projected_epoch == "e"
    assert journal(tmp_path).after_turn("t9") is None


def test_a_reset_writes_the_whole_state(tmp_path):
    led = journal(tmp_path)
    led.turn("t1", [("a", 1), ("b", 2)], reset=True, turns=["t1"], rebuilds=2, force=False, epoch=None)
    led.reset(LedgerState(held=None, sizes={}, turns_since_rebuild=None, rebuilds=2, force_rebuild=True), clientRevert="t1")
    state = journal(tmp_path).load()
    assert state.held is None and state.force_rebuild and state.rebuilds == 2


def test_an_unusable_thread_id_is_refused(tmp_path):
    import pytest

    with pytest.raises(ValueError):
        ledger_path(tmp_path, "../escape")


def test_a_missing_journal_is_an_empty_ledger(tmp_path):
    assert journal(tmp_path).load() == LedgerState()
