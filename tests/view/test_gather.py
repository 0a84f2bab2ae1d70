"""``sidecar/view/gather.py``: a session's files read into the report's data."""

from __future__ import annotations

import json

import msgspec
import pytest

from sidecar.view.gather import gather
from tools.view_session import PLANTED, SESSION, thread_id, turn_id, write_session


@pytest.fixture
def state(tmp_path):
    write_session(tmp_path, turns=70, threads=3, old_records=10)
    return tmp_path


def test_a_session_is_gathered_across_its_threads_in_order_from_a_thread_id(state):
    report = gather(state, thread_id(2))  # any of its threads names the session
    assert report.session == SESSION
    assert [t.thread for t in report.threads] == [thread_id(1), thread_id(2), thread_id(3)]
    assert [t.n for t in report.turns] == list(range(1, 71))
    assert [t.turn_id for t in report.turns] == [turn_id(n) for n in range(1, 71)]
    assert [(t.turns, t.first) for t in report.threads] == [(24, 1), (24, 25), (22, 49)]


def test_each_event_is_marked_on_its_turn(state):
    marks = {t.n: t.marks for t in gather(state, SESSION).turns if t.marks}
    assert marks[13] == ["fallback: assemble-deadline"]
    assert marks[17] == ["engine failed: after_turn"]
    assert marks[21] == ["turn failed"]
    assert "rotation" in marks[25] and "rebuild" in marks[25]
    assert "rotation" in marks[49]
    assert marks[30] == ["client revert"]
    assert marks[40] == ["native compaction"]
    assert marks[60] == ["switch"]


def test_a_turn_has_its_transcript_its_sent_text_and_what_the_thread_held(state):
    turns = gather(state, SESSION).turns
    seven = turns[6]
    assert [m.role for m in seven.messages] == ["user", "assistant"]
    assert PLANTED in (seven.messages[0].body.text or "")
    five = turns[4]
    assert [(m.role, m.tool) for m in five.messages] == [("user", None), ("assistant", "bash"), ("toolResult", "bash"), ("assistant", None)]
    # the ledger: what the Codex thread held before each turn (its first: nothing)
    assert turns[0].held_before == (0, 0) and turns[1].held_before is not None and turns[1].held_before[0] == 2
    fifty = turns[49]
    assert fifty.rebuilt and fifty.sent_context is not None and (fifty.sent_context.text or "").startswith("OpenClaw assembled context")
    assert fifty.budget == 4000 and fifty.codex_input == 5000 + 120 * 50 and fifty.cached_input == 0


def test_records_of_older_sidecars_read_without_the_new_fields(state):
    turns = gather(state, SESSION).turns
    assert turns[0].recorded and turns[0].budget is None and turns[0].sent_input is None
    assert turns[10].budget == 4000


def test_a_torn_last_record_and_a_torn_transcript_line_are_skipped(state):
    with open(state / "inspect" / f"{thread_id(3)}.jsonl", "ab") as f:
        f.write(b'{"turnId":"torn","status":')
    with open(state / "sessions" / f"{SESSION}.jsonl", "ab") as f:
        f.write(b'{"type":"message","id":"x","message":{"role":"us')
    report = gather(state, SESSION)
    assert len(report.turns) == 70


def test_a_turn_the_transcript_knows_without_a_record_is_still_shown(state):
    path = state / "inspect" / f"{thread_id(1)}.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5] + lines[6:]))  # turn 6's record lost
    turns = gather(state, SESSION).turns
    assert len(turns) == 70 and turns[5].turn_id == turn_id(6) and not turns[5].recorded
    assert PLANTED not in json.dumps([m.body.text for m in turns[5].messages])


def test_redact_keeps_every_size_and_no_text(state):
    plain = gather(state, SESSION)
    hidden = gather(state, SESSION, redact=True)
    encoded = msgspec.json.encode(hidden).decode()
    assert PLANTED not in encoded and "Lisbon" not in encoded and "OpenClaw assembled" not in encoded
    assert [m.body.chars for t in hidden.turns for m in t.messages] == [m.body.chars for t in plain.turns for m in t.messages]
    assert hidden.turns[49].sent_context is not None and hidden.turns[49].sent_context.chars == plain.turns[49].sent_context.chars > 0


def test_gathering_twice_gives_the_same_report(state):
    assert msgspec.json.encode(gather(state, SESSION)) == msgspec.json.encode(gather(state, SESSION))


def test_an_unusable_name_is_refused(state):
    with pytest.raises(ValueError):
        gather(state, "../etc")


def test_what_the_codex_thread_held_is_named_by_the_turns_that_said_it():
    """The recorded demo session (fixtures/view-session): its ledger's
    fingerprints are the transcript's messages, found again here."""
    from pathlib import Path

    recorded = Path(__file__).resolve().parents[2] / "fixtures" / "view-session"
    turns = gather(recorded, "01a23462-68c3-7233-ade6-3a4707476553").turns
    assert [t.held_before for t in turns] == [(0, 0), (2, 140), (6, 334), (6, 299)]
    # turn 3 rebuilt: what the thread held when it came, before the rebuild
    assert turns[2].rebuilt and [(role, n) for role, _, n in turns[2].held_newest] == [
        ("user", 1), ("assistant", 1), ("user", 2), ("assistant", 2), ("toolResult", 2), ("assistant", 2)
    ]
    assert [(role, n) for role, _, n in turns[3].held_newest][-2:] == [("user", 3), ("assistant", 3)]
