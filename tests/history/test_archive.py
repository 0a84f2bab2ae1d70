"""The archive of turns the sidecar's rebuilds took out of a Codex thread."""

from __future__ import annotations

import pytest

from sidecar.history.archive import (
    TurnArchive,
    archive_path,
    archived_turn,
    decode_cursor,
    encode_cursor,
    hidden_page,
    in_view,
    splice_turns,
    summary_items,
)


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


def test_a_client_revert_is_pending_from_its_intent_until_it_is_followed(tmp_path):
    archive = TurnArchive(tmp_path / "a.jsonl")
    assert archive.pending_forget() is None  # no file
    archive.append_turn({"id": "t1"})
    archive.begin_forget("t1", False)
    assert archive.pending_forget() == ("t1", False)
    archive.end_forget("t1")
    assert archive.pending_forget() is None
    archive.begin_forget("t2", True, in_flight=["t3"])
    archive.end_forget("t1")  # a stale completion does not close a later intent
    with open(archive.path, "ab") as f:
        f.write(b'{"forgot": "t')  # a kill mid-write of the completion
    assert archive.pending_forget() == ("t2", True)
    archive.append_turn({"id": "t3"})  # the turn in flight at the revert, finalised after it
    assert archive.pending_forget() == ("t2", True)
    archive.end_forget("t2")
    assert archive.pending_forget() is None
    archive.begin_forget("t4", False)
    archive.append_turn({"id": "t5"})  # the thread went on: too late to follow
    assert archive.pending_forget() is None


def test_a_client_revert_sent_is_pending_until_an_outcome_or_a_later_turn(tmp_path):
    archive = TurnArchive(tmp_path / "a.jsonl")
    assert archive.pending_revert() is None
    archive.append_turn({"id": "t1"})
    archive.begin_revert("t1", ["t2"])
    assert archive.pending_revert() == ("t1", ["t2"])
    archive.append_turn({"id": "t2"})  # in flight when it was sent
    assert archive.pending_revert() == ("t1", ["t2"])
    archive.begin_forget("t1", False)  # answered
    assert archive.pending_revert() is None
    archive.begin_revert("t2")
    archive.revert_refused("t2")
    assert archive.pending_revert() is None
    archive.begin_revert("t2")
    archive.append_turn({"id": "t3"})  # the thread went on
    assert archive.pending_revert() is None
    assert archive.turn_order() == ["t1", "t2", "t3"]


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


def full(tid: str, *types: str) -> dict:
    return {"id": tid, "status": "completed", "itemsView": "full", "items": [{"type": t, "id": f"{tid}-{n}"} for n, t in enumerate(types)]}


def test_summary_keeps_the_user_messages_and_the_last_agent_message():
    turn_ = full("t", "userMessage", "agentMessage", "commandExecution", "reasoning", "agentMessage")
    assert [i["id"] for i in summary_items(turn_["items"])] == ["t-0", "t-4"]
    assert summary_items(full("c", "contextCompaction")["items"]) == []
    assert summary_items(full("f", "userMessage")["items"]) == [{"type": "userMessage", "id": "f-0"}]
    assert in_view(turn_, "full") is turn_
    assert in_view(turn_, "notLoaded") == {**turn_, "items": [], "itemsView": "notLoaded"}
    assert in_view(turn_, None)["itemsView"] == "summary" and len(in_view(turn_, None)["items"]) == 2


def test_cursors_round_trip_and_codex_s_own_are_not_ours():
    assert decode_cursor(encode_cursor("desc", 3)) == ("desc", 3)
    assert decode_cursor('{"requestedThreadId":"x","rolloutOrdinal":14}') is None
    assert decode_cursor(None) is None
    assert decode_cursor("codex-sidecar:turns:sideways:1") is None
    assert decode_cursor("codex-sidecar:turns:asc:-1") is None


@pytest.mark.parametrize("limit", [1, 2, 3, 5, None])
def test_paging_the_hidden_turns_covers_each_once_in_order(limit):
    hidden = [full(f"t{n}") for n in range(1, 6)]
    seen, cursor = [], encode_cursor("desc", len(hidden))
    while cursor is not None:
        kind, position = decode_cursor(cursor)
        page, cursor = hidden_page(hidden, kind, position, limit)
        assert len(page) <= (limit or len(hidden))
        seen += [t["id"] for t in page]
    assert seen == ["t5", "t4", "t3", "t2", "t1"]
    seen, cursor = [], encode_cursor("asc", 0)
    while decode_cursor(cursor)[0] == "asc":
        kind, position = decode_cursor(cursor)
        page, cursor = hidden_page(hidden, kind, position, limit)
        seen += [t["id"] for t in page]
    assert seen == ["t1", "t2", "t3", "t4", "t5"]
    assert decode_cursor(cursor) == ("codex", 0)  # then Codex's own turns from their start


@pytest.mark.parametrize("limit", [1, 2, 3, None])
@pytest.mark.parametrize("kind", ["asc", "desc"])
def test_a_page_s_backwards_cursor_starts_with_its_first_turn_and_goes_the_other_way(kind, limit):
    from sidecar.history.archive import backwards_cursor

    hidden = [full(f"t{n}") for n in range(1, 6)]
    ids = [t["id"] for t in hidden]
    for position in range(0, 6):
        page, _ = hidden_page(hidden, kind, position, limit)
        back = backwards_cursor(len(hidden), kind, position, page)
        if not page:
            assert back is None
            continue
        back_kind, back_position = decode_cursor(back)
        assert back_kind == ("desc" if kind == "asc" else "asc")
        back_page, _ = hidden_page(hidden, back_kind, back_position, None)
        first = ids.index(page[0]["id"])
        expected = ids[: first + 1][::-1] if back_kind == "desc" else ids[first:]
        assert [t["id"] for t in back_page] == expected, (kind, position, limit)


def test_a_wrapped_codex_cursor_round_trips_and_a_damaged_one_is_not_ours():
    from sidecar.history.archive import unwrap_cursor, wrap_cursor

    codex = '{"requestedThreadId":"01a2","rolloutOrdinal":23,"includeAnchor":false,"scope":{"kind":"turns"}}'
    for args in ((codex, "turn-7", False), ("x", "é✓", True)):
        wrapped = wrap_cursor(*args)
        assert wrapped.startswith("codex-sidecar:turns:wrap:") and codex not in wrapped
        assert unwrap_cursor(wrapped) == args
        assert wrap_cursor(*args) == wrapped  # deterministic
        assert decode_cursor(wrapped) is None  # not one of the archive's own positions
        assert unwrap_cursor(wrapped, "items") is None  # a turns cursor is not an items one
    assert unwrap_cursor(wrap_cursor(codex, "i1", False, "items"), "items") == (codex, "i1", False)
    for damaged in (codex, None, 3, "codex-sidecar:turns:wrap:", "codex-sidecar:turns:wrap:!!!", "codex-sidecar:turns:wrap:WzFd"):
        assert unwrap_cursor(damaged) is None


@pytest.mark.parametrize("inclusive", [False, True])
@pytest.mark.parametrize("kind", ["asc", "desc"])
def test_an_anchored_position_pages_on_from_its_anchor(kind, inclusive):
    from sidecar.history.archive import anchored_position

    hidden = [full(f"t{n}") for n in range(1, 6)]
    ids = [t["id"] for t in hidden]
    for at in range(len(ids)):
        page, _ = hidden_page(hidden, kind, anchored_position(at, kind, inclusive), None)
        if kind == "asc":
            expected = ids[at:] if inclusive else ids[at + 1 :]
        else:
            expected = (ids[: at + 1] if inclusive else ids[:at])[::-1]
        assert [t["id"] for t in page] == expected, (kind, inclusive, at)


def test_append_record_creates_its_private_folder_once_and_appends_lines(tmp_path):
    import stat

    from sidecar.store.inspect import append_record, decode_records

    path = tmp_path / "state" / "inspect" / "thr.jsonl"
    append_record(path, {"n": 1})  # no folder yet: made, 0700, with the file 0600
    append_record(path, {"n": 2})
    assert decode_records(path.read_bytes()) == [{"n": 1}, {"n": 2}]
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("x")
    append_record(blocked / "inspect" / "thr.jsonl", {"n": 3})  # cannot be made: best effort, nothing raised
    assert blocked.read_text() == "x"


def test_a_rebuild_records_what_the_client_saw_and_a_later_mark_read_clears_the_unread(tmp_path):
    a = TurnArchive(archive_path(tmp_path, "thr"))
    assert a.shown() == {"unread": None, "path": None}
    for tid in ("t1", "t2", "t3"):
        a.append_turn(turn(tid))
    first = {"type": "turn", "turnId": "t1"}
    a.mark_dropped(["t1", "t2"], {"type": "turn", "turnId": "t1"}, "/h/rollout-thr.jsonl")
    a.mark_dropped(["t3"], first, "/h/rollout-thr_segment.jsonl")  # what a later rebuild saw
    assert a.shown() == {"unread": first, "path": "/h/rollout-thr.jsonl"}  # the thread's own path: the first
    a.mark_dropped(["t4"])  # not known: the position recorded before stands
    assert a.shown()["unread"] == first
    a.mark_read()
    assert a.shown() == {"unread": None, "path": "/h/rollout-thr.jsonl"}


def test_hidden_turns_hold_their_ids_not_their_items_and_read_back_whole(tmp_path):
    import tracemalloc

    a = TurnArchive(archive_path(tmp_path, "thr"))
    big = [{**turn(f"t{n}"), "items": [{"type": "agentMessage", "id": f"m{n}", "text": f"{n} " + "x" * 10_000}]} for n in range(200)]
    for t in big:
        a.append_turn(t)
    a.mark_dropped([t["id"] for t in big[:150]])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        hidden = a.hidden()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 150 * 400  # ids and places: 1.5 MB of items stay on disk
    a.append_turn(turn("later"))  # the file grows: what was hidden reads the same
    a.append_turn({"id": "t3", "status": "replayed"})
    assert hidden.ids == [f"t{n}" for n in range(150)] and len(hidden) == 150
    assert list(hidden) == big[:150] and hidden == big[:150]
    assert hidden[3] == big[3] and list(hidden[140:]) == big[140:150]
    assert splice_turns(hidden, big[149:]) == big
    assert splice_turns(hidden, big[:150]) is None
    assert list(hidden.without({"t0", "t1"})) == big[2:150]


def test_hidden_turns_whose_file_went_read_back_as_none(tmp_path):
    a = TurnArchive(archive_path(tmp_path, "thr"))
    a.append_turn(turn("t1"))
    a.mark_dropped(["t1"])
    hidden = a.hidden()
    a.path.unlink()
    assert hidden.ids == ["t1"] and list(hidden) == []
    assert splice_turns(hidden, [turn("t2")]) is None  # nothing to put back: Codex's answer as it is
