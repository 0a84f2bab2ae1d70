"""The recall tools: lcm_grep, lcm_describe, lcm_expand."""

from __future__ import annotations

import re

from engines import (
    AssistantMessage,
    CompactParams,
    IngestBatchParams,
    TextBlock,
    ToolCallBlock,
    ToolCallParams,
    ToolResultMessage,
    UserMessage,
)
from engines.tokens import count_tokens

from .conftest import SESSION, T0, conversation, make_engine


async def call(engine, name, **arguments):
    return await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="c1", name=name, arguments=arguments))


async def _compacted_engine(host):
    engine = await make_engine(host)
    history = conversation(10)
    history[1 * 4] = UserMessage(content="remember the launch code ZEBRA-4417 please", timestamp=history[4].timestamp)
    history[8 * 4] = UserMessage(content="the launch code changed to ZEBRA-9001", timestamp=history[32].timestamp)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=history))
    await engine.compact(CompactParams(session_id=SESSION, session_key=SESSION))
    return engine


async def test_the_tools_are_offered_with_object_schemas(host):
    engine = await make_engine(host)
    specs = {s.name: s for s in engine.tools()}
    assert set(specs) == {"lcm_grep", "lcm_describe", "lcm_expand", "lcm_expand_query"}
    assert specs["lcm_grep"].input_schema["required"] == ["query"]
    assert all(s.input_schema["type"] == "object" for s in specs.values())


async def test_grep_finds_every_mention_newest_first_with_id_role_turn_and_snippet(host):
    engine = await _compacted_engine(host)
    result = await call(engine, "lcm_grep", query="launch code", sort="newest")
    assert not result.is_error
    lines = result.text.splitlines()[1:]
    ids = [line.split(" · ")[0][2:] for line in lines]
    assert len(ids) >= 2
    assert "ZEBRA-9001" in lines[0].replace("[", "").replace("]", "") or "9001" in lines[0]
    turns = [int(re.search(r"turns? (\d+)", line).group(1)) for line in lines]
    assert turns == sorted(turns, reverse=True)
    first = [line for line in lines if "user" in line]
    assert any("turn 9" in line for line in first) and any("turn 2" in line for line in first)


async def test_grep_falls_back_to_any_word_and_reports_no_match(host):
    engine = await _compacted_engine(host)
    some = await call(engine, "lcm_grep", query="ZEBRA nonexistentword")
    assert not some.is_error and "(any word)" in some.text
    none = await call(engine, "lcm_grep", query="qwertyuiop")
    assert not none.is_error and none.text.startswith("No match")


async def test_grep_honours_its_limit(host):
    engine = await _compacted_engine(host)
    result = await call(engine, "lcm_grep", query="turn", limit=3)
    assert len(result.text.splitlines()) == 4


async def test_grep_searches_summaries_too(host):
    host.answer_with("Summary: the user set launch code ZEBRA-4417.")
    engine = await _compacted_engine(host)
    result = await call(engine, "lcm_grep", query="ZEBRA-4417")
    assert "sum_" in result.text and "msg_" in result.text


async def test_grep_snippets_quote_identifiers_verbatim(host):
    # FTS5 splits checkout_v3_rollout and pg-kestrel-07 into words; a snippet
    # that marked the matched word would hand the model "[checkout]_v3_rollout".
    engine = await make_engine(host)
    said = "The new checkout flow: flag checkout_v3_rollout on host pg-kestrel-07."
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=[UserMessage(content=said, timestamp=T0)]))
    result = await call(engine, "lcm_grep", query="checkout flow kestrel")
    assert not result.is_error
    assert "checkout_v3_rollout" in result.text and "pg-kestrel-07" in result.text


async def test_grep_leaves_out_its_own_earlier_calls(host):
    engine = await make_engine(host)
    messages = [
        UserMessage(content="find the token", timestamp=T0),
        AssistantMessage(content=[ToolCallBlock(id="g1", name="lcm_grep", arguments={"query": "token"})], timestamp=T0 + 1),
        ToolResultMessage(tool_call_id="g1", tool_name="lcm_grep", content=[TextBlock(text="1 hit for 'token'")], is_error=False, timestamp=T0 + 2),
    ]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=messages))
    result = await call(engine, "lcm_grep", query="token")
    assert result.text.count("msg_") == 1 and "user" in result.text


async def test_describe_gives_text_depth_range_and_sources(host):
    engine = await _compacted_engine(host)
    summary = engine.store.summaries(SESSION)[0]
    result = await call(engine, "lcm_describe", id=summary.id)
    assert not result.is_error
    assert f"depth {summary.depth}" in result.text
    assert f"turns {summary.turn_lo}-{summary.turn_hi}" in result.text
    for source in engine.store.summary_sources(summary.id):
        assert source in result.text
    assert summary.text in result.text
    message = engine.store.messages_between(SESSION, 1, 1)[0]
    leaf = engine.store.covering_summary(SESSION, 1)
    about = await call(engine, "lcm_describe", id=message.id)
    assert not about.is_error and f"covered by summary {leaf.id}" in about.text


async def test_expand_returns_the_raw_messages_within_the_cap(host):
    engine = await _compacted_engine(host)
    summary = engine.store.summaries(SESSION)[0]
    rows = engine.store.messages_between(SESSION, summary.seq_lo, summary.seq_hi)
    full = await call(engine, "lcm_expand", id=summary.id, max_tokens=10_000)
    assert not full.is_error
    assert all(r.id in full.text for r in rows) and "not shown" not in full.text
    capped = await call(engine, "lcm_expand", id=summary.id, max_tokens=60)
    assert count_tokens(capped.text) <= 60 + 80  # the cap, plus the line saying what was left out
    assert "not shown within 60 tokens" in capped.text
    assert rows[-1].id not in capped.text.split("not shown")[0]


async def test_expand_caps_a_single_long_message(host):
    engine = await make_engine(host)
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=[UserMessage(content="word " * 3000, timestamp=T0)]))
    mid = engine.store.messages_between(SESSION, 1)[0].id
    result = await call(engine, "lcm_expand", id=mid, max_tokens=100)
    head = result.text.split("\n[… message cut")[0]
    assert count_tokens(head) <= 100 and "message cut at 100 tokens" in result.text


async def test_bad_arguments_give_clear_error_results(host):
    engine = await _compacted_engine(host)
    cases = [
        ("lcm_grep", {}, "query must be a non-empty string"),
        ("lcm_grep", {"query": "x", "limit": 0}, "limit must be a positive integer"),
        ("lcm_grep", {"query": "x", "limit": True}, "limit must be a positive integer"),
        ("lcm_grep", {"query": "!!!"}, "no word"),
        ("lcm_grep", {"query": "x", "bogus": 1}, "unknown argument(s): bogus"),
        ("lcm_describe", {"id": 7}, "id must be a non-empty string"),
        ("lcm_describe", {"id": "sum_nothex"}, "is not an id"),
        ("lcm_describe", {"id": "sum_0123456789abcdef"}, "no summary sum_0123456789abcdef"),
        ("lcm_expand", {"id": "msg_0123456789abcdef"}, "no message msg_0123456789abcdef"),
        ("lcm_expand", {"id": "msg_0123456789abcdef", "max_tokens": -5}, "max_tokens must be a positive integer"),
        ("lcm_nope", {}, "unknown tool 'lcm_nope'"),
    ]
    for name, args, expected in cases:
        result = await call(engine, name, **args)
        assert result.is_error, (name, args)
        assert expected in result.text, (name, args, result.text)


async def test_tools_only_see_their_own_session(host):
    engine = await _compacted_engine(host)
    other = await engine.call_tool(ToolCallParams(session_id="other", session_key="other", call_id="c", name="lcm_grep", arguments={"query": "ZEBRA"}))
    assert other.text.startswith("No match")
    summary = engine.store.summaries(SESSION)[0]
    foreign = await engine.call_tool(ToolCallParams(session_id="other", session_key="other", call_id="c", name="lcm_describe", arguments={"id": summary.id}))
    assert foreign.is_error
