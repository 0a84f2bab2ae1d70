"""Large tool outputs and pasted files kept out of line: stored whole, a
reference and a short summary in the assembly, the original whole through
lcm_expand."""

from __future__ import annotations

import copy
import re

from engines import (
    AssistantMessage,
    IngestBatchParams,
    TextBlock,
    ToolCallBlock,
    ToolCallParams,
    ToolResultMessage,
    UserMessage,
    encode_openclaw,
)
from engines.lossless.outofline import exploration_summary
from engines.tokens import count_tokens, estimate_messages_tokens

from .conftest import SESSION, SMALL, T0, assemble, make_engine, run_turn, turn


def big_log(tokens: int) -> str:
    """A shell log of about ``tokens`` tokens, with an error in the middle."""
    lines, i = [], 0
    while True:
        lines.append(f"2025-05-01T10:{i % 60:02d}:00 worker-{i % 7} processed batch {i} checksum {i * 7919 % 100003:05d}")
        i += 1
        if i == 2000:
            lines.append("ERROR: replica pg-kestrel-07 lagging by 4250 ms")
        if i % 200 == 0 and count_tokens("\n".join(lines)) >= tokens:
            return "\n".join(lines)


def tool_turn(n: int, output: str) -> list:
    ts = T0 + n * 10_000
    return [
        UserMessage(content=f"turn {n}: run the export", timestamp=ts),
        AssistantMessage(content=[ToolCallBlock(id=f"call_{n}", name="bash", arguments={"command": "export.sh"})], timestamp=ts + 1),
        ToolResultMessage(tool_call_id=f"call_{n}", tool_name="bash", content=[TextBlock(text=output)], is_error=False, timestamp=ts + 2),
        AssistantMessage(content=[TextBlock(text=f"reply {n}: the export ran")], timestamp=ts + 3),
    ]


async def expand(engine, **arguments):
    return await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="e1", name="lcm_expand", arguments=arguments))


async def test_a_60k_token_tool_output_leaves_the_next_request_within_budget_and_comes_back_whole(host):
    engine = await make_engine(host, {})  # defaults: 32,000-token budget, 25,000-token threshold
    log = big_log(60_000)
    assert count_tokens(log) >= 60_000
    history: list = []
    await run_turn(engine, history, turn(1))
    big_turn = tool_turn(2, log)
    original = copy.deepcopy(big_turn)
    await run_turn(engine, history, big_turn)
    result = await assemble(engine, [*history, UserMessage(content="what failed?", timestamp=T0 + 99_000)])
    assert result.estimated_tokens <= 32_000
    assert estimate_messages_tokens(result.messages) <= 32_000
    row = next(r for r in engine.store.messages_between(SESSION, 1) if r.role == "toolResult" and r.tokens > 25_000)
    stand_in = next(m for m in result.messages if isinstance(m, ToolResultMessage) and m.tool_call_id == "call_2")
    shown = stand_in.content[0].text
    assert row.id in shown and "lcm_expand" in shown and "kept out of line" in shown
    assert "ERROR: replica pg-kestrel-07 lagging by 4250 ms" in shown  # the summary keeps the error line
    assert count_tokens(shown) < 1_000
    # The client's history is untouched, and the store holds the message whole.
    assert encode_openclaw(big_turn) == encode_openclaw(original)
    assert encode_openclaw(engine.store.decode([row])[0]) == encode_openclaw(original[2])
    # lcm_expand gives the original back whole, a page at a time.
    pages, offset = [], 0
    while True:
        args = {"id": row.id, "max_tokens": 16_000} | ({"offset": offset} if offset else {})
        page = await expand(engine, **args)
        assert not page.is_error and count_tokens(page.text) <= 16_000 + 80
        header, body = page.text.split("\n", 1)
        assert header.startswith(f"[{row.id} ") and f"characters {offset}-" in header
        more = re.search(r"\n\[… message cut at \d+ tokens: characters \d+-\d+ not shown; call lcm_expand with id=\S+ offset=(\d+)", body)
        if more is None:
            pages.append(body)
            break
        pages.append(body[: more.start()])
        offset = int(more.group(1))
    described = await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="d1", name="lcm_describe", arguments={"id": row.id}))
    assert "kept out of line" in described.text
    assert len(pages) >= 4
    assert "".join(pages) == row.text
    assert "".join(pages).endswith(log)


async def test_the_stand_in_never_changes_so_the_assembly_only_appends(host):
    engine = await make_engine(host, {**SMALL, "token_budget": 20_000, "large_output_tokens": 2_000})
    history: list = []
    await run_turn(engine, history, tool_turn(1, big_log(3_000)), maintain=False)
    first = await assemble(engine, history)
    assert "kept out of line" in first.messages[2].content[0].text
    await run_turn(engine, history, turn(2), maintain=False)
    second = await assemble(engine, history)
    assert encode_openclaw(second.messages[: len(first.messages)]) == encode_openclaw(first.messages)
    assert engine.status(SESSION)["messageTokens"] > 3_000  # counted whole in the store


async def test_only_tool_results_and_user_messages_over_the_threshold_go_out_of_line(host):
    engine = await make_engine(host, {**SMALL, "token_budget": 50_000, "large_output_tokens": 1_000})
    text = big_log(1_500)
    messages = [
        UserMessage(content=text, timestamp=T0),  # a pasted file
        AssistantMessage(content=[TextBlock(text=text)], timestamp=T0 + 1),
        UserMessage(content="short " * 100, timestamp=T0 + 2),
    ]
    await engine.ingest_batch(IngestBatchParams(session_id=SESSION, session_key=SESSION, messages=messages))
    result = await assemble(engine)
    pasted, reply, short = result.messages
    assert isinstance(pasted, UserMessage) and "large user message kept out of line" in pasted.content
    assert reply.content[0].text == text
    assert short.content == "short " * 100


async def test_summaries_of_a_large_output_read_its_stand_in(host):
    engine = await make_engine(host, {**SMALL, "token_budget": 4_000, "large_output_tokens": 1_000, "large_output_summary_tokens": 100})
    history: list = []
    await run_turn(engine, history, tool_turn(1, big_log(5_000)))
    for n in range(2, 25):
        await run_turn(engine, history, turn(n, size=80))
    prompts = [c.prompt for c in host.calls]
    assert prompts and any("kept out of line" in p for p in prompts)
    assert all(count_tokens(p) < 3_000 for p in prompts)
    result = await assemble(engine, history)
    assert result.estimated_tokens <= 4_000


def test_the_exploration_summary_is_deterministic_and_within_its_target():
    text = "\n".join([*(f"step {i} ok" for i in range(500)), "Traceback: ValueError in export", *(f"tail {i}" for i in range(50))])
    one = exploration_summary(text, 150, count_tokens)
    assert one == exploration_summary(text, 150, count_tokens)
    assert count_tokens(one) <= 150
    assert "551 lines" in one and "1: step 0 ok" in one and "tail 49" in one
    assert "Traceback: ValueError in export" in one
