"""Compaction steps, fallback summaries, and what the assembly holds."""

from __future__ import annotations

from engines import (
    CompactionSummaryMessage,
    CompactParams,
    EngineHostError,
    IngestBatchParams,
    MaintainParams,
    encode_openclaw,
)
from engines.tokens import estimate_messages_tokens

from .conftest import SESSION, SMALL, assemble, conversation, make_engine, run_turn, turn


async def _maintain(engine):
    return await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))


async def test_maintenance_makes_leaf_and_condensed_summaries_and_the_assembly_fits(host):
    engine = await make_engine(host)
    history: list = []
    for n in range(1, 31):
        await run_turn(engine, history, turn(n))
    status = engine.status(SESSION)
    depths = status["summariesByDepth"]
    assert depths["0"]["total"] >= SMALL["condense_fanout"] + 1
    assert "1" in depths and depths["1"]["total"] >= 1
    result = await assemble(engine, history)
    assert result.estimated_tokens <= SMALL["token_budget"]
    assert estimate_messages_tokens(result.messages) <= SMALL["token_budget"]
    assert isinstance(result.messages[0], CompactionSummaryMessage)
    assert result.messages[0].summary.startswith("[summary sum_")
    assert result.system_prompt_addition and "lcm_grep" in result.system_prompt_addition
    # Active summaries cover the summarised messages without gap or overlap.
    active = engine.store.summaries(SESSION, active_only=True)
    assert active[0].seq_lo == 1
    assert all(b.seq_lo == a.seq_hi + 1 for a, b in zip(active, active[1:]))
    assert active[-1].seq_hi == status["summarizedThroughSeq"]
    # Every condensed summary covers exactly its sources.
    for s in engine.store.summaries(SESSION):
        if s.depth:
            children = [engine.store.summary(SESSION, i) for i in engine.store.summary_sources(s.id)]
            assert all(c.depth == s.depth - 1 and c.parent_id == s.id for c in children)
            assert (children[0].seq_lo, children[-1].seq_hi) == (s.seq_lo, s.seq_hi)


async def test_summaries_are_never_made_on_the_assemble_path(host):
    engine = await make_engine(host)
    history: list = []
    for n in range(1, 21):
        await run_turn(engine, history, turn(n), maintain=False)
    await assemble(engine, history)
    assert host.calls == []
    assert engine.status(SESSION)["summariesByDepth"] == {}


async def test_the_assembly_only_appends_between_compaction_steps(host):
    engine = await make_engine(host)
    history: list = []
    previous = None
    previous_step = None
    steps_seen = set()
    for n in range(1, 40):
        result = await run_turn(engine, history, turn(n))
        step = engine.status(SESSION)["lastAssembly"]["step"]
        current = [encode_openclaw(m) for m in result.messages]
        if previous is not None and step == previous_step:
            assert current[: len(previous)] == previous, f"turn {n}"
        steps_seen.add(step)
        previous, previous_step = current, step
    assert len(steps_seen) >= 3  # the check above ran across several steps


async def test_the_same_inputs_give_the_same_assembly_bytes(tmp_path):
    from engines.testkit import FakeHost

    outputs = []
    for name in ("a", "b"):
        with FakeHost(tmp_path / name) as host:
            host.answer_with(lambda p: f"summary of {len(p.prompt)} chars")
            engine = await make_engine(host)
            history: list = []
            for n in range(1, 25):
                await run_turn(engine, history, turn(n))
            result = await assemble(engine, history)
            outputs.append(encode_openclaw(result))
            await engine.dispose()
    assert outputs[0] == outputs[1]


async def test_a_failing_summariser_gives_extractive_summaries_that_later_retries_replace(host):
    host.fail_all(EngineHostError("no app-server"))
    engine = await make_engine(host)
    history: list = []
    for n in range(1, 20):  # two frames: the first, early, has no room for a summary beside its tail
        await run_turn(engine, history, turn(n))
    status = engine.status(SESSION)
    assert status["compactionSteps"] >= 1
    assert status["fallbackPending"] >= 1
    stand_in = engine.store.fallback_summaries(SESSION, 100)[0]
    assert stand_in.text.startswith("(extractive summary")
    assert "turn" in stand_in.text
    result = await assemble(engine, history)
    assert any(isinstance(m, CompactionSummaryMessage) and ", extractive]" in m.summary for m in result.messages)
    # The summariser is back: maintenance rewrites stand-ins, a few at a time.
    host.answer_with("a proper summary")
    pending = status["fallbackPending"]
    for _ in range(pending):
        await _maintain(engine)
    assert engine.status(SESSION)["fallbackPending"] == 0
    assert engine.store.summary(SESSION, stand_in.id).text == "a proper summary"
    assert engine.store.summary(SESSION, stand_in.id).fallback is False


async def test_a_hanging_summariser_times_out_into_extractive_summaries(host, autojump_clock):
    host.hang_all()
    engine = await make_engine(host)
    history: list = []
    for n in range(1, 12):
        await run_turn(engine, history, turn(n))
    status = engine.status(SESSION)
    assert status["compactionSteps"] >= 1
    assert status["lastCompaction"]["fallbackSummaries"] >= 1
    assert set(status["lastCompaction"]["summaryOutcomes"]) <= {"timeout"}


async def test_a_spent_step_deadline_skips_the_summariser_and_still_compacts(host, autojump_clock):
    host.hang_all()
    engine = await make_engine(host, {**SMALL, "summary_timeout": 5.0, "step_deadline": 6.0})
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=conversation(12)))
    result = await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    assert result.compacted
    details = result.result.details
    assert details["leafSummaries"] >= 2
    assert details["fallbackSummaries"] == details["leafSummaries"] + details["condensedSummaries"]
    # One batched call for the leaves, cut at the 6 s deadline; nothing asked after it.
    assert len(host.calls) == 1 and "### EXCERPT 2:" in host.calls[0].prompt


async def test_compact_runs_a_step_and_reports_no_summary_text(host):
    engine = await make_engine(host)
    history = conversation(8)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    before = await assemble(engine, history)
    result = await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    assert result.ok and result.compacted
    assert result.result.summary is None
    assert result.result.tokens_after < result.result.tokens_before
    after = await assemble(engine, history)
    assert len(after.messages) < len(before.messages)
    again = await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    assert again.ok and not again.compacted


async def test_a_step_never_cuts_between_a_tool_call_and_its_result(host):
    engine = await make_engine(host, {**SMALL, "fresh_tail_messages": 0, "fresh_tail_tokens": 1, "leaf_chunk_tokens": 1})
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=conversation(6)))
    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    rows = engine.store.messages_between(SESSION, 1)
    by_seq = {r.seq: r for r in rows}
    for s in engine.store.summaries(SESSION):
        first, last = by_seq[s.seq_lo], by_seq[s.seq_hi]
        assert first.role != "toolResult", s
        assert not (last.role == "assistant" and last.text.startswith("[tool call")), s
