"""The store: migrations, refusal of newer files, kill -9 safety, config, binding."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engines import AssembleParams, IngestBatchParams, load_engine
from engines.lossless import DB_NAME, SCHEMA_VERSION, LosslessEngine, LosslessNotReady, Store, StoreError, parse_config, status
from engines.lossless.backends import enter_wal
from engines.lossless.store import MIGRATIONS
from engines.testkit import FakeHost

from .conftest import SESSION, SMALL, make_engine, run_turn, turn

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def backend():
    """These tests are about the SQLite file itself; test_backends.py has the PostgreSQL ones."""
    yield None


def _v1_file(folder: Path) -> Path:
    """A store written by schema version 1 (no search index yet), with a message."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / DB_NAME
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)")
    for statement in MIGRATIONS[0][1]:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version VALUES (1, 0)")
    conn.execute(
        "INSERT INTO messages (id, session_id, ident, seq, turn, role, tool_name, timestamp, tokens, text, body) "
        "VALUES ('msg_00000000000000aa', ?, 'i1', 1, 1, 'user', NULL, 0, 5, 'the old heliotrope fact', "
        "'{\"role\":\"user\",\"content\":\"the old heliotrope fact\",\"timestamp\":0}')",
        (SESSION,),
    )
    conn.close()
    return path


def test_an_older_store_is_migrated_and_its_rows_become_searchable(tmp_path):
    _v1_file(tmp_path)
    store = Store.open(tmp_path)
    try:
        assert store.schema_version() == SCHEMA_VERSION
        hits = store.grep(SESSION, '"heliotrope"', 5)
        assert [h["id"] for h in hits] == ["msg_00000000000000aa"]
    finally:
        store.close()
    reopened = Store.open(tmp_path)  # a second open applies nothing twice
    assert reopened.schema_version() == SCHEMA_VERSION
    reopened.close()


async def test_a_migrated_store_keeps_working_for_the_engine(tmp_path, host):
    _v1_file(Path(host.state_dir))
    engine = await make_engine(host)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=turn(2)))
    rows = engine.store.messages_between(SESSION, 1)
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5]
    assert rows[1].turn == 2


def test_a_store_from_a_newer_engine_is_refused_with_a_clear_error(tmp_path):
    Store.open(tmp_path).close()
    conn = sqlite3.connect(tmp_path / DB_NAME, isolation_level=None)
    conn.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError, match="newer than this engine"):
        Store.open(tmp_path)


def test_a_file_that_is_not_a_database_is_a_clear_error(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="unusable"):
        Store.open(tmp_path)


def test_the_store_file_is_private(tmp_path):
    Store.open(tmp_path / "state").close()
    assert (tmp_path / "state" / DB_NAME).stat().st_mode & 0o077 == 0


class _MidSwitch(sqlite3.Connection):
    """A connection whose first WAL switches find another connection mid-switch
    of the same new file: SQLite then answers ``database is locked`` at once
    (SQLITE_BUSY without its busy handler; 1 open in a few hundred when two
    processes open a new store together under load)."""

    busy = 0
    error = sqlite3.SQLITE_BUSY

    def execute(self, sql, *args):
        if sql.startswith("PRAGMA journal_mode") and self.busy:
            self.busy -= 1
            exc = sqlite3.OperationalError("database is locked" if self.error == sqlite3.SQLITE_BUSY else "disk I/O error")
            exc.sqlite_errorcode = self.error
            raise exc
        return super().execute(sql, *args)


def _mid_switch(path: Path, busy: int, error: int = sqlite3.SQLITE_BUSY) -> _MidSwitch:
    conn = sqlite3.connect(path, isolation_level=None, factory=_MidSwitch)
    conn.busy, conn.error = busy, error
    return conn


def test_a_store_opened_while_another_switches_it_to_wal_waits_for_it(tmp_path):
    conn = _mid_switch(tmp_path / DB_NAME, busy=3)
    try:
        enter_wal(conn, time.monotonic() + 30)
        assert conn.busy == 0
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_opening_a_store_still_fails_on_other_errors_and_past_the_busy_timeout(tmp_path):
    conn = _mid_switch(tmp_path / DB_NAME, busy=1, error=sqlite3.SQLITE_IOERR)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        enter_wal(conn, time.monotonic() + 30)
    conn.close()
    conn = _mid_switch(tmp_path / DB_NAME, busy=1_000_000)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        enter_wal(conn, time.monotonic())
    conn.close()


_CHILD = """
import sys, trio
sys.path.insert(0, {repo!r})
from engines import IngestBatchParams, CompactParams
from engines.lossless import LosslessEngine
from engines.testkit import FakeHost
from tests.engines.lossless.conftest import SMALL, SESSION, turn

async def main():
    engine = LosslessEngine(dict(SMALL))
    await engine.bind(FakeHost({state!r}))
    n = 0
    while True:
        n += 1
        await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=turn(n)))
        if n % 3 == 0:
            await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
        print(n, flush=True)

trio.run(main)
"""


def _check_invariants(folder: Path) -> int:
    """The store's invariants after a kill; returns the number of messages."""
    store = Store.open(folder)
    try:
        rows = store.messages_between(SESSION, 1)
        assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
        assert len(rows) % 4 == 0, "a turn's batch is written whole or not at all"
        assert len({r.id for r in rows}) == len(rows)
        session = store.session(SESSION)
        leaves = [s for s in store.summaries(SESSION) if s.depth == 0]
        assert session.summarized_seq == max((s.seq_hi for s in leaves), default=0)
        for s in store.summaries(SESSION):
            sources = store.summary_sources(s.id)
            assert sources, s.id
            if s.depth == 0:
                assert sources == [r.id for r in rows[s.seq_lo - 1 : s.seq_hi]]
        assert session.frame_seq <= session.summarized_seq
        conn = sqlite3.connect(folder / DB_NAME)
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")
        conn.execute("INSERT INTO summaries_fts (summaries_fts) VALUES ('integrity-check')")
        conn.close()
        return len(rows)
    finally:
        store.close()


@pytest.mark.parametrize("lines_before_kill", [1, 7, 20])
async def test_sigkill_at_any_point_loses_and_duplicates_nothing(tmp_path, lines_before_kill):
    state = tmp_path / "state"
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(repo=str(REPO), state=str(state))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    try:
        done = 0
        for _ in range(lines_before_kill):
            line = child.stdout.readline()
            assert line, "the writer died on its own"
            done = int(line)
    finally:
        child.send_signal(signal.SIGKILL)  # while it is writing the next turn
        child.wait()
        child.stdout.close()
    count = _check_invariants(state)
    assert count >= done * 4  # every turn it reported is there
    # A restart replays every turn it may have written, and one more.
    engine = LosslessEngine(dict(SMALL))
    await engine.bind(FakeHost(state))
    replay = [m for n in range(1, count // 4 + 2) for m in turn(n)]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=replay))
    await engine.dispose()
    assert _check_invariants(state) == len(replay)


def test_config_refuses_unknown_keys_and_bad_values():
    with pytest.raises(ValueError, match="unknown key 'token_limit'"):
        parse_config({"token_limit": 5})
    with pytest.raises(ValueError, match="condense_fanout must be at least 2"):
        parse_config({"condense_fanout": 1})
    with pytest.raises(ValueError, match="compact_target < compact_threshold"):
        parse_config({"compact_threshold": 0.4, "compact_target": 0.5})
    with pytest.raises(ValueError, match="token_budget: expected `int`, got `str`"):
        parse_config({"token_budget": "big"})
    assert parse_config({}).token_budget == 32_000


def test_a_mistyped_config_key_names_the_key_it_meant_and_the_valid_ones():
    """A typo in [engines.lossless] reads as one in the sidecar's own
    settings does: the key, a suggestion, the keys there are."""
    with pytest.raises(ValueError) as typo:
        parse_config({"retention_day": 30})
    message = str(typo.value)
    assert message.startswith("invalid [engines.lossless] config: unknown key 'retention_day' (did you mean 'retention_days'?); valid keys: ")
    assert "session_max_messages" in message.split("valid keys: ", 1)[1]
    with pytest.raises(ValueError) as far:
        parse_config({"colour": "blue"})
    assert "did you mean" not in str(far.value) and "unknown key 'colour'; valid keys: " in str(far.value)


def test_the_loader_builds_the_engine_from_its_config_table(tmp_path):
    engine = load_engine("lossless", {"token_budget": 1234, "state_dir": str(tmp_path)})
    assert isinstance(engine, LosslessEngine)
    assert engine.cfg.token_budget == 1234
    assert engine.info.owns_compaction and engine.info.turn_maintenance_mode == "background"


async def test_an_unbound_engine_without_a_state_dir_says_so(tmp_path):
    engine = LosslessEngine({})
    with pytest.raises(LosslessNotReady, match="state_dir"):
        await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=[]))


async def test_an_unbound_engine_with_a_state_dir_works_with_extractive_summaries(tmp_path):
    engine = LosslessEngine({**SMALL, "state_dir": str(tmp_path)})
    history: list = []
    for n in range(1, 12):
        await run_turn(engine, history, turn(n))
    report = status(tmp_path, SESSION)
    assert report["compactionSteps"] >= 1
    assert report["fallbackPending"] >= 1
    assert report["lastCompaction"]["summaryOutcomes"] == {"unbound": report["lastCompaction"]["leafSummaries"] + report["lastCompaction"]["condensedSummaries"]}
    assert status(tmp_path)[0]["sessionId"] == SESSION


def test_a_store_that_cannot_be_opened_says_what_would_fix_it(tmp_path, monkeypatch):
    """A damaged file: restore a backup or move it aside. A store of
    another user: run as that user. An error of the moment (locked,
    read-only) keeps its own words, never the advice to replace the file."""
    import errno
    import os

    from engines.lossless import store as store_module

    (tmp_path / DB_NAME).write_text("not a database\n")
    with pytest.raises(StoreError) as damaged:
        Store.open(tmp_path)
    assert "is unusable: file is not a database; fix: put back a copy made by `codex-sidecar engines lossless backup`, or move the file aside" in str(damaged.value)

    def locked(path):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store_module.SqliteBackend, "open", staticmethod(locked))
    with pytest.raises(StoreError) as busy:
        Store.open(tmp_path / "other")
    assert str(busy.value).endswith("is unusable: database is locked") and "fix" not in str(busy.value)

    real_open = os.open

    def refused(path, *args, **kwargs):
        if str(path).endswith(DB_NAME):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(store_module.os, "open", refused)
    with pytest.raises(StoreError) as theirs:
        Store.open(tmp_path / "theirs")
    assert str(theirs.value) == (
        f"cannot open the lossless store {tmp_path / 'theirs' / DB_NAME}: Permission denied; "
        "fix: run this as the user the sidecar runs as (the file's owner), or give the state dir to that user (chown -R)"
    )
