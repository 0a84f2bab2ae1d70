"""The archive of turns the sidecar's rebuilds took out of a Codex thread."""

from __future__ import annotations

import pytest

from sidecar.archive import TurnArchive, archive_path, archived_turn, splice_turns


def turn(tid: str) -> dict:
    return {"id": tid, "status": "completed", "items": [{"type": "agentMessage", "id": f"m-{tid}"}], "itemsView": "summary"}


def test_archived_turn_carries_the_full_items_and_keeps_every_other_field():
    full = [{"type": "userMessage", "id": "u"}, {"type": "agentMessage", "id": "a"}]
    t = {"id": "t", "status": "completed", "durationMs": 5, "items": full[1:], "itemsView": "summary"}
    assert archived_turn(t, full) == {"id": "t", "status": "completed", "durationMs": 5, "items": full, "itemsView": "full"}
    assert archived_turn(t, []) == t  # no item/completed seen: the turn as Codex sent it


def test_dropped_turns_are_hidden_in_order_and_a_replayed_turn_keeps_its_first_copy(tmp_path):
    a = TurnArchive(archive_path(tmp_path, "thr"))
    for tid in ("t1", "t2", "t3"):
        a.append_turn(turn(tid))
    a.append_turn({**turn("t1"), "status": "replayed"})
    assert a.hidden() == []
    a.mark_dropped(["t2", "t1"])
    assert [t["id"] for t in a.hidden()] == ["t1", "t2"]
    assert a.hidden()[0]["status"] == "completed"
    a.mark_dropped(None)  # everything Codex should still hold: t3
    assert [t["id"] for t in a.hidden()] == ["t1", "t2", "t3"]


def test_turns_the_client_reverted_never_come_back(tmp_path):
    a = TurnArchive(archive_path(tmp_path, "thr"))
    for tid in ("t1", "t2", "t3", "t4"):
        a.append_turn(turn(tid))
    a.mark_dropped(["t1"])
    assert a.forget_from("t3") == ["t3", "t4"]  # the client reverted before t3
    assert a.forget_from("nope") == []
    a.mark_dropped(None)  # the next rebuild drops what Codex still holds: t2 only
    assert [t["id"] for t in a.hidden()] == ["t1", "t2"]


def test_splice_adds_only_what_codex_no_longer_has():
    hidden = [turn("t1"), turn("t2")]
    assert splice_turns(hidden, [turn("t3")]) == [turn("t1"), turn("t2"), turn("t3")]
    # A turn marked dropped that Codex still has (the revert failed) is not shown twice.
    assert splice_turns(hidden, [turn("t2"), turn("t3")]) == [turn("t1"), turn("t2"), turn("t3")]
    assert splice_turns(hidden, [turn("t1"), turn("t2")]) is None
    assert splice_turns([], [turn("t1")]) is None


def test_a_thread_id_cannot_escape_the_state_dir(tmp_path):
    with pytest.raises(ValueError):
        archive_path(tmp_path, "../elsewhere")
