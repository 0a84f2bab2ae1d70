"""lcm_expand_query: a question answered from the original messages by a
host.complete call of its own, bounded and failing open."""

from __future__ import annotations

import re

from engines import (
    CompactParams,
    IngestBatchParams,
    TextBlock,
    ToolCallParams,
    ToolResultMessage,
    UserMessage,
)
from engines.lossless import LosslessEngine
from engines.lossless.expand_query import SYSTEM_PROMPT
from engines.tokens import count_tokens

from .conftest import SESSION, SMALL, T0, conversation, make_engine


async def call(engine, **arguments):
    return await engine.call_tool(
        ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="q1", name="lcm_expand_query", arguments=arguments)
    )


async def _engine_with_facts(host, config=None):
    engine = await make_engine(host, config)
    history = conversation(10)
    history[1 * 4] = UserMessage(content="remember the launch code ZEBRA-4417 please", timestamp=history[4].timestamp)
    history[8 * 4] = UserMessage(content="the launch code changed to ZEBRA-9001", timestamp=history[32].timestamp)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    return engine


def _cite_first_id(params):
    ids = re.findall(r"\[(msg_[0-9a-f]{16}) ", params.prompt)
    return f"The launch code is now ZEBRA-9001 (it was ZEBRA-4417).\nSources: {ids[-1]}"


async def test_it_is_offered_with_a_query_and_optional_ids_and_cap(host):
    engine = await make_engine(host)
    spec = {s.name: s for s in engine.tools()}["lcm_expand_query"]
    assert spec.input_schema["required"] == ["query"]
    assert set(spec.input_schema["properties"]) == {"query", "summary_ids", "max_tokens"}


async def test_the_matching_messages_go_to_one_model_call_and_the_answer_comes_back_with_its_ids(host):
    engine = await _engine_with_facts(host)
    host.answer_with(_cite_first_id)
    result = await call(engine, query="launch code")
    assert not result.is_error, result.text
    assert len(host.calls) == 1
    asked = host.calls[0]
    assert asked.system == SYSTEM_PROMPT
    assert "Question: launch code" in asked.prompt
    assert "ZEBRA-4417" in asked.prompt and "ZEBRA-9001" in asked.prompt
    cited = re.findall(r"\[(msg_[0-9a-f]{16}) ", asked.prompt)[-1]
    assert result.text.startswith("The launch code is now ZEBRA-9001")
    assert f"ids used: {cited}" in result.text
    assert "Sources:" not in result.text  # the model's own line is replaced by the checked one


async def test_summary_ids_are_expanded_down_to_their_raw_messages(host):
    engine = await _engine_with_facts(host)
    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    leaf = engine.store.summaries(SESSION)[0]
    rows = engine.store.messages_between(SESSION, leaf.seq_lo, leaf.seq_hi)
    result = await call(engine, query="what ran first?", summary_ids=[leaf.id])
    assert not result.is_error
    prompt = host.calls[-1].prompt
    assert all(f"[{r.id} " in prompt for r in rows)
    assert leaf.id in result.text  # named among the sources expanded
    unknown = await call(engine, query="x", summary_ids=["sum_0123456789abcdef"])
    assert unknown.is_error and "no summary sum_0123456789abcdef" in unknown.text


async def test_the_answer_and_its_ids_stay_within_max_tokens(host):
    engine = await _engine_with_facts(host)
    host.answer_with("ZEBRA " * 5000)
    result = await call(engine, query="launch code", max_tokens=200)
    assert not result.is_error
    assert count_tokens(result.text) <= 200
    assert "ids used:" in result.text
    default = await call(engine, query="launch code")
    assert count_tokens(default.text) <= SMALL.get("expand_query_default_tokens", 1_000)


async def test_the_expanded_input_is_capped(host):
    engine = await _engine_with_facts(host, {**SMALL, "expand_query_input_tokens": 300})
    result = await call(engine, query="turn alpha")
    assert not result.is_error
    prompt = host.calls[-1].prompt
    excerpts = prompt.split("oldest first):\n\n", 1)[1]
    assert count_tokens(excerpts) <= 300
    assert "more did not fit" in result.text


async def test_a_failing_or_hanging_model_gives_a_clear_error_naming_the_sources(host):
    engine = await _engine_with_facts(host, {**SMALL, "expand_query_timeout": 0.3})
    host.fail_all()
    failed = await call(engine, query="launch code")
    assert failed.is_error
    assert "could not answer" in failed.text and "EngineHostError" in failed.text
    assert "lcm_expand" in failed.text and re.search(r"msg_[0-9a-f]{16}", failed.text)
    host.hang_all()
    hung = await call(engine, query="launch code")
    assert hung.is_error and "did not answer within 0.3 s" in hung.text
    host.answer_with("   ")
    empty = await call(engine, query="launch code")
    assert empty.is_error and "empty answer" in empty.text


async def test_without_a_host_it_says_so_and_points_at_lcm_expand(tmp_path):
    engine = LosslessEngine({**SMALL, "state_dir": str(tmp_path / "unbound")})
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=conversation(2)))
    result = await call(engine, query="alpha")
    assert result.is_error and "no model access" in result.text and "lcm_expand" in result.text


async def test_bad_arguments_and_no_match(host):
    engine = await _engine_with_facts(host)
    nothing = await call(engine, query="qwertyuiop")
    assert not nothing.is_error and nothing.text.startswith("No match") and host.calls == []
    for arguments, says in [
        ({}, "query must be a non-empty string"),
        ({"query": "x", "max_tokens": 5}, "max_tokens must be an integer of at least 100"),
        ({"query": "x", "summary_ids": "sum_0123456789abcdef"}, "summary_ids must be a list"),
        ({"query": "x", "summary_ids": ["nope"]}, "is not an id"),
        ({"query": "x", "extra": 1}, "unknown argument(s): extra"),
    ]:
        result = await call(engine, **arguments)
        assert result.is_error and says in result.text, (arguments, result.text)


async def test_it_reaches_the_original_of_a_large_output(host):
    engine = await make_engine(host, {**SMALL, "large_output_tokens": 500, "large_output_summary_tokens": 60})
    log = "\n".join(f"line {i}: worker ok" for i in range(400)) + "\nFATAL: disk quota exceeded on /var/kestrel"
    messages = [
        UserMessage(content="run the job", timestamp=T0),
        ToolResultMessage(tool_call_id="c1", tool_name="bash", content=[TextBlock(text=log)], is_error=False, timestamp=T0 + 1),
    ]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=messages))
    big = engine.store.messages_between(SESSION, 2, 2)[0]
    result = await call(engine, query="why did the job fail?", summary_ids=[big.id])
    assert not result.is_error
    assert "FATAL: disk quota exceeded on /var/kestrel" in host.calls[-1].prompt


async def test_matching_messages_come_before_a_matching_summary_s_whole_range(host):
    engine = await make_engine(host, {**SMALL, "expand_query_input_tokens": 400})
    history = conversation(12)
    history[1 * 4] = UserMessage(content="the vault code is OCELOT-3391", timestamp=history[4].timestamp)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    host.answer_with("Summary: early turns mention the vault code OCELOT-3391 discussion.")
    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    host.answer_with("OCELOT-3391")
    result = await call(engine, query="vault code OCELOT-3391")
    assert not result.is_error
    assert "the vault code is OCELOT-3391" in host.calls[-1].prompt
