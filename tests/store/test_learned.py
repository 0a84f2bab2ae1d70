"""The learned-facts journal's file (sidecar.store.learned): typed entries,
written as the code of 2026-12 wrote them, a line that does not decode
reported by file and line and skipped."""

from __future__ import annotations

from sidecar.session.state import Learned, replay
from sidecar.store.learned import LearnedEntry, append_entry, learned_path, read_journal

# A journal as the sidecar wrote it before its entries were typed (dicts
# encoded by msgspec): each fact on its own line, an addition taken back as null.
TODAYS_JOURNAL = (
    b'{"thread":"t1","window":258400}\n'
    b'{"thread":"t1","tools":["exec","message"]}\n'
    b'{"thread":"t1","bootstrapped":true}\n'
    b'{"thread":"t1","addition":"ab12"}\n'
    b'{"thread":"t1","addition":null}\n'
)


def skipped(caplog) -> list[dict]:
    return [r.fields for r in caplog.records if r.getMessage().startswith("record skipped")]  # type: ignore[attr-defined]


def test_entries_round_trip_byte_for_byte_with_the_journal_written_before_they_were_typed(tmp_path):
    path = learned_path(tmp_path, "t1")
    for entry in [
        LearnedEntry("t1", window=258_400),
        LearnedEntry("t1", tools=("exec", "message")),
        LearnedEntry("t1", bootstrapped=True),
        LearnedEntry("t1", addition="ab12"),
        LearnedEntry("t1", addition=None),
    ]:
        assert append_entry(path, entry)
    assert path.read_bytes() == TODAYS_JOURNAL
    assert read_journal(path)[0] == LearnedEntry("t1", window=258_400)


def test_a_journal_written_by_the_untyped_code_loads(tmp_path, logs):
    path = learned_path(tmp_path, "t1")
    path.parent.mkdir()
    path.write_bytes(TODAYS_JOURNAL)
    state = replay(read_journal(path), "t1")
    assert state == Learned(window=258_400, tools=frozenset({"exec", "message"}), bootstrapped=True, addition=None)
    assert skipped(logs) == []


def test_a_line_that_does_not_decode_is_reported_by_file_and_line_and_the_rest_is_read(tmp_path, logs):
    path = learned_path(tmp_path, "t1")
    path.parent.mkdir()
    secret = "do-not-log-me"
    path.write_bytes(
        b'{"thread":"t1","window":100000}\n'
        + f'{{"thread":"t1","tools":["a",{{"x":"{secret}"}}]}}\n'.encode()  # a member of the wrong type
        + b'{"thread":"t1","win\n'  # a torn line
        + b'{"thread":"t1","bootstrapped":true}\n'
        + b'"just a string"\n'
        + b'{"thread":"t1","window":true}\n'
        + b'{"thread":"t1","window":258400,"laterMember":1}\n'  # a member added later: ignored
    )
    entries = read_journal(path)
    assert entries == [LearnedEntry("t1", window=100_000), LearnedEntry("t1", bootstrapped=True), LearnedEntry("t1", window=258_400)]
    reports = skipped(logs)
    assert [(r["file"], r["line"]) for r in reports] == [(str(path), 2), (str(path), 3), (str(path), 5), (str(path), 6)]
    assert "$.tools[1]" in reports[0]["error"]
    assert secret not in logs.text and all(secret not in str(r.fields) for r in logs.records if hasattr(r, "fields"))
    assert not [r for r in logs.records if r.exc_info]


def test_no_journal_is_no_entries(tmp_path):
    assert read_journal(learned_path(tmp_path, "t1")) == []
