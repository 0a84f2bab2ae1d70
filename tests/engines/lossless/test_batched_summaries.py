"""Summary calls batched: several summaries asked for in one host call,
the answer parsed by its numbered sections, what it misses asked for alone."""

from __future__ import annotations

from engines import CompactParams, CompleteResult
from engines.lossless.compaction import condense_batch
from engines.lossless.summarize import Source, batch_prompt, parse_batch
from tools.fake_model import Rules

from .conftest import SESSION, SMALL, make_engine, run_turn, turn


def test_a_batched_answer_is_split_by_its_numbered_sections():
    text = "### SUMMARY 1\nfirst part\n\n### SUMMARY 2\nsecond\npart\n### SUMMARY 3\n"
    assert parse_batch(text, 3) == {1: "first part", 2: "second\npart"}  # an empty section is missing
    assert parse_batch("no sections at all", 2) == {}
    assert parse_batch("### SUMMARY 1\na\n### SUMMARY 1\nb\n### SUMMARY 7\nc", 2) == {}  # twice, or out of range
    assert parse_batch("## Summary 2:\nlower case and a colon", 2) == {2: "lower case and a colon"}


def test_the_fake_model_answers_a_batched_prompt_section_by_section():
    prompt = batch_prompt(
        [
            (0, (1, 2), (0, 0), [Source("m1", "m1 turn 1 user", "alpha one")], 40),
            (1, (3, 9), (0, 0), [Source("s1", "s1 depth 0", "bravo two")], 60),
        ]
    )
    answer = Rules().decide({"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}]})[1].text
    assert parse_batch(answer, 2) == {1: "Summary: alpha one", 2: "Summary: bravo two"}


def _config(**extra):
    return {**SMALL, "token_budget": 3_000, "cache_ttl": 0.0, "leaf_chunk_tokens": 150, **extra}


async def test_several_leaf_summaries_come_from_one_host_call(host):
    def answer(params):
        n = params.prompt.count("### EXCERPT ")
        if n == 0:
            return CompleteResult(text="one alone")
        return CompleteResult(text="\n".join(f"### SUMMARY {k}\nbatched {k}" for k in range(1, n + 1)))

    host.answer_with(answer)
    before = len(host.calls)
    engine = await make_engine(host, _config())
    history: list = []
    for n in range(1, 25):
        await run_turn(engine, history, turn(n))
    leaves = [s for s in engine.store.summaries(SESSION) if s.depth == 0]
    calls = host.calls[before:]
    assert len(leaves) >= 4
    assert all(s.text.startswith("batched ") for s in leaves)
    assert len(calls) < len(engine.store.summaries(SESSION))  # fewer calls than summaries


async def test_a_malformed_batched_answer_falls_back_to_one_call_per_summary(host):
    def answer(params):
        if "### EXCERPT " in params.prompt:
            return CompleteResult(text="### SUMMARY 1\nonly the first\nand then prose without markers")
        return CompleteResult(text="one alone")

    host.answer_with(answer)
    engine = await make_engine(host, _config())
    history: list = []
    for n in range(1, 25):
        await run_turn(engine, history, turn(n))
    texts = [s.text for s in engine.store.summaries(SESSION)]
    assert any(t.startswith("only the first") for t in texts)
    assert "one alone" in texts  # the sections the answer missed, asked for alone
    assert not any(s.fallback for s in engine.store.summaries(SESSION))


async def test_batch_size_one_is_one_call_per_summary(host):
    host.answer_with(lambda params: CompleteResult(text="### SUMMARY 1\nx" if "### EXCERPT" in params.prompt else "one alone"))
    before = len(host.calls)
    engine = await make_engine(host, _config(summary_batch_size=1))
    history: list = []
    for n in range(1, 25):
        await run_turn(engine, history, turn(n))
    assert len(host.calls) - before == len(engine.store.summaries(SESSION))


async def test_a_batched_answer_over_its_length_keeps_every_section(host):
    """8k bench: the fake model's summaries ran past twice their target, the
    whole batched answer was capped first, which flattened its lines, no
    section marker was left, and every summary of the batch was asked for
    again on its own (a third of the summary calls, each re-reading its
    sources). Each section is capped on its own instead."""

    def answer(params):
        n = params.prompt.count("### EXCERPT ")
        if n == 0:
            return CompleteResult(text="one alone")
        return CompleteResult(text="\n".join(f"### SUMMARY {k}\nbatched {k} " + "long " * 400 for k in range(1, n + 1)))

    host.answer_with(answer)
    engine = await make_engine(host, _config())
    history: list = []
    for n in range(1, 25):
        await run_turn(engine, history, turn(n))
    summaries = engine.store.summaries(SESSION)
    assert len([s for s in summaries if s.depth == 0]) >= 4
    assert all(s.text.startswith("batched ") for s in summaries), "a section was asked for again alone"
    assert not any("### EXCERPT" not in c.prompt for c in host.calls)  # no call for one summary
    target = engine._context(SESSION).knobs.leaf_summary_tokens
    assert all(s.tokens <= 2 * target for s in summaries if s.depth == 0)  # each section capped on its own


async def test_condensations_ride_in_the_leaves_call_and_a_cascade_waits_for_the_next_step(host):
    """One summary call a step: the condensed summaries whose sources exist
    when a step starts are asked for with its leaves; one over the step's
    own new leaves waits for the next step (at 8k each call carries ~1,400
    tokens of Codex's framing; half the calls were such cascades)."""
    host.answer_with(lambda params: CompleteResult(text="\n".join(f"### SUMMARY {k}\ns{k}" for k in range(1, params.prompt.count("### EXCERPT ") + 1)) or "alone"))
    engine = await make_engine(host, _config(condense_fanout=2, summary_batch_size=64))
    history: list = []
    calls_per_step: list[int] = []
    for n in range(1, 40):
        before, steps = len(host.calls), engine.status(SESSION)["compactionSteps"]
        await run_turn(engine, history, turn(n))
        if engine.status(SESSION)["compactionSteps"] > steps or len(host.calls) > before:
            calls_per_step.append(len(host.calls) - before)
    summaries = engine.store.summaries(SESSION)
    assert any(s.depth >= 1 for s in summaries), "nothing was condensed"
    mixed = [c for c in host.calls if "summaries of earlier parts" in c.prompt and " messages (turns" in c.prompt]
    assert mixed, "no condensation rode in a leaves' call"
    assert max(calls_per_step) == 1, calls_per_step


async def test_a_forced_step_condenses_to_the_end(host):
    host.answer_with(lambda params: CompleteResult(text="\n".join(f"### SUMMARY {k}\ns{k}" for k in range(1, params.prompt.count("### EXCERPT ") + 1)) or "alone"))
    engine = await make_engine(host, _config(condense_fanout=2))
    history: list = []
    for n in range(1, 20):
        await run_turn(engine, history, turn(n), maintain=False)
    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    assert condense_batch(engine.store.summaries(SESSION, active_only=True), 2) == []  # nothing left to condense
