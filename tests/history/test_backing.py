"""sidecar.history.backing: the map of client threads to the Codex threads behind them,
and the thread-id map at the child's edge (bytes in, bytes out, no I/O but the
map's own files)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.history.backing import BackingThreads
from sidecar.methods import METHODS
from sidecar.rows import thread_id_keys

X = "01a20000-0000-7000-8000-000000000001"  # the client's thread
B1 = "01a20000-0000-7000-8000-0000000000b1"
B2 = "01a20000-0000-7000-8000-0000000000b2"
OTHER = "01a20000-0000-7000-8000-00000000000f"  # another client thread, never switched
TURN = "01a20000-0000-7000-8000-0000000000aa"


def line(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def switched(tmp_path, times: int = 1) -> BackingThreads:
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    alias = b.remember_start(X, {"cwd": "/w", "developerInstructions": "D"})
    for spare in (B1, B2)[:times]:
        b.note_spare(X, spare)
        b.switch(X)
        b.confirm(X)  # Codex accepted the switch turn
        b.save(alias)
    return b


def test_nothing_switched_passes_every_frame_as_the_same_object(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(X, {"cwd": "/w"})
    frame = line({"method": "turn/started", "params": {"threadId": X, "turn": {"id": TURN}}})
    assert b.to_codex(frame) is frame
    assert b.notification(frame) is frame
    assert b.response(frame, "thread/read") is frame
    assert not b.active
    assert not b.maps_to_codex  # the relay does not even ask


def test_the_edge_says_it_maps_requests_exactly_while_a_thread_is_switched(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(X, {"cwd": "/w"})
    b.note_spare(X, B1)
    assert not b.maps_to_codex  # a spare alone maps nothing
    b.switch(X)
    assert b.maps_to_codex
    b.rollback(X)  # Codex never accepted the switch turn
    assert not b.maps_to_codex
    assert switched(tmp_path / "later").maps_to_codex
    assert BackingThreads(tmp_path / "later", thread_id_keys(METHODS)).maps_to_codex  # a switch an earlier process saved


def test_a_switch_maps_both_ways_and_hides_the_retired_thread(tmp_path):
    b = switched(tmp_path)
    request = line({"id": 5, "method": "turn/start", "params": {"threadId": X, "input": [{"type": "text", "text": f"about {X}"}]}})
    sent = json.loads(b.to_codex(request))
    assert sent["params"]["threadId"] == B1
    assert sent["params"]["input"][0]["text"] == f"about {X}"  # inside a longer string: left alone
    note = line({"method": "item/completed", "params": {"threadId": B1, "turnId": TURN, "item": {"id": "i1"}}})
    assert json.loads(b.notification(note))["params"]["threadId"] == X
    # Codex's own notifications about the retired thread (the client's id, now an old Codex thread):
    assert b.notification(line({"method": "thread/closed", "params": {"threadId": X}})) is None
    assert b.notification(line({"method": "thread/status/changed", "params": {"threadId": X, "status": {"type": "notLoaded"}}})) is None
    # Another thread's frames are untouched.
    other = line({"method": "turn/started", "params": {"threadId": OTHER}})
    assert b.notification(other) is other
    assert b.dropped == 2


def test_responses_map_current_and_retired_ids_and_lists_lose_hidden_entries(tmp_path):
    b = switched(tmp_path, times=2)  # X -> B1 -> B2
    late = line({"id": 3, "result": {"thread": {"id": B1, "turns": []}}})  # a read sent before the last switch
    assert json.loads(b.response(late, "thread/read"))["result"]["thread"]["id"] == X
    listing = line({"id": 4, "result": {"data": [{"id": B2, "preview": "p6"}, {"id": B1}, {"id": X}, {"id": OTHER}], "nextCursor": None}})
    got = json.loads(b.response(listing, "thread/list"))["result"]["data"]
    assert [e["id"] for e in got] == [X, OTHER]
    loaded = line({"id": 6, "result": {"data": [X, B2, OTHER], "nextCursor": None}})
    assert json.loads(b.response(loaded, "thread/loaded/list"))["result"]["data"] == [X, OTHER]


def test_a_spare_is_hidden_from_the_moment_it_is_noted(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(X, {})
    b.note_spare(X, B1)
    assert b.notification(line({"method": "thread/started", "params": {"thread": {"id": B1}}})) is None
    assert b.to_codex(line({"params": {"threadId": X}})) == line({"params": {"threadId": X}})  # not switched yet


def test_unattributed_notifications_are_dropped_only_while_a_spare_starts(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    warning = line({"method": "configWarning", "params": {"summary": "no bubblewrap"}})
    assert b.notification(warning) is warning
    b.spare_starts = 1
    assert b.notification(warning) is None
    assert b.notification(line({"method": "remoteControl/status/changed", "params": {"status": "disabled"}})) is None


def test_the_map_survives_a_restart_and_a_spare_from_before_it_is_retired(tmp_path):
    b = switched(tmp_path)
    b.note_spare(X, B2)
    b.save(b.aliases[X])
    again = BackingThreads(tmp_path, thread_id_keys(METHODS))
    alias = again.aliases[X]
    assert alias.current == B1
    assert alias.spare is None and alias.retired == [X, B2]  # not loaded in the new process's Codex
    assert alias.start == {"cwd": "/w", "developerInstructions": "D"}
    assert json.loads(again.to_codex(line({"params": {"threadId": X}})))["params"]["threadId"] == B1
    assert again.notification(line({"method": "thread/started", "params": {"thread": {"id": B2}}})) is None


def test_an_unloaded_thread_never_switched_is_not_held_and_a_resume_reads_it_back(tmp_path):
    b = switched(tmp_path)  # X is switched: its ids route
    start = {"cwd": "/o", "dynamicTools": [{"name": "t", "description": "d" * 1000}]}
    other = b.remember_start(OTHER, start)
    other.name = "named"
    b.save(other)
    b.park(OTHER)
    b.park(X)
    assert OTHER not in b.aliases  # nothing of it held (its file keeps it)
    assert b.aliases[X].current == B1  # a switched one stays: frames about it still map
    assert json.loads(b.to_codex(line({"params": {"threadId": X}})))["params"]["threadId"] == B1
    frame = line({"method": "turn/started", "params": {"threadId": OTHER}})
    assert b.to_codex(frame) is frame and b.notification(frame) is frame
    again = b.alias(OTHER)  # the thread is resumed
    assert again is not None and again.start == start and again.name == "named"
    assert b.aliases[OTHER] is again
    # A new process holds only what routes, and reads the rest on demand.
    fresh = BackingThreads(tmp_path, thread_id_keys(METHODS))
    assert set(fresh.aliases) == {X}
    assert fresh.alias(OTHER).start == start
    assert fresh.alias("01a20000-0000-7000-8000-0000000000ee") is None  # no file: a thread started elsewhere


def test_an_unreadable_map_file_is_skipped(tmp_path):
    switched(tmp_path)
    (tmp_path / "backing" / f"{OTHER}.json").write_text('{"client": "torn')
    again = BackingThreads(tmp_path, thread_id_keys(METHODS))
    assert list(again.aliases) == [X]


def test_a_failed_save_is_undone(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(X, {})
    b.note_spare(X, B1)
    old, new = b.switch(X)
    b.unswitch(X, old, new)
    alias = b.aliases[X]
    assert (alias.current, alias.spare, alias.retired) == (X, B1, [])
    frame = line({"params": {"threadId": X}})
    assert b.to_codex(frame) == frame
    assert b.notification(line({"method": "turn/started", "params": {"threadId": X}})) is not None


def test_the_map_is_written_with_owner_only_permissions(tmp_path):
    b = switched(tmp_path)
    path = tmp_path / "backing" / f"{X}.json"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert not list((tmp_path / "backing").glob("*.tmp"))
    assert b.aliases[X].current == json.loads(path.read_text())["current"]


def test_a_switch_without_a_spare_is_refused(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(X, {})
    with pytest.raises(LookupError):
        b.switch(X)


@settings(max_examples=200, deadline=None)
@given(texts=st.lists(st.text(max_size=30), max_size=5), ids=st.lists(st.sampled_from([X, B1, OTHER, TURN]), max_size=6))
def test_to_codex_then_back_is_the_identity_for_frames_about_the_client(tmp_path_factory, texts, ids):
    b = switched(tmp_path_factory.mktemp("m"))
    body = {"threadId": X, "thread": {"id": X, "forkedFromId": None}, "texts": texts, "ids": ids}
    frame = line({"method": "item/completed", "params": body})
    there = json.loads(b.to_codex(frame))["params"]
    assert there["threadId"] == there["thread"]["id"] == B1  # routing goes to the current thread
    assert there["texts"] == texts and there["ids"] == ids  # anything else is left as it was
    back = b.response(b.to_codex(frame), "thread/read")
    assert json.loads(back) == json.loads(frame)


def test_a_switch_whose_turn_codex_never_accepted_is_rolled_back_at_load(tmp_path):
    b = switched(tmp_path)  # X -> B1, confirmed
    b.note_spare(X, B2)
    b.switch(X)  # B1 -> B2, then a kill before Codex accepted the turn
    b.save(b.aliases[X])
    again = BackingThreads(tmp_path, thread_id_keys(METHODS))
    alias = again.aliases[X]
    assert (alias.current, alias.pending) == (B1, False)
    assert alias.retired == [X, B2]  # the abandoned thread stays hidden
    assert again.rolled_back == {X}
    assert json.loads(again.to_codex(line({"params": {"threadId": X}})))["params"]["threadId"] == B1
    assert json.loads(again.notification(line({"method": "turn/started", "params": {"threadId": B1}})))["params"]["threadId"] == X
    assert again.notification(line({"method": "thread/started", "params": {"thread": {"id": B2}}})) is None


def test_rolling_back_the_first_switch_makes_the_client_thread_its_own_again(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(X, {})
    b.note_spare(X, B1)
    b.switch(X)
    assert b.rollback(X)
    frame = line({"method": "turn/started", "params": {"threadId": X}})
    assert b.to_codex(frame) == frame
    assert b.notification(frame) == frame  # no longer hidden
    assert b.notification(line({"method": "thread/closed", "params": {"threadId": B1}})) is None
    assert not b.rollback(X)  # nothing pending


def test_text_that_happens_to_be_a_thread_id_is_neither_mapped_nor_dropped(tmp_path):
    b = switched(tmp_path)
    reply = line({"method": "item/completed", "params": {"threadId": B1, "item": {"type": "agentMessage", "text": X}}})
    got = b.notification(reply)
    assert got is not None
    assert json.loads(got)["params"] == {"threadId": X, "item": {"type": "agentMessage", "text": X}}
    tool_output = line({"id": 9, "result": {"contentItems": [{"type": "inputText", "text": X}]}})
    assert b.to_codex(tool_output) == tool_output


def test_spaced_json_from_a_client_is_mapped_too(tmp_path):
    b = switched(tmp_path)
    spaced = f'{{"id": 1, "method": "turn/start", "params": {{"threadId" : "{X}"}}}}'.encode()
    assert json.loads(b.to_codex(spaced))["params"]["threadId"] == B1


def test_an_older_snapshot_never_overwrites_a_newer_one(tmp_path):
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    alias = b.remember_start(X, {})
    early = b.snapshot(alias)
    b.note_spare(X, B1)
    b.switch(X)
    late = b.snapshot(alias)
    b.write(*late)
    b.write(*early)  # a slower worker, done last
    assert json.loads((tmp_path / "backing" / f"{X}.json").read_text())["current"] == B1


def test_a_listing_s_read_states_are_keyed_by_the_client_thread(tmp_path):
    b = switched(tmp_path)
    listing = line({"id": 4, "result": {"data": [{"id": B1}, {"id": X}], "readStates": {B1: {"unread": 1}, X: {"unread": 0}, OTHER: {}}}})
    got = json.loads(b.response(listing, "thread/list"))["result"]
    assert [e["id"] for e in got["data"]] == [X]
    assert got["readStates"] == {X: {"unread": 1}, OTHER: {}}


def test_a_switched_thread_s_read_resume_and_listing_show_the_client_s_preview_and_path(tmp_path):
    """Codex shows the backing thread's first prompt (the rebuild's) and
    rollout file; the client sees its own thread's, as recorded before the
    first switch, also after a restart."""
    b = switched(tmp_path)
    own = {"preview": "first prompt", "createdAt": 100, "path": "/h/sessions/2026/11/27/rollout-t0-X.jsonl"}
    b.aliases[X].listed = own
    b.save(b.aliases[X])
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    backing = {"id": B1, "preview": "the rebuild's prompt", "createdAt": 200, "path": "/h/sessions/2026/11/27/rollout-t1-B1.jsonl", "turns": []}
    for method in ("thread/read", "thread/resume", "thread/unarchive"):
        got = json.loads(b.response(line({"id": 7, "result": {"thread": backing, "serviceTier": None}}), method))["result"]
        assert got["thread"] == {**backing, **own, "id": X}, method
        assert got["serviceTier"] is None
    archived = {**backing, "path": "/h/archived_sessions/rollout-t1-B1.jsonl"}
    got = json.loads(b.response(line({"id": 8, "result": {"data": [archived], "nextCursor": None}}), "thread/list"))["result"]["data"]
    assert got == [{**archived, **own, "id": X, "path": "/h/archived_sessions/rollout-t0-X.jsonl"}]
    # Another thread's answer, and the client's own before any switch, are Codex's.
    other = line({"id": 9, "result": {"thread": {**backing, "id": OTHER}}})
    assert json.loads(b.response(other, "thread/read"))["result"]["thread"]["path"] == backing["path"]
