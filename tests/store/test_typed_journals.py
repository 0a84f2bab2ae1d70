"""The ledger, injected-items and archive files (``sidecar.store.ledger``,
``sidecar.store.injected``, ``sidecar.history.archive``): typed records,
written as the code of 2026-12 wrote them (dicts encoded by msgspec), today's
files loaded, and a line that does not decode reported by file and line
(never its value) and skipped."""

from __future__ import annotations

import pytest

import sidecar.store.ledger as ledger_module
from sidecar.history.archive import TurnArchive
from sidecar.store.injected import InjectedItems
from sidecar.store.ledger import Ledger, LedgerState
from sidecar.thread.files import Injection

TODAYS_LEDGER = (
    b'{"turn":"t1","rebuilds":0,"force":false,"epoch":null,"add":[["a",3],["b",4]]}\n'
    b'{"turn":"t2","rebuilds":1,"force":true,"epoch":"e1","reset":[["c",5]],"turns":["t2"]}\n'
    b'{"rebuilding":true,"rebuilds":2,"epoch":"e2"}\n'
    b'{"reset":[["a",3],["c",5]],"turns":null,"rebuilds":2,"force":false,"epoch":null}\n'
    b'{"reset":[["a",3],["c",5]],"turns":null,"rebuilds":2,"force":false,"epoch":null,"clientRevert":"t2"}\n'
    b'{"turn":"t3","rebuilds":2,"force":false,"epoch":"e3","add":[["d",6]]}\n'
)
TODAYS_SNAPSHOT = b'{"snapshot":{"held":[],"turns":null,"rebuilds":1,"force":true,"epoch":"y","rebuilding":true}}\n'
TODAYS_INJECTED = (
    b'{"after":null,"items":[{"type":"message","role":"developer"}]}\n'
    b'{"after":"t1","items":[{"type":"message"}]}\n'
    b'{"replaying":2}\n'
    b'{"framing":2}\n'
    b'{"dropAfter":["t1"]}\n'
)
TODAYS_ARCHIVE = (
    b'{"turn":{"id":"t1","items":[],"status":"completed"}}\n'
    b'{"turn":{"id":"t2","items":[],"status":"completed"}}\n'
    b'{"dropped":["t1"],"unread":{"turn":1},"path":"/x/rollout.jsonl"}\n'
    b'{"dropped":["t2"]}\n'
    b'{"unread":null}\n'
    b'{"restored":["t2"]}\n'
    b'{"reverting":{"beforeTurnId":"t2","inFlightTurnIds":["t3"]}}\n'
    b'{"revertRefused":"t2"}\n'
    b'{"forgetting":{"beforeTurnId":"t2","intoArchive":true,"inFlightTurnIds":[]}}\n'
    b'{"forgotten":["t2"]}\n'
    b'{"forgot":"t2"}\n'
)


def skipped(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if r.getMessage().startswith("record skipped")]  # type: ignore[attr-defined]


def write_ledger(ledger: Ledger) -> None:
    ledger.turn("t1", [("a", 3), ("b", 4)], reset=False, turns=None, rebuilds=0, force=False, epoch=None)
    ledger.turn("t2", [("c", 5)], reset=True, turns=["t2"], rebuilds=1, force=True, epoch="e1")
    ledger.rebuilding(2, "e2")
    state = LedgerState(held=["a", "c"], sizes={"a": 3, "c": 5}, rebuilds=2)
    ledger.reset(state)
    ledger.reset(state, clientRevert="t2")
    ledger.turn("t3", [("d", 6)], reset=False, turns=None, rebuilds=2, force=False, epoch="e3")


def write_archive(archive: TurnArchive) -> None:
    archive.append_turn({"id": "t1", "items": [], "status": "completed"})
    archive.append_turn({"id": "t2", "items": [], "status": "completed"})
    archive.mark_dropped(["t1"], unread={"turn": 1}, path="/x/rollout.jsonl")
    archive.mark_dropped(["t2"])
    archive.mark_read()
    archive.mark_restored(["t2"])
    archive.begin_revert("t2", ["t3"])
    archive.revert_refused("t2")
    archive.begin_forget("t2", True)
    archive.forget_from("t2")
    archive.end_forget("t2")


def test_the_three_files_are_written_byte_for_byte_as_before_they_were_typed(tmp_path, monkeypatch):
    write_ledger(Ledger(tmp_path / "ledger.jsonl"))
    assert (tmp_path / "ledger.jsonl").read_bytes() == TODAYS_LEDGER
    monkeypatch.setattr(ledger_module, "COMPACT_AFTER", 3)
    compacted = Ledger(tmp_path / "compacted.jsonl")
    compacted.turn("t1", [("a", 3)], reset=False, turns=None, rebuilds=0, force=False, epoch=None)
    compacted.turn("t2", [("b", 4)], reset=False, turns=None, rebuilds=0, force=False, epoch="x")
    compacted.rebuilding(1, "y")
    assert (tmp_path / "compacted.jsonl").read_bytes() == TODAYS_SNAPSHOT
    injected = InjectedItems(tmp_path / "injected.jsonl")
    injected.append(Injection(None, [{"type": "message", "role": "developer"}]))
    injected.append(Injection("t1", [{"type": "message"}]))
    injected.replaying(2)
    injected.framing(2)
    injected.drop_after(["t1"])
    assert (tmp_path / "injected.jsonl").read_bytes() == TODAYS_INJECTED
    write_archive(TurnArchive(tmp_path / "turns.jsonl"))
    assert (tmp_path / "turns.jsonl").read_bytes() == TODAYS_ARCHIVE


def test_files_written_by_the_untyped_code_load(tmp_path, logs):
    (tmp_path / "ledger.jsonl").write_bytes(TODAYS_LEDGER)
    state = Ledger(tmp_path / "ledger.jsonl").load()
    assert (state.held, state.sizes, state.turns_since_rebuild, state.rebuilds, state.projected_epoch) == (
        ["a", "c", "d"], {"a": 3, "c": 5, "d": 6}, None, 2, "e3"
    )
    after = Ledger(tmp_path / "ledger.jsonl").after_turn("t2")
    assert after is not None and (after.held, after.turns_since_rebuild, after.force_rebuild) == (["c"], ["t2"], True)
    (tmp_path / "compacted.jsonl").write_bytes(TODAYS_SNAPSHOT)
    snap = Ledger(tmp_path / "compacted.jsonl").load()
    assert (snap.held, snap.rebuilds, snap.force_rebuild, snap.projected_epoch, snap.rebuilding) == ([], 1, True, "y", True)
    (tmp_path / "injected.jsonl").write_bytes(TODAYS_INJECTED)
    assert InjectedItems(tmp_path / "injected.jsonl").load() == ([Injection(None, [{"type": "message", "role": "developer"}])], 1, False)
    (tmp_path / "turns.jsonl").write_bytes(TODAYS_ARCHIVE + b'{"dropped":["t1"],"laterMember":1}\n')  # a member added later: ignored
    archive = TurnArchive(tmp_path / "turns.jsonl")
    assert archive.turn_order() == ["t1", "t2"]
    assert [t["id"] for t in archive.hidden()] == ["t1"]
    assert archive.shown() == {"unread": None, "path": "/x/rollout.jsonl"}  # marked read since
    assert archive.pending_revert() is None and archive.pending_forget() is None
    assert skipped(logs) == []


@pytest.mark.parametrize(
    "name, good, bad",
    [
        ("ledger", b'{"reset":[["a",3]],"turns":null,"rebuilds":0,"force":false,"epoch":null}\n', b'{"turn":"t2","add":[["b","SECRET"]]}\n'),
        ("injected", b'{"after":null,"items":[{"type":"message"}]}\n', b'{"after":7,"items":["SECRET"]}\n'),
        ("archive", b'{"turn":{"id":"t1"}}\n', b'{"dropped":["t2",{"x":"SECRET"}]}\n'),
    ],
)
def test_a_line_that_does_not_decode_is_reported_by_file_and_line_and_the_rest_is_read(tmp_path, logs, name, good, bad):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(bad + b'{"turn":"SECRET' + b"\n" + good + b'"SECRET"\n')
    if name == "ledger":
        assert Ledger(path).load().held == ["a"]
    elif name == "injected":
        assert InjectedItems(path).load() == ([Injection(None, [{"type": "message"}])], 0, False)
    else:
        archive = TurnArchive(path)
        assert archive.turn_order() == ["t1"] and archive._read()[1] == set()
    reports = skipped(logs)
    assert [(r["file"], r["line"]) for r in reports][:3] == [(str(path), 1), (str(path), 2), (str(path), 4)]
    assert "$." in reports[0]["error"] and reports[1]["error"].startswith("not a JSON value")
    assert "SECRET" not in logs.text and all("SECRET" not in str(r.fields) for r in logs.records if hasattr(r, "fields"))
    assert not [r for r in logs.records if r.exc_info]
