"""What the client sees of a rebuilt thread's read state and rollout path
(``ArchivedTurns``, without processes): Codex's, about the thread it holds
since the rebuild, becomes what the client saw before it."""

from __future__ import annotations

import json
from typing import Any

from protocol import parse
from sidecar.history.archive import TurnArchive, archive_path
from sidecar.history.reads import ArchivedTurns
from sidecar.relay import Message, PendingRequest

X = "01a20000-0000-7000-8000-000000000001"
ORIGINAL = "/h/sessions/2026/11/27/rollout-t0-X.jsonl"
SEGMENT = "/h/sessions/2026/11/27/rollout-t1-X_seg.jsonl"


class Proxy:
    def __init__(self) -> None:
        self.spawned: list = []

    def spawn(self, fn, *args) -> None:
        self.spawned.append((fn, args))


def message(obj) -> Message:
    line = json.dumps(obj, separators=(",", ":")).encode()
    return Message(parse(line), line)


def unread(turn_id):
    return {"type": "turn", "turnId": turn_id}


def rebuilt(tmp_path) -> tuple[ArchivedTurns, Proxy]:
    """t1, t2 archived and dropped by a rebuild that saw t1 unread and the original path."""
    archive = TurnArchive(archive_path(tmp_path, X))
    for tid in ("t1", "t2"):
        archive.append_turn({"id": tid, "status": "completed", "items": []})
    archive.mark_dropped(["t1", "t2"], unread("t1"), ORIGINAL)
    proxy = Proxy()
    return ArchivedTurns(proxy, tmp_path), proxy  # type: ignore[arg-type]


def shown(hook: Any, m: Message, *args: Any) -> bytes | None:
    """What ``hook`` makes of ``m`` on the wire: None when it passes unchanged."""
    original = m.line
    assert hook(m, *args) is None
    out = m.wire()
    return None if out is original else out


def state_changed(first) -> Message:
    return message({"method": "thread/readState/changed", "params": {"threadId": X, "readState": {"firstUnread": first, "revision": "r"}}})


def test_codex_s_first_unread_turn_after_a_rebuild_shows_the_archived_one_the_client_left_unread(tmp_path):
    reads, _ = rebuilt(tmp_path)
    got = shown(reads.on_read_state, state_changed(unread("t3")))  # Codex: the first turn since the rebuild
    assert got is not None
    assert json.loads(got)["params"]["readState"] == {"firstUnread": unread("t1"), "revision": "r"}
    assert reads.unread_to_record(X) == unread("t1")  # what the next rebuild records


def test_a_thread_marked_read_stays_read_and_the_archive_forgets_the_unread_turn(tmp_path):
    reads, proxy = rebuilt(tmp_path)
    assert shown(reads.on_read_state, state_changed(None)) is None  # Codex's "read" passes
    assert len(proxy.spawned) == 1  # the mark persisted in the background
    fn, args = proxy.spawned[0]
    args[0]()
    assert TurnArchive(archive_path(tmp_path, X)).shown()["unread"] is None
    assert shown(reads.on_read_state, state_changed(unread("t4"))) is None  # the next unread turn is Codex's


def test_an_unread_turn_no_longer_archived_is_not_shown(tmp_path):
    reads, _ = rebuilt(tmp_path)
    TurnArchive(archive_path(tmp_path, X)).forget_from("t1")  # the client reverted its thread before t1
    reads.forget(X)
    assert shown(reads.on_read_state, state_changed(unread("t3"))) is None


def test_a_read_and_a_resume_of_a_rebuilt_thread_show_its_own_path_and_unread_turn(tmp_path):
    reads, _ = rebuilt(tmp_path)
    thread = {"id": X, "path": SEGMENT, "preview": "p", "turns": []}
    msg = message({"id": 3, "result": {"thread": thread, "readState": {"firstUnread": unread("t3"), "revision": "r"}}})
    got = json.loads(shown(reads.on_thread_read_response, msg, PendingRequest(3, "thread/read", 3)))
    assert got["result"]["thread"]["path"] == ORIGINAL
    assert got["result"]["readState"]["firstUnread"] == unread("t1")
    msg = message({"id": 4, "result": {"thread": {**thread, "path": "/h/archived_sessions/rollout-t1-X_seg.jsonl"}, "serviceTier": None}})
    got = json.loads(shown(lambda m: reads.splice_resume(m, m.result(), m.result()["thread"], {"threadId": X, "excludeTurns": True}), msg))
    assert got["result"]["thread"]["path"] == "/h/archived_sessions/rollout-t0-X.jsonl"  # archived: beside Codex's


def test_a_thread_no_rebuild_touched_passes_as_codex_sent_it(tmp_path):
    reads = ArchivedTurns(Proxy(), tmp_path)  # type: ignore[arg-type]
    assert shown(reads.on_read_state, state_changed(unread("t1"))) is None
    msg = message({"id": 3, "result": {"thread": {"id": X, "path": SEGMENT, "turns": []}, "readState": {"firstUnread": unread("t1"), "revision": "r"}}})
    assert shown(reads.on_thread_read_response, msg, PendingRequest(3, "thread/read", 3)) is None
