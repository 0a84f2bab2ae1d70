"""Summary calls batched: several summaries asked for in one host call,
the answer parsed by its numbered sections, what it misses asked for alone."""

from __future__ import annotations

from engines import CompleteResult
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
