"""sidecar.store.inspect: per-turn records read back typed; a line that does
not decode is reported by file and line and skipped, the others read."""

from __future__ import annotations

from sidecar.store.inspect import InspectLog, append_record, inspect_path

# A record as finalize wrote it on the main of 2026-12 (every member kind:
# strings, numbers, nulls, nested objects and lists).
TODAYS_RECORD = (
    b'{"turnId":"turn-1","status":"completed","mode":"auto","epoch":0,"projectedEpoch":0,"projected":true,"fallback":null,'
    b'"historyMessages":2,"assembled":{"count":3,"estimatedTokens":120,"messages":[["user",40],["assistant",80]]},'
    b'"injected":{"channels":["input"],"contextChars":480,"rendered":2,"dropped":0},'
    b'"turnInputChars":{"original":10,"sent":490},"codexInputTokens":900,"cachedInputTokens":0,"rebuilt":false,'
    b'"staleHeld":0,"holdMs":1,"revertMs":null,"budget":8000,"rebuilds":0,"heldMessages":3,"forceRebuild":false}\n'
)


def reports(logs) -> list[dict]:
    return [r.fields for r in logs.records if r.getMessage().startswith("record skipped")]  # type: ignore[attr-defined]


def test_a_record_written_before_the_records_were_typed_reads_back_as_written(tmp_path, logs):
    path = inspect_path(tmp_path, "t1")
    path.parent.mkdir()
    path.write_bytes(TODAYS_RECORD)
    log = InspectLog(path)
    [record] = log.records()
    assert record["turnId"] == "turn-1" and record["assembled"]["messages"] == [["user", 40], ["assistant", 80]]
    append_record(path, record)  # and written again: the same bytes
    assert path.read_bytes() == TODAYS_RECORD * 2
    assert reports(logs) == []


def test_a_line_that_does_not_decode_is_reported_by_file_and_line_and_skipped(tmp_path, logs):
    path = inspect_path(tmp_path, "t1")
    path.parent.mkdir()
    path.write_bytes(
        TODAYS_RECORD
        + b'{"turnId":"turn-2","sta\n'  # torn by a kill
        + b'["not", "a", "record"]\n'
        + b'{"turnId":"turn-3","rebuilds":"several","prompt":"private words"}\n'  # a member the sidecar reads, of the wrong type
        + b'{"turnId":"turn-4","rebuilds":2,"forceRebuild":true,"laterMember":{"x":1}}\n'
    )
    log = InspectLog(path)
    assert [r["turnId"] for r in log.records()] == ["turn-1", "turn-4"]
    assert log.last() == {"turnId": "turn-4", "rebuilds": 2, "forceRebuild": True, "laterMember": {"x": 1}}
    found = reports(logs)
    assert sorted({(r["file"], r["line"]) for r in found}) == [(str(path), 2), (str(path), 3), (str(path), 4)]
    assert any("$.rebuilds" in r["error"] for r in found)
    assert "private words" not in logs.text and "several" not in logs.text
    assert not [r for r in logs.records if r.exc_info]


def test_a_thread_without_records_has_none(tmp_path):
    log = InspectLog(inspect_path(tmp_path, "t1"))
    assert log.records() == [] and log.last() is None
