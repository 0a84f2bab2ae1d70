"""Retention (``engines/lossless/retention.py``, ``codex-sidecar engines
lossless prune``) on both backends: expired sessions go whole, a live
session's messages lose their raw text only where condensed model
summaries hold what they said, orphan rows go, and ``--dry-run`` changes
nothing and reports what it would drop."""

from __future__ import annotations

import json
import time

import msgspec
from click.testing import CliRunner

from engines import IngestBatchParams, ToolCallParams
from engines.lossless.retention import DAY_MS, Policy, SessionAge, expired, plan, prune
from engines.lossless.store import PRUNED_PREFIX
from engines.testkit import FakeHost
from sidecar.cli import cli

from .conftest import SESSION, SMALL, conversation, make_engine, run_turn

OLD = "thread-old"


def at(messages, start_ms: int):
    """The messages with their times moved to start at ``start_ms``."""
    first = messages[0].timestamp
    return [msgspec.structs.replace(m, timestamp=start_ms + (m.timestamp - first)) for m in messages]


async def _store_with_a_live_and_an_expired_session(host, config=None):
    """SESSION: 14 turns from yesterday, compacted (model summaries,
    condensed); OLD: 5 turns 100 days ago, never summarised; and orphan rows."""
    host.answer_with(lambda p: f"model summary of {len(p.prompt)} chars")
    engine = await make_engine(host, config)
    now = int(time.time() * 1000)
    live = at(conversation(14, size=120), now - DAY_MS)
    history: list = []
    for k in range(14):
        await run_turn(engine, history, live[k * 4 : k * 4 + 4])
    old = at(conversation(5), now - 100 * DAY_MS)
    await engine.ingest_batch(IngestBatchParams(session_id=OLD, session_key=OLD, messages=old))
    q = engine.store.backend.execute
    q("INSERT INTO summary_sources (summary_id, ord, source_id) VALUES ('sum_gone', 0, 'msg_gone')")
    q("INSERT INTO large_outputs (message_id, session_id, seq, tokens, stub_tokens, summary, created_at) VALUES ('msg_gone', 'x', 1, 1, 1, 's', 1)")
    q("INSERT INTO sessions (session_id) VALUES ('thread-empty')")
    return engine, history


def dump(store) -> dict[str, list]:
    """Every row of every table, comparable."""
    out = {}
    for table in ("messages", "summaries", "summary_sources", "sessions", "large_outputs"):
        rows = store.backend.execute(f"SELECT * FROM {table}").fetchall()
        out[table] = sorted(repr([bytes(v) if isinstance(v, memoryview) else v for v in r]) for r in rows)
    return out


def needed_texts(store, session_id: str) -> set[int]:
    """The seqs of the messages whose raw text the session's summaries or
    assembly still need: not behind the frame, not under a leaf summary, or
    under a leaf that is extractive (its model rewrite reads them) or not yet
    condensed."""
    session = store.session(session_id)
    leaves = [s for s in store.summaries(session_id) if s.depth == 0]
    needed = set()
    for row in store.messages_between(session_id, 1):
        leaf = next((s for s in leaves if s.seq_lo <= row.seq <= s.seq_hi), None)
        if row.seq > session.frame_seq or leaf is None or leaf.fallback or leaf.parent_id is None or len(row.text) <= 256:
            needed.add(row.seq)
    return needed


async def test_prune_keeps_what_a_live_sessions_summaries_depend_on_and_drops_an_expired_session(host, backend):
    engine, history = await _store_with_a_live_and_an_expired_session(host)
    store = engine.store
    before = {r.seq: r.text for r in store.messages_between(SESSION, 1)}
    needed = needed_texts(store, SESSION)
    summaries = store.summaries(SESSION)
    assert any(s.depth >= 1 for s in summaries) and store.session(SESSION).frame_seq > 0

    report = prune(store, Policy(retention_days=30, session_max_messages=4))

    assert report["droppedSessions"] == [OLD]
    assert not store.messages_between(OLD, 1) and OLD not in store.session_ids()
    after = {r.seq: r.text for r in store.messages_between(SESSION, 1)}
    assert after.keys() == before.keys(), "every message row of the live session stays"
    pruned = {seq for seq, text in after.items() if text.startswith(PRUNED_PREFIX)}
    assert pruned and report["prunedMessages"] == {SESSION: len(pruned)}
    assert all(after[seq] == before[seq] for seq in needed), "a text a summary or the assembly needs is kept"
    assert pruned.isdisjoint(needed) and max(pruned) <= max(after) - 4
    assert store.summaries(SESSION) == summaries, "no summary of the live session changes"
    assert "session_max_messages" in after[min(pruned)]
    doctor = store.doctor()
    assert doctor["problems"] == [] and doctor["sessions"] == 1
    assert report["orphans"] == {
        "out-of-line records of a missing message": 1,
        "session rows with no message and no summary": 1,
        "summary sources of a missing summary": 1,
    }
    assert plan(store, Policy(retention_days=30, session_max_messages=4))["orphans"] == {}
    # Recall over the live session still works.
    grep = await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="g", name="lcm_grep", arguments={"query": "turn"}))
    assert not grep.is_error and "msg_" in grep.text


async def test_prune_keeps_the_newest_messages_an_extractive_leafs_and_those_past_a_waiting_frame(host, backend):
    """The states the first test's store does not reach: a condensed leaf
    that is still extractive (written when the model failed, condensed before
    its rewrite), a frame that waits while summaries beyond it are made (a
    warm cache, ``summarized_seq > frame_seq``), and a message limit that
    bites before the summaries' rule does."""
    engine, history = await _store_with_a_live_and_an_expired_session(host)
    store = engine.store
    session = store.session(SESSION)
    leaves = sorted((s for s in store.summaries(SESSION) if s.depth == 0 and s.parent_id is not None), key=lambda s: s.seq_lo)
    extractive, waiting = leaves[1], leaves[-3]
    store.backend.execute("UPDATE summaries SET fallback = 1 WHERE id = ?", (extractive.id,))
    store.backend.execute("UPDATE sessions SET frame_seq = ? WHERE session_id = ?", (waiting.seq_lo - 1, SESSION))
    assert store.session(SESSION).summarized_seq > store.session(SESSION).frame_seq
    before = {r.seq: r.text for r in store.messages_between(SESSION, 1)}
    needed = needed_texts(store, SESSION)
    assert set(range(extractive.seq_lo, extractive.seq_hi + 1)) <= needed and set(range(waiting.seq_lo, session.frame_seq + 1)) <= needed
    keep = max(before) - leaves[len(leaves) // 2].seq_lo  # the limit falls among prunable messages
    report = prune(store, Policy(session_max_messages=keep))
    after = {r.seq: r.text for r in store.messages_between(SESSION, 1)}
    pruned = {seq for seq, text in after.items() if text.startswith(PRUNED_PREFIX)}
    assert pruned and report["prunedMessages"] == {SESSION: len(pruned)}
    assert all(after[seq] == before[seq] for seq in needed), "a text a summary or the assembly needs is kept"
    assert max(pruned) <= max(before) - keep, "the newest session_max_messages keep their text"
    spared = {seq for seq in before if seq not in needed and seq > max(before) - keep}
    assert spared and not spared & pruned, "the limit, not only the summaries' rule, kept these"
    # A limit of 4: only the summaries' rule keeps texts now.
    prune(store, Policy(session_max_messages=4))
    after = {r.seq: r.text for r in store.messages_between(SESSION, 1)}
    assert spared <= {seq for seq, text in after.items() if text.startswith(PRUNED_PREFIX)}
    assert all(after[seq] == before[seq] for seq in needed), "a text a summary or the assembly needs is kept"


async def test_a_session_is_live_whatever_its_age_while_named_live_and_the_rules_off_drop_nothing(host, backend):
    engine, _ = await _store_with_a_live_and_an_expired_session(host)
    kept = prune(engine.store, Policy(retention_days=30), live=[OLD])
    assert kept["droppedSessions"] == [] and engine.store.messages_between(OLD, 1)
    off = prune(engine.store, Policy())
    assert off["droppedSessions"] == [] and off["prunedMessages"] == {}
    assert len(engine.store.session_ids()) == 2


def _cli(tmp_path, *args: str, database_url: str | None = None):
    config = tmp_path / "config.toml"
    table = f'[engines.lossless]\ndatabase_url = "{database_url}"\n' if database_url else ""
    config.write_text(f'state_dir = "{tmp_path / "sidecar"}"\n{table}')
    return CliRunner().invoke(cli, ["--config-file", str(config), "engines", "lossless", "prune", *args], catch_exceptions=False)


async def test_prune_dry_run_changes_nothing_and_reports_what_it_would_drop(tmp_path, backend):
    with FakeHost(tmp_path / "sidecar" / "engines" / "lossless") as h:
        engine, _ = await _store_with_a_live_and_an_expired_session(h)
        before = dump(engine.store)
        await engine.dispose()

        dry = _cli(tmp_path, "--dry-run", "--retention-days", "30", "--session-max-messages", "4", "--json", database_url=backend)
        assert dry.exit_code == 0, dry.output
        would = json.loads(dry.output)
        engine = await make_engine(h)
        assert dump(engine.store) == before, "a dry run changes nothing"
        assert would["dryRun"] is True
        assert [s["sessionId"] for s in would["expiredSessions"]] == [OLD] and would["expiredSessions"][0]["messages"] == 20
        assert would["prunedMessages"][SESSION] > 0 and len(would["orphans"]) == 3

        text = _cli(tmp_path, "--dry-run", "--retention-days", "30", "--session-max-messages", "4", database_url=backend)
        assert f"would drop {OLD} (expired" in text.output and "dry run: nothing changed" in text.output

        done = _cli(tmp_path, "--retention-days", "30", "--session-max-messages", "4", "--json", database_url=backend)
        report = json.loads(done.output)
        assert report["droppedSessions"] == [OLD] and report["prunedMessages"] == would["prunedMessages"]
        assert dump(engine.store) != before and OLD not in engine.store.session_ids()
        again = _cli(tmp_path, "--retention-days", "30", "--session-max-messages", "4", database_url=backend)
        assert "nothing to prune" in again.output
        await engine.dispose()


async def test_maintenance_applies_retention_and_an_expired_session_that_returns_is_stored_anew(host, backend):
    await _store_with_a_live_and_an_expired_session(host)
    engine = await make_engine(host, {**SMALL, "retention_days": 30})  # a sidecar started with retention on
    history = at(conversation(14, size=120), int(time.time() * 1000) - DAY_MS)
    await run_turn(engine, history, conversation(15)[-4:])  # its first maintenance drops OLD
    assert OLD not in engine.store.session_ids()
    old = at(conversation(5), int(time.time() * 1000) - 100 * DAY_MS)
    await engine.ingest_batch(IngestBatchParams(session_id=OLD, session_key=OLD, messages=old))
    assert len(engine.store.messages_between(OLD, 1)) == 20, "the client's whole history is stored again"
    # Dropped by another process (the CLI) while this one still knows it.
    prune(engine.store, Policy(retention_days=30))
    more = at(conversation(6), int(time.time() * 1000))[-4:]
    await engine.ingest_batch(IngestBatchParams(session_id=OLD, session_key=OLD, messages=[*old, *more]))
    assert len(engine.store.messages_between(OLD, 1)) == 24


def test_expiry_is_by_last_activity_with_unknown_ages_live_sessions_and_orphans_decided():
    now = 1_800_000_000_000
    ages = [
        SessionAge(session_id="fresh", session_key=None, last_activity=now - 2 * DAY_MS, messages=3, summaries=0),
        SessionAge(session_id="stale", session_key=None, last_activity=now - 40 * DAY_MS, messages=3, summaries=1),
        SessionAge(session_id="unknown", session_key=None, last_activity=0, messages=3, summaries=0),
        SessionAge(session_id="orphan", session_key=None, last_activity=now, messages=0, summaries=2),
        SessionAge(session_id="busy", session_key=None, last_activity=now - 90 * DAY_MS, messages=3, summaries=0),
    ]
    got = [a.session_id for a in expired(ages, Policy(retention_days=30), now, live=["busy"])]
    assert got == ["stale", "orphan"]
    assert [a.session_id for a in expired(ages, Policy(), now)] == ["orphan"]
