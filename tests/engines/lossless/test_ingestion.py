"""Ingestion is idempotent whatever replays it, and keeps what is new."""

from __future__ import annotations

import json

from engines import (
    AssistantMessage,
    BootstrapParams,
    CompactionSummaryMessage,
    IngestBatchParams,
    IngestParams,
    TextBlock,
    UserMessage,
    encode_openclaw,
    from_openclaw,
    to_openclaw,
)
from engines.lossless import LosslessEngine

from .conftest import SESSION, T0, assemble, conversation, make_engine, run_turn, turn


def _seqs(engine: LosslessEngine) -> list[int]:
    return [r.seq for r in engine.store.messages_between(SESSION, 1)]


async def test_replayed_after_turn_ingest_batch_and_ingest_store_nothing_twice(host):
    engine = await make_engine(host)
    history: list = []
    for n in range(1, 4):
        await run_turn(engine, history, turn(n), maintain=False)
    stored = engine.status(SESSION)["messages"]
    assert stored == len(history) == 12
    # The same snapshot again (a replayed turn/completed), as a batch, one by one.
    await run_turn(engine, history, [], maintain=False)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    for message in history:
        result = await engine.ingest(IngestParams(session_id=SESSION, session_key=SESSION, message=message))
        assert result.ingested is False
    assert engine.status(SESSION)["messages"] == stored
    assert _seqs(engine) == list(range(1, stored + 1))


async def test_a_restarted_engine_replaying_decoded_copies_stores_nothing_twice(host, tmp_path):
    engine = await make_engine(host)
    history = conversation(3)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    await engine.dispose()
    # A new process reads the messages back from the transcript: equal values, new objects.
    copies = [from_openclaw(to_openclaw(m)) for m in history]
    restarted = await make_engine(host)
    count = await restarted.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=copies))
    assert count.ingested_count == 0
    await assemble(restarted, copies)
    assert restarted.status(SESSION)["messages"] == len(history)


async def test_bootstrap_from_the_session_file_then_after_turn_store_each_message_once(host, tmp_path):
    history = conversation(2)
    path = tmp_path / "session.jsonl"
    lines = [{"type": "session", "version": 4, "id": SESSION}]
    parent = None
    for i, m in enumerate(history):
        lines.append({"type": "message", "id": f"e{i}", "parentId": parent, "message": to_openclaw(m)})
        parent = f"e{i}"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n{torn", encoding="utf-8")
    engine = await make_engine(host)
    result = await engine.bootstrap(BootstrapParams(session_id=SESSION, session_key=SESSION, session_file=str(path)))
    assert result.bootstrapped and result.imported_messages == len(history)
    await run_turn(engine, list(history), [], maintain=False)
    assert engine.status(SESSION)["messages"] == len(history)
    missing = await engine.bootstrap(BootstrapParams(session_id=SESSION, session_key=SESSION, session_file=str(tmp_path / "nope.jsonl")))
    assert missing.bootstrapped is False


async def test_two_identical_messages_of_one_batch_are_both_kept(host):
    engine = await make_engine(host)
    same = AssistantMessage(content=[TextBlock(text="ok")], timestamp=T0)
    batch = [UserMessage(content="go", timestamp=T0), same, AssistantMessage(content=[TextBlock(text="ok")], timestamp=T0)]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=batch))
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=batch))
    assert engine.status(SESSION)["messages"] == 3


async def test_new_messages_where_reverted_ones_were_are_stored(host):
    # A client's revert takes a turn out and a new turn takes its place: a key
    # from the position in the session would call the new turn a replay.
    engine = await make_engine(host)
    kept = turn(1)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=kept + turn(2)))
    replacement = turn(2, say="a different second prompt")
    replacement = [UserMessage(content="a different second prompt", timestamp=T0 + 99_000), *replacement[1:]]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=kept + replacement))
    texts = [r.text for r in engine.store.messages_between(SESSION, 1)]
    assert "a different second prompt" in texts
    assert engine.status(SESSION)["messages"] == 9  # 8, plus the new prompt


async def test_a_compaction_summary_at_the_head_of_the_view_is_not_stored_over_known_history(host):
    engine = await make_engine(host)
    history = conversation(2)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    view = [CompactionSummaryMessage(summary="native summary", tokens_before=100, timestamp=T0 + 500_000), *history[4:], *turn(3)]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=view))
    roles = [r.role for r in engine.store.messages_between(SESSION, 1)]
    assert "compactionSummary" not in roles
    assert len(roles) == 12


async def test_a_compaction_summary_opening_an_unknown_session_is_kept(host):
    engine = await make_engine(host)
    view = [CompactionSummaryMessage(summary="what came before", tokens_before=100, timestamp=T0), *turn(1)]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=view))
    rows = engine.store.messages_between(SESSION, 1)
    assert rows[0].role == "compactionSummary" and rows[0].text == "what came before"


async def test_messages_are_stored_verbatim_with_turn_numbers(host):
    engine = await make_engine(host)
    history = conversation(2)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    rows = engine.store.messages_between(SESSION, 1)
    assert [encode_openclaw(m) for m in engine.store.decode(rows)] == [encode_openclaw(m) for m in history]
    assert [r.turn for r in rows] == [1, 1, 1, 1, 2, 2, 2, 2]
