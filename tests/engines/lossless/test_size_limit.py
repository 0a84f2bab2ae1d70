"""The bounded store (max_store_mb), ``doctor`` and ``backup``, on both backends."""

from __future__ import annotations

import json
import sqlite3

import pytest
from click.testing import CliRunner

from engines import encode_openclaw
from engines.lossless import DB_NAME, Store, StoreError
from engines.lossless.messages import message_text
from engines.lossless.store import PRUNED_PREFIX
from sidecar.cli import cli

from .conftest import SESSION, SMALL, assemble, make_engine, run_turn, turn


async def _engine_with_history(host, turns: int = 30, config: dict | None = None):
    host.answer_with(lambda p: f"model summary of {len(p.prompt)} chars")
    engine = await make_engine(host, config)
    history: list = []
    for n in range(1, turns + 1):
        say = "turn 1: the heliotropium note, " + " ".join(["filler"] * 100) if n == 1 else None
        await run_turn(engine, history, turn(n, size=120, say=say))
    return engine, history


def _prunable_by_policy(store: Store) -> set[int]:
    """Seqs the policy allows pruning: under a model leaf that is condensed, behind the frame."""
    session = store.session(SESSION)
    out: set[int] = set()
    for s in store.summaries(SESSION):
        if s.depth == 0 and s.parent_id is not None and not s.fallback:
            out.update(q for q in range(s.seq_lo, s.seq_hi + 1) if q <= session.frame_seq)
    return out


async def test_the_size_limit_drops_only_condensed_text_behind_the_frame_and_keeps_every_row(host):
    engine, history = await _engine_with_history(host)
    store = engine.store
    before_assembly = encode_openclaw(await assemble(engine, history))
    allowed = _prunable_by_policy(store)
    assert allowed, "the history should have condensed summaries"
    size = store.size_bytes()
    report = store.enforce_size_limit(1)  # far below: prune all it may
    assert report["pruned"] == len(allowed) and report["freedBytes"] > 0
    rows = store.messages_between(SESSION, 1)
    assert len(rows) == len(history)  # every row, id, turn and time stays
    by_seq = {r.seq: r for r in rows}
    for seq, row in by_seq.items():
        if seq in allowed:
            leaf = store.covering_summary(SESSION, seq)
            assert row.text.startswith(PRUNED_PREFIX) and leaf.id in row.text
        else:
            assert row.text == message_text(history[seq - 1]), f"message {seq} is not covered by a condensed summary"
    # The assembly (frame + raw tail) is byte-identical: nothing it shows was pruned.
    assert encode_openclaw(await assemble(engine, history)) == before_assembly
    # Pruned messages still decode, and lcm_expand says what happened and where to look.
    store.decode(rows)
    leaf = store.covering_summary(SESSION, min(allowed))
    from engines import ToolCallParams

    expanded = await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, name="lcm_expand", arguments={"id": leaf.id}, call_id="c1"))
    assert not expanded.is_error and PRUNED_PREFIX in expanded.text and leaf.id in expanded.text
    # The search index follows: the store is healthy, and a word only a pruned message held is gone.
    assert store.doctor()["problems"] == []
    assert not [h for h in store.grep(SESSION, '"heliotropium"', 5) if h["kind"] == "message"]
    # A second pass finds nothing more to prune, and the store is smaller or no larger.
    assert store.enforce_size_limit(1)["pruned"] == 0
    assert store.size_bytes() <= size * 1.5


async def test_messages_past_the_frame_are_never_pruned(host):
    # Another sidecar may have condensed summaries past this one's frame; the
    # frame's raw messages are what the assembly shows, so they stay.
    engine, _ = await _engine_with_history(host, turns=30)
    store = engine.store
    with store._tx(SESSION) as conn:
        conn.execute("UPDATE sessions SET frame_seq = 0 WHERE session_id = ?", (SESSION,))
    assert store.enforce_size_limit(1)["pruned"] == 0


async def test_a_store_under_its_limit_is_left_alone(host):
    engine, _ = await _engine_with_history(host, turns=12)
    size = engine.store.size_bytes()
    assert engine.store.enforce_size_limit(size * 2) == {"sizeBytes": size, "maxBytes": size * 2, "pruned": 0, "freedBytes": 0}


async def test_maintenance_enforces_max_store_mb(host):
    engine, history = await _engine_with_history(host, turns=24, config={**SMALL, "max_store_mb": 0.01})
    pruned = [r for r in engine.store.messages_between(SESSION, 1) if r.text.startswith(PRUNED_PREFIX)]
    assert pruned
    assert {r.seq for r in pruned} <= _prunable_by_policy(engine.store)


async def test_doctor_finds_a_healthy_store_healthy_and_an_orphan_summary_a_problem(host):
    engine, _ = await _engine_with_history(host, turns=16)
    store = engine.store
    report = store.doctor(max_bytes=1)
    assert report["problems"] == [], report
    assert report["warnings"] and "over its limit" in report["warnings"][0]
    assert report["messages"] == 64 and report["summaries"] > 0
    victim = next(s for s in store.summaries(SESSION) if s.depth == 1)
    with store._tx(SESSION) as conn:
        conn.execute("DELETE FROM summary_sources WHERE summary_id = ?", (victim.id,))
        conn.execute("DELETE FROM summaries WHERE id = ?", (store.summary_sources(victim.id) or ["-"])[0])
    problems = store.doctor()["problems"]
    assert any("summaries without sources" in p for p in problems), problems
    assert any("condensed into a missing summary" not in p for p in problems)


async def test_doctor_finds_a_search_index_out_of_step_with_the_messages(host, backend):
    engine, _ = await _engine_with_history(host, turns=4)
    store = engine.store
    pk, text = store.backend.execute("SELECT pk, text FROM messages ORDER BY pk LIMIT 1").fetchone()
    if backend is None:
        with store._tx(SESSION) as conn:
            conn.execute("INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', ?, ?)", (pk, text))
    else:  # the generated column cannot drift; an index rebuilt from stale data is what doctor would see
        with store._tx(SESSION) as conn:
            conn.execute("ALTER TABLE messages DROP COLUMN text_tsv")
            conn.execute("ALTER TABLE messages ADD COLUMN text_tsv tsvector")
    problems = store.doctor()["problems"]
    assert any("messages" in p and ("fts" in p or "search vector" in p) for p in problems), problems


async def test_backup_copies_a_sqlite_store_that_opens_with_the_same_rows(host, backend, tmp_path):
    engine, history = await _engine_with_history(host, turns=10)
    target = tmp_path / "backup.sqlite3"
    engine.store.backup(target)  # PostgreSQL: a logical copy into a SQLite store
    assert target.stat().st_mode & 0o077 == 0
    assert sqlite3.connect(target).execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    copy_dir = tmp_path / "copy"
    copy_dir.mkdir()
    target.rename(copy_dir / DB_NAME)
    copy = Store.open(copy_dir)
    try:
        assert [r.id for r in copy.messages_between(SESSION, 1)] == [r.id for r in engine.store.messages_between(SESSION, 1)]
        assert [s.id for s in copy.summaries(SESSION)] == [s.id for s in engine.store.summaries(SESSION)]
        assert copy.grep(SESSION, '"turn"', 3)
        assert copy.session(SESSION) == engine.store.session(SESSION)
        assert copy.decode(copy.messages_between(SESSION, 1)) == history
        assert copy.doctor()["problems"] == []
    finally:
        copy.close()
    with pytest.raises(StoreError, match="exists"):
        engine.store.backup(copy_dir / DB_NAME)


def _cli(tmp_path, *args: str, database_url: str | None = None):
    config = tmp_path / "config.toml"
    table = f'[engines.lossless]\ndatabase_url = "{database_url}"\n' if database_url else ""
    config.write_text(f'state_dir = "{tmp_path / "sidecar"}"\n{table}')
    return CliRunner().invoke(cli, ["--config-file", str(config), "engines", "lossless", *args], catch_exceptions=False)


async def test_the_doctor_and_backup_commands(tmp_path, backend):
    from engines.testkit import FakeHost

    with FakeHost(tmp_path / "sidecar" / "engines" / "lossless") as h:
        engine, _ = await _engine_with_history(h, turns=8)
        ok = _cli(tmp_path, "doctor", database_url=backend)
        assert ok.exit_code == 0, ok.output
        assert ok.output.strip().endswith("ok") and "32 messages" in ok.output
        report = json.loads(_cli(tmp_path, "doctor", "--json", database_url=backend).output)
        assert report["problems"] == [] and report["backend"] == ("sqlite" if backend is None else "postgres")
        with engine.store._tx(SESSION) as conn:
            conn.execute("DELETE FROM summaries WHERE depth = 0 AND seq_lo = 1")
        bad = _cli(tmp_path, "doctor", database_url=backend)
        assert bad.exit_code == 1 and "PROBLEM" in bad.output
        saved = _cli(tmp_path, "backup", str(tmp_path / "b.sqlite3"), database_url=backend)
        assert saved.exit_code == 0 and (tmp_path / "b.sqlite3").is_file(), saved.output
        # On PostgreSQL the command says what the copy is and how to back up the database itself.
        assert ("SQLite copy" in saved.output and "pg_dump" in saved.output) == (backend is not None), saved.output
        await engine.dispose()


def test_the_doctor_command_without_a_store_says_so_and_creates_nothing(tmp_path):
    result = _cli(tmp_path, "doctor")
    assert result.exit_code == 1 and "no lossless store" in result.output
    assert not (tmp_path / "sidecar").exists()
