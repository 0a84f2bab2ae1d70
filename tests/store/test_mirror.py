"""sidecar.store.mirror: the OpenClaw JSONL transcript mirror.

Round trips, idempotency (also across reopen, instances and processes), torn
lines, write errors (a failing writer seam and the kernel's own ENOSPC from
/dev/full), SIGKILL mid-stream, forks, the compaction view and permissions.
"""

from __future__ import annotations

import errno
import gc
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import msgspec
import pytest

from engines.api import (
    AssistantMessage,
    CompactionSummaryMessage,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    to_openclaw,
)
from sidecar import translate as tr
from sidecar.store.mirror import MirrorError, TranscriptMirror, entry_id_for_key, session_path
from tests.support import codex_samples as samples
from tests.support.harness import ROOT

SECRET = "SECRET-PROMPT-TEXT"


def user(text: str, ts: int = 1_000) -> UserMessage:
    return UserMessage(content=text, timestamp=ts)


def assistant(text: str, ts: int = 2_000) -> AssistantMessage:
    return AssistantMessage(content=[TextBlock(text=text)], timestamp=ts)


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


def parsed(path: Path) -> list[dict]:
    return [json.loads(line) for line in lines(path) if line.strip()]


def logged(caplog) -> str:
    return "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')}" for r in caplog.records)


@pytest.fixture
def path(tmp_path) -> Path:
    return session_path(tmp_path / "state", "01a20135-0754-7433-a031-c6422a39e7a0")


# --------------------------------------------------------------------------
# paths, creation, permissions


def test_session_path_layout_and_refusals(tmp_path):
    assert session_path(tmp_path, "01a2-b3.c_d") == tmp_path / "sessions" / "01a2-b3.c_d.jsonl"
    for bad in ["", "..", ".hidden", "../escape", "a/b", "a\\b", "a\x00b", "x" * 201, " lead", "a b", None, 5]:
        with pytest.raises(ValueError):
            session_path(tmp_path, bad)  # type: ignore[arg-type]


def test_open_creates_header_with_private_permissions(path):
    old = os.umask(0)  # even a permissive umask must not widen the modes
    try:
        m = TranscriptMirror.open(path, "session-1", cwd="/work", timestamp=1_700_000_000_123)
    finally:
        os.umask(old)
    with m:
        assert m.existed_before is False
        assert m.entry_count == 0 and m.leaf_id is None and m.messages() == []
    assert parsed(path) == [
        {"type": "session", "version": 4, "id": "session-1", "timestamp": "2023-11-14T22:13:20.123Z", "cwd": "/work"}
    ]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700  # sessions/
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700  # state/


def test_reopen_keeps_header_and_reports_existence(path):
    TranscriptMirror.open(path, "first", cwd="/a").close()
    with TranscriptMirror.open(path, "second", cwd="/b") as m:
        assert m.existed_before is True
        assert m.session_id == "first" and m.header["cwd"] == "/a"
    assert len(parsed(path)) == 1


def test_empty_leftover_file_counts_as_new(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    with TranscriptMirror.open(path, "s") as m:
        assert m.existed_before is False
    assert parsed(path)[0]["type"] == "session"


def test_a_file_that_is_not_a_session_is_refused(path):
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"type": "message", "id": "x", "parentId": None}) + "\n")
    with pytest.raises(MirrorError, match="not an OpenClaw session file"):
        TranscriptMirror.open(path, "s")


# --------------------------------------------------------------------------
# appends, round trips, idempotency


def test_append_round_trip_and_tree_shape(path):
    msgs = [
        user("hello", 1_000),
        AssistantMessage(content=[ToolCallBlock(id="c1", name="bash", arguments={"command": "ls"})], timestamp=2_000),
        ToolResultMessage(tool_call_id="c1", tool_name="bash", content=[TextBlock(text="a\nb")], is_error=False, timestamp=2_000),
        assistant("done", 3_000),
    ]
    with TranscriptMirror.open(path, "s") as m:
        for i, msg in enumerate(msgs):
            assert m.append_message(msg, f"k{i}") is True
        assert m.messages() == msgs
        assert m.entry_count == 4
    entries = parsed(path)[1:]
    parent = None
    for i, (entry, msg) in enumerate(zip(entries, msgs)):
        assert entry["type"] == "message"
        assert entry["id"] == entry_id_for_key(f"k{i}") and len(entry["id"]) == 16
        assert entry["parentId"] == parent
        assert entry["idempotencyKey"] == f"k{i}"
        assert entry["message"] == to_openclaw(msg)
        parent = entry["id"]
    assert entries[0]["timestamp"] == "1970-01-01T00:00:01.000Z"
    with TranscriptMirror.open(path, "s") as m:
        assert m.messages() == msgs and m.leaf_id == parent


def test_idempotent_across_calls_reopen_and_instances(path):
    with TranscriptMirror.open(path, "s") as m:
        assert m.append_message(user("a"), "k1") is True
        assert m.append_message(user("a again"), "k1") is False
        assert m.has_key("k1") and m.entry_id("k1") == entry_id_for_key("k1")
    size = path.stat().st_size
    with TranscriptMirror.open(path, "s") as m:
        assert m.has_key("k1")
        assert m.append_message(user("replayed after a restart"), "k1") is False
    assert path.stat().st_size == size
    # two live instances on one file: each sees the other's appends before writing
    a = TranscriptMirror.open(path, "s")
    b = TranscriptMirror.open(path, "s")
    try:
        assert a.append_message(user("from a"), "k2") is True
        assert b.append_message(user("from b"), "k2") is False
        assert b.append_message(assistant("b"), "k3") is True
        assert a.append_message(assistant("a"), "k4") is True
        assert [e["parentId"] for e in a.entries()] == [None, entry_id_for_key("k1"), entry_id_for_key("k2"), entry_id_for_key("k3")]
        assert a.messages() == b.messages()
    finally:
        a.close()
        b.close()
    keys = [e["idempotencyKey"] for e in parsed(path)[1:]]
    assert keys == ["k1", "k2", "k3", "k4"]


def test_append_records_from_a_translated_turn(path):
    items = [samples.item(n) for n in ("userMessage", "commandExecution", "agentMessage", "contextCompaction")]
    records = tr.translate_turn(items, thread_id="T", turn_id="U", timestamp=5_000, original_input="orig")
    with TranscriptMirror.open(path, "s") as m:
        assert m.append_records(records) == 5
        assert m.append_records(records) == 0
        assert m.messages() == tr.messages_of(records)
        custom = [e for e in m.entries() if e["type"] == "custom"]
    assert len(custom) == 1
    assert custom[0]["customType"] == "codex-native-compaction"
    assert custom[0]["data"]["itemId"] == items[3]["id"]
    assert custom[0]["timestamp"] == "1970-01-01T00:00:05.000Z"
    with pytest.raises(TypeError):
        TranscriptMirror.open(path, "s").append_records(["not a record"])  # type: ignore[list-item]


def test_custom_entries_are_not_context(path):
    with TranscriptMirror.open(path, "s") as m:
        m.append_message(user("q"), "k1")
        assert m.append_custom("engine-state", {"cursor": 3}, "c1", timestamp=0) is True
        assert m.append_custom("engine-state", {"cursor": 4}, "c1") is False
        m.append_message(assistant("a"), "k2")
        assert m.messages() == [user("q"), assistant("a")]
        entry = m.entries()[1]
    assert entry == {
        "type": "custom", "id": entry_id_for_key("c1"), "parentId": entry_id_for_key("k1"),
        "timestamp": "1970-01-01T00:00:00.000Z", "customType": "engine-state", "data": {"cursor": 3},
        "idempotencyKey": "c1",
    }


def test_foreign_entries_and_roles_are_kept_but_not_context(path, caplog):
    TranscriptMirror.open(path, "s").close()
    foreign = [
        {"type": "model_change", "id": "mc1", "parentId": None, "timestamp": "2024-01-01T00:00:00.000Z", "provider": "p", "modelId": "m"},
        {"type": "message", "id": "bx1", "parentId": "mc1", "timestamp": "2024-01-01T00:00:00.000Z",
         "message": {"role": "bashExecution", "command": SECRET}},
        {"type": "message", "id": "bad1", "parentId": "bx1", "timestamp": "2024-01-01T00:00:00.000Z",
         "message": {"role": "user", "content": 5, "timestamp": 1}},
        {"type": "custom_message", "id": "cm1", "parentId": "bad1", "timestamp": "2024-01-01T00:00:00.000Z",
         "customType": "x", "content": SECRET, "display": True},
    ]
    with path.open("a") as f:
        for entry in foreign:
            f.write(json.dumps(entry) + "\n")
    caplog.set_level(logging.DEBUG)
    with TranscriptMirror.open(path, "s") as m:
        assert m.entry_count == 4 and m.leaf_id == "cm1"
        m.append_message(user("mine"), "k1")
        assert m.entries()[-1]["parentId"] == "cm1"
        assert m.messages() == [user("mine")]
    assert SECRET not in logged(caplog)


def test_entries_are_copies(path):
    with TranscriptMirror.open(path, "s") as m:
        m.append_message(user("x"), "k1")
        m.entries()[0]["id"] = "tampered"
        assert m.entries()[0]["id"] == entry_id_for_key("k1")


def test_bad_keys_are_refused(path):
    with TranscriptMirror.open(path, "s") as m:
        for bad in ("", None, 3):
            with pytest.raises(ValueError):
                m.append_message(user("x"), bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# compaction view


def test_compaction_view_keeps_from_first_kept_entry(path):
    msgs = [user(f"u{i}", 1_000 * i) for i in range(5)]
    with TranscriptMirror.open(path, "s") as m:
        for i, msg in enumerate(msgs):
            m.append_message(msg, f"k{i}")
        m.append_custom("note", {}, "c0")
        assert m.append_compaction(
            summary="SUMMARY", first_kept_entry_id=m.entry_id("k3"), tokens_before=900, tokens_after=120,
            details={"engine": "x"}, key="comp1", timestamp=9_000,
        ) is True
        assert m.append_compaction(summary="again", first_kept_entry_id=None, tokens_before=1, key="comp1") is False
        after = assistant("after", 10_000)
        m.append_message(after, "k5")
        assert m.messages() == [
            CompactionSummaryMessage(summary="SUMMARY", tokens_before=900, tokens_after=120, timestamp=9_000),
            msgs[3],
            msgs[4],
            after,
        ]
        comp = [e for e in m.entries() if e["type"] == "compaction"][0]
        assert comp["firstKeptEntryId"] == entry_id_for_key("k3")
        assert comp["details"] == {"engine": "x"} and comp["tokensAfter"] == 120
        # a later compaction supersedes; None keeps nothing from before it
        m.append_compaction(summary="S2", first_kept_entry_id=None, tokens_before=50, key="comp2", timestamp=11_000)
        last = user("last", 12_000)
        m.append_message(last, "k6")
        assert m.messages() == [
            CompactionSummaryMessage(summary="S2", tokens_before=50, tokens_after=None, timestamp=11_000),
            last,
        ]
        with pytest.raises(ValueError):
            m.append_compaction(summary="x", first_kept_entry_id="nope", tokens_before=1, key="comp3")
    with TranscriptMirror.open(path, "s") as m:  # the view is rebuilt from the file alone
        assert m.messages()[0].summary == "S2"


# --------------------------------------------------------------------------
# torn lines


def test_torn_last_line_is_skipped_and_next_append_starts_fresh(path, caplog):
    with TranscriptMirror.open(path, "s") as m:
        m.append_message(user("one"), "k1")
        m.append_message(user("two"), "k2")
    whole = json.dumps({"type": "message", "id": "zz", "parentId": None, "message": {"role": "user", "content": SECRET}})
    with path.open("ab") as f:
        f.write(whole[: len(whole) // 2].encode())  # a kill mid-write
    caplog.set_level(logging.DEBUG)
    with TranscriptMirror.open(path, "s") as m:
        assert m.entry_count == 2 and m.skipped_lines == 1
        assert m.append_message(user("three"), "k3") is True
        assert m.entries()[-1]["parentId"] == entry_id_for_key("k2")
    raw = lines(path)
    bad = [line for line in raw if line.strip() and not _parses(line)]
    assert len(bad) == 1  # the torn fragment, alone on its line
    with TranscriptMirror.open(path, "s") as m:
        assert [x.content for x in m.messages()] == ["one", "two", "three"]
        assert m.append_message(user("four"), "k4") is True
    assert SECRET not in logged(caplog)


def test_complete_entry_missing_only_its_newline_is_kept(path):
    with TranscriptMirror.open(path, "s") as m:
        m.append_message(user("one"), "k1")
        m.append_message(user("two"), "k2")
    path.write_bytes(path.read_bytes()[:-1])  # killed just before the newline
    with TranscriptMirror.open(path, "s") as m:
        assert m.entry_count == 2 and m.has_key("k2")
        assert m.append_message(user("two"), "k2") is False
        m.append_message(user("three"), "k3")
    assert all(_parses(line) for line in lines(path) if line.strip())
    assert [e.get("idempotencyKey") for e in parsed(path)[1:]] == ["k1", "k2", "k3"]


def _parses(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


# --------------------------------------------------------------------------
# write errors


class FlakyWriter:
    """os.write that fails on demand: before writing, or after half a line."""

    def __init__(self) -> None:
        self.mode: str | None = None

    def __call__(self, fd: int, data) -> int:
        mode, self.mode = self.mode, None
        if mode == "fail":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if mode == "half":
            os.write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


@pytest.mark.parametrize("mode", ["fail", "half"])
def test_write_error_raises_and_loses_nothing(path, mode, caplog):
    writer = FlakyWriter()
    caplog.set_level(logging.DEBUG)
    with TranscriptMirror.open(path, "s", writer=writer) as m:
        m.append_message(user("kept"), "k1")
        before = path.read_bytes()
        writer.mode = mode
        with pytest.raises(MirrorError, match="No space left on device"):
            m.append_message(user(SECRET), "k2")
        assert not m.has_key("k2")
        assert path.read_bytes().startswith(before)
        # the same object recovers: the retry lands on a fresh line, exactly once
        assert m.append_message(user("retried"), "k2") is True
        assert m.append_message(user("next"), "k3") is True
        assert [x.content for x in m.messages()] == ["kept", "retried", "next"]
    with TranscriptMirror.open(path, "s") as m:
        assert [x.content for x in m.messages()] == ["kept", "retried", "next"]
        assert [e["idempotencyKey"] for e in m.entries()] == ["k1", "k2", "k3"]
    assert SECRET not in logged(caplog)


def test_kernel_enospc_from_dev_full(path):
    if not os.path.exists("/dev/full"):
        pytest.skip("/dev/full is not available")
    full = os.open("/dev/full", os.O_WRONLY)
    try:
        with TranscriptMirror.open(path, "s") as ok:
            ok.append_message(user("kept"), "k1")
        before = path.read_bytes()
        with TranscriptMirror.open(path, "s", writer=lambda _fd, data: os.write(full, data)) as m:
            with pytest.raises(MirrorError, match="ENOSPC"):
                m.append_message(user("lost"), "k2")
            assert not m.has_key("k2")
        assert path.read_bytes() == before
    finally:
        os.close(full)


def test_header_write_error_is_reported(tmp_path):
    def refuse(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    target = tmp_path / "s.jsonl"
    with pytest.raises(MirrorError):
        TranscriptMirror.open(target, "s", writer=refuse)
    with TranscriptMirror.open(target, "s") as m:  # a later open writes the header
        assert m.existed_before is False and m.header["id"] == "s"


def test_closed_mirror_refuses(path):
    m = TranscriptMirror.open(path, "s")
    m.close()
    m.close()
    with pytest.raises(MirrorError, match="closed"):
        m.append_message(user("x"), "k")


# --------------------------------------------------------------------------
# crashes and concurrent writers (real processes)

CHILD = textwrap.dedent(
    """
    import sys
    from engines.api import UserMessage
    from sidecar.store.mirror import TranscriptMirror
    path, tag, count, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    shared = sys.argv[5] == "shared" if len(sys.argv) > 5 else False
    m = TranscriptMirror.open(path, "s")
    body = "x" * size
    if shared:
        sys.stdin.readline()  # start together, so the writers really race
    for i in range(count):
        key = f"shared-{i}" if shared and i % 2 else f"{tag}-{i}"
        m.append_message(UserMessage(content=body, timestamp=i), key)
        sys.stdout.write(f"{i}\\n")
        sys.stdout.flush()
    """
)


def _child(path: Path, tag: str, count: int, size: int, *extra: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), tag, str(count), str(size), *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )


def _check_file(path: Path) -> list[dict]:
    """Every line parses except at most a torn one; ids and keys are unique;
    each entry's parent is the entry before it."""
    raw = [line for line in lines(path) if line.strip()]
    good = [json.loads(line) for line in raw if _parses(line)]
    assert len(raw) - len(good) <= 1
    entries = good[1:]
    assert good[0]["type"] == "session"
    keys = [e["idempotencyKey"] for e in entries]
    assert len(keys) == len(set(keys))
    assert len({e["id"] for e in entries}) == len(entries)
    for prev, entry in zip([None, *entries], entries):
        assert entry["parentId"] == (prev["id"] if prev else None)
    return entries


@pytest.mark.parametrize("size", [10, 300_000])
def test_sigkill_mid_stream_keeps_every_acknowledged_entry(path, size):
    TranscriptMirror.open(path, "s").close()
    proc = _child(path, "w", 1_000_000, size)
    acknowledged = -1
    try:
        assert proc.stdout is not None
        while acknowledged < 40:
            line = proc.stdout.readline()
            assert line, "child died early"
            acknowledged = int(line)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    entries = _check_file(path)
    keys = {e["idempotencyKey"] for e in entries}
    assert {f"w-{i}" for i in range(acknowledged + 1)} <= keys
    with TranscriptMirror.open(path, "s") as m:  # a restart continues cleanly
        assert m.append_message(user("after"), "after") is True
        assert m.append_message(user("replay"), "w-0") is False
    _check_file(path)


def test_concurrent_processes_never_interleave_or_duplicate(path):
    TranscriptMirror.open(path, "s").close()
    count = 300
    procs = [_child(path, f"p{n}", count, 2_000, "shared") for n in range(4)]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0
        assert out.split() == [str(i).encode() for i in range(count)]
    entries = _check_file(path)
    keys = {e["idempotencyKey"] for e in entries}
    expected = {f"p{n}-{i}" for n in range(4) for i in range(0, count, 2)} | {
        f"shared-{i}" for i in range(1, count, 2)
    }
    assert keys == expected
    assert len(entries) == len(expected)


def test_follows_a_file_replaced_in_place(path):
    with TranscriptMirror.open(path, "s") as m:
        m.append_message(user("one"), "k1")
        # another tool rewrites the file (same content plus an entry) and renames it over ours
        rewritten = path.read_bytes() + msgspec.json.encode(
            {"type": "custom", "id": "x1", "parentId": entry_id_for_key("k1"), "timestamp": "2024-01-01T00:00:00.000Z",
             "customType": "maint", "data": {}}
        ) + b"\n"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(rewritten)
        os.replace(tmp, path)
        assert m.append_message(user("two"), "k2") is True
        assert m.entries()[-1]["parentId"] == "x1"
    assert [e.get("idempotencyKey") for e in parsed(path)[1:]] == ["k1", None, "k2"]


# --------------------------------------------------------------------------
# forks


def _fill_parent(parent: Path) -> None:
    with TranscriptMirror.open(parent, "parent-session", cwd="/p") as m:
        for turn in ("t1", "t2", "t3"):
            prefix = tr.turn_key_prefix("P", turn)
            m.append_message(user(f"q {turn}"), prefix + "u:user")
            m.append_message(assistant(f"a {turn}"), prefix + "a:assistant")
        m.append_compaction(
            summary="S", first_kept_entry_id=m.entry_id(tr.turn_key_prefix("P", "t2") + "u:user"),
            tokens_before=10, key="comp", timestamp=1,
        )


def test_fork_copies_entries_verbatim_and_is_idempotent(tmp_path):
    parent = session_path(tmp_path, "P")
    child = session_path(tmp_path, "C")
    _fill_parent(parent)
    with TranscriptMirror.fork(parent, child, "child-session") as c:
        assert c.existed_before is False
        assert c.header["id"] == "child-session" and c.header["parentSession"] == str(parent)
        assert c.header["cwd"] == "/p"
        with TranscriptMirror.open(parent, "x") as p:
            assert c.entries() == p.entries()
            assert c.messages() == p.messages()
        assert c.messages()[0] == CompactionSummaryMessage(summary="S", tokens_before=10, timestamp=1)
        c.append_message(user("child only"), "child-key")
    size = child.stat().st_size
    with TranscriptMirror.fork(parent, child, "child-session") as c:  # replayed fork
        assert c.existed_before is True
        assert c.entry_count == 8
        assert c.leaf_id == entry_id_for_key("child-key")
    assert child.stat().st_size == size
    assert stat.S_IMODE(child.stat().st_mode) == 0o600


def test_fork_before_a_turn_and_completing_a_partial_fork(tmp_path):
    parent = session_path(tmp_path, "P")
    child = session_path(tmp_path, "C")
    _fill_parent(parent)
    cut = tr.turn_key_prefix("P", "t3")
    with TranscriptMirror.fork(parent, child, "c", stop_before=lambda key: key.startswith(cut)) as c:
        assert [m.content for m in c.messages()] == ["q t1", [TextBlock(text="a t1")], "q t2", [TextBlock(text="a t2")]]
    # a crash after the partial copy, then the full fork: only the rest is copied
    with TranscriptMirror.fork(parent, child, "c") as c:
        with TranscriptMirror.open(parent, "x") as p:
            assert c.entries() == p.entries()
    _check_file(child)


def test_fork_of_a_thread_without_mirror(tmp_path):
    with TranscriptMirror.fork(tmp_path / "missing.jsonl", tmp_path / "child.jsonl", "c", cwd="/w") as c:
        assert c.entry_count == 0 and c.header["cwd"] == "/w"


def test_torn_header_is_replaced_on_a_fresh_line(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"type":"session","vers')  # killed while creating the file
    with TranscriptMirror.open(path, "s", cwd="/w") as m:
        assert m.existed_before is False
        m.append_message(user("x"), "k1")
    raw = [line for line in lines(path) if line.strip()]
    assert not _parses(raw[0])
    assert json.loads(raw[1])["type"] == "session" and json.loads(raw[1])["id"] == "s"
    with TranscriptMirror.open(path, "other") as m:
        assert m.existed_before is True and m.session_id == "s" and m.messages() == [user("x")]


def test_a_deleted_file_is_started_afresh(path):
    with TranscriptMirror.open(path, "s", cwd="/w", timestamp=0) as m:
        m.append_message(user("before"), "k1")
        path.unlink()
        assert m.append_message(user("after"), "k2") is True
        assert m.messages() == [user("after")]
    entries = parsed(path)
    assert entries[0] == {"type": "session", "version": 4, "id": "s", "timestamp": "1970-01-01T00:00:00.000Z", "cwd": "/w"}
    assert [e["idempotencyKey"] for e in entries[1:]] == ["k2"]
    assert entries[1]["parentId"] is None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_threads_sharing_one_mirror_do_not_race(path):
    import threading

    with TranscriptMirror.open(path, "s") as m:
        def work(n: int) -> None:
            for i in range(100):
                m.append_message(user(f"{n}-{i}"), f"t{n}-{i}")
                m.append_message(user("shared"), f"shared-{i}")

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert m.entry_count == 500
    entries = _check_file(path)
    assert len(entries) == 500


def test_rewind_takes_a_turn_and_the_later_ones_off_the_path(path):
    prefix = lambda turn: f"codex-app-server:T:{turn}:"  # noqa: E731
    with TranscriptMirror.open(path, "T") as m:
        for n in (1, 2, 3):
            m.append_message(user(f"U{n}"), f"{prefix(n)}u")
            m.append_message(assistant(f"A{n}"), f"{prefix(n)}a")
        assert m.rewind(prefix(2), "revert-2", "codex-sidecar.client-revert", {"beforeTurnId": "2"}) is True
        assert [text(x) for x in m.messages()] == ["U1", "A1"]
        assert m.rewind(prefix(2), "revert-2", "codex-sidecar.client-revert", {}) is False  # same key: once
        assert m.rewind(prefix(9), "revert-9", "codex-sidecar.client-revert", {}) is False  # not on the path
        assert m.rewind(prefix(3), "revert-3", "codex-sidecar.client-revert", {}) is False  # already off it
        m.append_message(user("U4"), f"{prefix(4)}u")
        assert [text(x) for x in m.messages()] == ["U1", "A1", "U4"]
    # Nothing was removed from the file, and a reader sees the same path.
    assert sum(1 for e in parsed(path) if e.get("type") == "message") == 7
    with TranscriptMirror.open(path, "T") as again:
        assert [text(x) for x in again.messages()] == ["U1", "A1", "U4"]
        assert again.rewind(prefix(1), "revert-1", "codex-sidecar.client-revert", {}) is True
        assert again.messages() == []


def text(message) -> str:
    return message.content if isinstance(message.content, str) else message.content[0].text


# --------------------------------------------------------------------------
# the cached view (messages() extends its last answer; cached_messages())

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), st.integers(1, 3)),
        st.tuples(st.just("custom"), st.just(0)),
        st.tuples(st.just("rewind"), st.integers(0, 9)),
        st.tuples(st.just("compact"), st.integers(0, 9)),
        st.tuples(st.just("other writer"), st.integers(1, 2)),
        st.tuples(st.just("replace"), st.just(0)),
    ),
    max_size=14,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_the_cached_view_always_equals_a_fresh_read(tmp_path_factory, ops):
    """Whatever happened to the file (turns, custom entries, rewinds,
    compactions, another writer, a replacement), messages() equals what a
    fresh reader builds from the file alone, and cached_messages() is either
    None or that same list."""
    path = session_path(tmp_path_factory.mktemp("view") / "state", "01a20135-0754-7433-a031-c6422a39e7a0")
    n = 0
    turns: list[int] = []
    with TranscriptMirror.open(path, "T") as m:
        for op, arg in ops:
            n += 1
            target = turns[arg % len(turns)] if turns else 0  # an existing turn, mostly
            if op == "turn":
                turns.append(n)
                for k in range(arg):
                    m.append_message(user(f"U{n}.{k}", n), f"codex-app-server:T:{n}:u{k}")
                m.append_message(assistant(f"A{n}", n), f"codex-app-server:T:{n}:a")
            elif op == "custom":
                m.append_custom("note", {"n": n}, f"c{n}")
            elif op == "rewind":
                m.rewind(f"codex-app-server:T:{target}:", f"rw{n}", "codex-sidecar.client-revert", {})
            elif op == "compact":
                kept = m.entry_id(f"codex-app-server:T:{target}:a")
                m.append_compaction(summary=f"S{n}", first_kept_entry_id=kept, tokens_before=n, key=f"comp{n}", timestamp=n)
            elif op == "other writer":
                with TranscriptMirror.open(path, "T") as other:
                    for k in range(arg):
                        other.append_message(user(f"X{n}.{k}", n), f"other:{n}:{k}")
                assert m.cached_messages() is None  # the file grew behind its back
            elif op == "replace":
                copy = path.with_suffix(".copy")
                copy.write_bytes(path.read_bytes())
                os.replace(copy, path)
                assert m.cached_messages() is None  # another file now
            seen = m.messages()
            with TranscriptMirror.open(path, "T") as fresh:
                assert seen == fresh.messages(), ops
            cached = m.cached_messages()
            assert cached == seen and cached is not seen  # a copy: callers may extend it
            seen.append(user("caller's own"))
            assert m.messages() != seen  # nobody's list is the view itself


def test_messages_extends_its_last_answer_with_the_turn_just_appended(path):
    with TranscriptMirror.open(path, "T") as m:
        m.append_message(user("U1"), "k1")
        first = m.messages()
        m.append_message(assistant("A1"), "k2")
        m.append_custom("note", {}, "c1")
        second = m.messages()
        assert second == [*first, assistant("A1")]
        assert second[0] is first[0]  # the same objects, not parsed again


def _held(root: object) -> list[object]:
    """The containers and structs reachable from ``root`` (not through
    types, modules or functions): what an object keeps alive."""
    seen: set[int] = set()
    out: list[object] = []
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType, types.MethodType)):
            continue
        seen.add(id(obj))
        out.append(obj)
        todo.extend(gc.get_referents(obj))
    return out


def test_a_mirror_holds_each_message_once_decoded_and_entries_still_read_whole(tmp_path, path):
    with TranscriptMirror.open(path, "T") as m:
        m.append_message(user("U1"), "k1")
        m.append_message(assistant("A1"), "k2")
        m.append_custom("note", {"n": 1}, "c1")
        view = m.messages()
        m.append_message(user("U2"), "k3")  # followed into the view
        view = m.messages()
        held = _held(m)
        # The decoded messages, and no JSON body of them (a dict with a role).
        assert [x for x in held if isinstance(x, dict) and "role" in x] == []
        assert all(any(x is message for x in held) for message in view)
        # What the file says is still there to read, whole.
        assert m.entries() == parsed(path)[1:]
        assert [e["message"]["role"] for e in m.entries() if e["type"] == "message"] == ["user", "assistant", "user"]
        # A fork of it copies whole entries, and reads the same view.
        with TranscriptMirror.fork(path, session_path(tmp_path, "C"), "C") as child:
            assert child.entries() == m.entries()
            assert child.messages() == view
    with TranscriptMirror.open(path, "T") as again:
        assert again.messages() == view


# --------------------------------------------------------------------------
# entries decoded typed: a line that does not decode is reported by file and line


# A session file as the sidecar wrote it on the main of 2026-12, with an
# OpenClaw entry of a type the mirror does not write.
TODAYS_FILE = (
    b'{"type":"session","version":4,"id":"s","timestamp":"2026-12-01T00:00:00.000Z","cwd":""}\n'
    b'{"type":"message","id":"a1","parentId":null,"timestamp":"1970-01-01T00:00:01.000Z",'
    b'"message":{"role":"user","content":"one","timestamp":1000},"idempotencyKey":"k1"}\n'
    b'{"type":"model_change","id":"m1","parentId":"a1","timestamp":"2026-12-01T00:00:00.000Z","provider":"x","modelId":"y"}\n'
    b'{"type":"message","id":"a2","parentId":"m1","timestamp":"1970-01-01T00:00:02.000Z",'
    b'"message":{"role":"assistant","content":[{"type":"text","text":"two"}],"timestamp":2000},"idempotencyKey":"k2"}\n'
)


def test_a_session_file_written_before_the_entries_were_typed_loads(path, logs):
    path.parent.mkdir(parents=True)
    path.write_bytes(TODAYS_FILE)
    with TranscriptMirror.open(path, "s") as m:
        assert m.entry_count == 3 and m.skipped_lines == 0
        assert [type(x).__name__ for x in m.messages()] == ["UserMessage", "AssistantMessage"]
    assert path.read_bytes() == TODAYS_FILE  # opening wrote nothing
    assert not [r for r in logs.records if r.getMessage().startswith("record skipped")]


def test_a_mirror_line_that_does_not_decode_is_reported_by_file_and_line_and_skipped(path, logs):
    path.parent.mkdir(parents=True)
    header, first, change, second = TODAYS_FILE.split(b"\n")[:4]
    path.write_bytes(
        header + b"\n" + first + b"\n"
        + b'["not an entry"]\n'  # line 3
        + b'{"type":"message","id":7,"message":{"role":"user","content":"' + SECRET.encode() + b'"}}\n'  # line 4: the id is no string
        + b"\n"  # line 5: blank, nothing to report
        + change + b"\n" + second + b"\n"
    )
    with TranscriptMirror.open(path, "s") as m:
        assert m.entry_count == 3 and m.skipped_lines == 2
        assert [x.role for x in m.messages()] == ["user", "assistant"]
        # Lines appended later keep their numbers: a torn one after two new entries.
        m.append_custom("note", {}, "k3")
        with path.open("ab") as f:
            f.write(b'{"type":"custom","id":"x9","par')
        m.append_custom("note", {}, "k4")  # starts on a fresh line (10); the torn one is line 9
        with path.open("ab") as f:
            f.write(b'{"type":7,"id":"x8"}\n')  # line 11
        m.refresh()
    reports = [r.fields for r in logs.records if r.getMessage().startswith("record skipped")]  # type: ignore[attr-defined]
    assert [(r["file"], r["line"]) for r in reports] == [(str(path), 3), (str(path), 4), (str(path), 11)]
    assert "$.id" in reports[1]["error"] and "$.type" in reports[2]["error"]
    assert SECRET not in logged(logs)
    with TranscriptMirror.open(path, "s") as again:  # a fresh read numbers them the same, the torn one too
        assert again.skipped_lines == 4
    reports = [r.fields for r in logs.records if r.getMessage().startswith("record skipped")]  # type: ignore[attr-defined]
    assert [r["line"] for r in reports[3:]] == [3, 4, 9, 11]
