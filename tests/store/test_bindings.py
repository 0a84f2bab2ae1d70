"""sidecar.store.bindings: each Codex thread's session, on disk."""

from __future__ import annotations

import os
import stat

import pytest

from sidecar.store import bindings
from sidecar.store.bindings import Binding

RID = "codex-" + "ab12" * 10


def test_a_saved_binding_is_found_again_by_a_later_process(tmp_path):
    bindings.save(tmp_path, Binding("t1", RID, "relay"))
    assert bindings.load(tmp_path, "t1") == Binding("t1", RID, "relay")
    assert bindings.load(tmp_path, "t2") is None


def test_a_binding_is_replaced_whole_and_private(tmp_path):
    bindings.save(tmp_path, Binding("t1", "t0", "continuity"))
    bindings.save(tmp_path, Binding("t1", RID, "relay"))
    assert bindings.load(tmp_path, "t1") == Binding("t1", RID, "relay")
    path = bindings.binding_path(tmp_path, "t1")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert sorted(p.name for p in path.parent.iterdir()) == ["t1.json"]  # no temporary file left


@pytest.mark.parametrize(
    "content",
    [b"", b'{"thread":"t1","ses', b"[1,2]", b'{"thread":"other","session":"s"}', b'{"thread":"t1","session":"../etc"}', b'{"thread":"t1"}'],
    ids=["empty", "torn", "not-an-object", "another-thread", "unsafe-session", "no-session"],
)
def test_an_unusable_binding_file_means_no_binding(tmp_path, content):
    path = bindings.binding_path(tmp_path, "t1")
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert bindings.load(tmp_path, "t1") is None


def test_an_unsafe_thread_id_is_refused(tmp_path):
    with pytest.raises(ValueError):
        bindings.save(tmp_path, Binding("../t1", RID, "relay"))
    assert bindings.load(tmp_path, "../t1") is None


def test_a_session_lists_its_threads_and_a_thread_names_its_session(tmp_path):
    bindings.save(tmp_path, Binding("t1", RID, "relay"))
    bindings.save(tmp_path, Binding("t2", RID, "relay"))
    bindings.save(tmp_path, Binding("t3", "codex-" + "cd34" * 10, "relay"))
    assert [b.thread for b in bindings.threads_of(tmp_path, RID)] == ["t1", "t2"]
    session, threads = bindings.session_threads(tmp_path, "t2")
    assert session == RID and [b.thread for b in threads] == ["t1", "t2"]
    assert bindings.session_threads(tmp_path, RID)[0] == RID


def test_a_session_that_began_as_a_plain_thread_lists_that_thread_first(tmp_path):
    inspect = tmp_path / "inspect" / "t0.jsonl"
    inspect.parent.mkdir()
    inspect.write_text('{"turnId":"u1"}\n')
    bindings.save(tmp_path, Binding("t5", "t0", "continuity"))
    session, threads = bindings.session_threads(tmp_path, "t5")
    assert session == "t0"
    assert [(b.thread, b.via) for b in threads] == [("t0", "thread"), ("t5", "continuity")]


# Files as the code of 2026-12 wrote them, before the records were typed.
TODAYS_BINDING = b'{"thread":"t1","session":"' + RID.encode() + b'","via":"relay"}\n'
TODAYS_RELAY = b'{"relay":"' + RID.encode() + b'","session":"t9","thread":"t9","via":"reset"}\n'


def test_records_are_written_byte_for_byte_as_before_and_such_files_load(tmp_path):
    bindings.save(tmp_path, Binding("t1", RID, "relay"))
    assert bindings.binding_path(tmp_path, "t1").read_bytes() == TODAYS_BINDING
    bindings.save_relay(tmp_path, bindings.RelaySession(RID, "t9", "t9", "reset"))
    assert bindings.relay_path(tmp_path, RID).read_bytes() == TODAYS_RELAY
    other = tmp_path / "other"
    bindings.binding_path(other, "t1").parent.mkdir(parents=True)
    bindings.binding_path(other, "t1").write_bytes(TODAYS_BINDING)
    bindings.relay_path(other, RID).parent.mkdir(parents=True)
    bindings.relay_path(other, RID).write_bytes(TODAYS_RELAY)
    assert bindings.load(other, "t1") == Binding("t1", RID, "relay")
    assert bindings.load_relay(other, RID) == bindings.RelaySession(RID, "t9", "t9", "reset")


def test_a_binding_that_does_not_decode_is_reported_by_file_and_line_and_the_others_are_listed(tmp_path, logs):
    bindings.save(tmp_path, Binding("t1", RID, "relay"))
    bindings.save(tmp_path, Binding("t3", RID, "continuity"))
    bad = bindings.binding_path(tmp_path, "t2")
    bad.write_bytes(b'{"thread":"t2","session":["secret-ish"],"via":"relay"}\n')
    assert [b.thread for b in bindings.threads_of(tmp_path, RID)] == ["t1", "t3"]
    assert bindings.load(tmp_path, "t2") is None
    reports = [r.fields for r in logs.records if r.getMessage().startswith("record skipped")]  # type: ignore[attr-defined]
    assert {(r["file"], r["line"]) for r in reports} == {(str(bad), 1)}
    assert "$.session" in reports[0]["error"] and "secret-ish" not in logs.text
    assert not [r for r in logs.records if r.exc_info]


def test_a_relay_record_that_does_not_decode_is_reported_and_names_nothing(tmp_path, logs):
    path = bindings.relay_path(tmp_path, RID)
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"relay":"' + RID.encode() + b'","sess')  # torn
    assert bindings.load_relay(tmp_path, RID) is None
    reports = [r.fields for r in logs.records if r.getMessage().startswith("record skipped")]  # type: ignore[attr-defined]
    assert [(r["file"], r["line"]) for r in reports] == [(str(path), 1)]
