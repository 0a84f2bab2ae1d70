"""Properties of the assembly over generated conversations (Hypothesis)."""

from __future__ import annotations

import shutil
import tempfile

import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines import (
    AfterTurnParams,
    AssembleParams,
    AssistantMessage,
    MaintainParams,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
    encode_openclaw,
)
from engines.lossless import LosslessEngine
from engines.lossless.assemble import fit_budget
from engines.lossless.messages import valid_cuts
from engines.testkit import FakeHost
from engines.tokens import estimate_message_tokens

from .conftest import SESSION, T0

_turn = st.tuples(
    st.integers(min_value=1, max_value=120),  # prompt words
    st.lists(st.integers(min_value=0, max_value=200), max_size=3),  # tool outputs (words)
    st.integers(min_value=0, max_value=80),  # reply words
)


def _messages(n: int, spec) -> list:
    prompt, tools, reply = spec
    ts = T0 + n * 10_000
    out: list = [UserMessage(content=f"u{n} " + "word " * prompt, timestamp=ts)]
    for k, size in enumerate(tools):
        cid = f"c{n}_{k}"
        out.append(AssistantMessage(content=[ToolCallBlock(id=cid, name="bash", arguments={"n": n, "k": k})], timestamp=ts + 1 + k))
        out.append(ToolResultMessage(tool_call_id=cid, tool_name="bash", content=[TextBlock(text="out " * size)], is_error=False, timestamp=ts + 1 + k))
    if reply:
        out.append(AssistantMessage(content=[TextBlock(text="r " * reply)], timestamp=ts + 9))
    return out


def _pairs_intact(messages) -> bool:
    calls = {b.id for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolCallBlock)}
    results = {m.tool_call_id for m in messages if isinstance(m, ToolResultMessage)}
    return results <= calls and calls <= results


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(_turn, min_size=1, max_size=25),
    budget=st.integers(min_value=600, max_value=4000),
    fanout=st.integers(min_value=2, max_value=4),
    chunk=st.integers(min_value=100, max_value=800),
)
def test_assemblies_fit_the_budget_keep_tool_pairs_and_only_append_between_steps(turns, budget, fanout, chunk):
    config = {
        "token_budget": budget,
        "fresh_tail_tokens": budget // 4,
        "fresh_tail_messages": 2,
        "leaf_chunk_tokens": chunk,
        "leaf_summary_tokens": 30,
        "condensed_summary_tokens": 40,
        "condense_fanout": fanout,
    }

    async def main() -> None:
        state = tempfile.mkdtemp()
        try:
            host = FakeHost(state)
            host.answer_with(lambda p: f"summary {len(p.prompt)}")
            engine = LosslessEngine(config)
            await engine.bind(host)
            history: list = []
            previous = previous_step = None
            for n, spec in enumerate(turns, start=1):
                result = await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history)))
                step = engine.status(SESSION)["lastAssembly"]["step"]
                overflow = engine.status(SESSION)["lastAssembly"]["overflow"]
                tokens = sum(estimate_message_tokens(m) for m in result.messages)
                cuts = valid_cuts(history)
                floor = max((c for c in range(len(history)) if cuts[c]), default=0)
                newest_unit = sum(estimate_message_tokens(m) for m in history[floor:])
                assert result.estimated_tokens >= tokens
                assert result.estimated_tokens <= budget or newest_unit > budget - 100
                assert _pairs_intact(result.messages)
                current = [encode_openclaw(m) for m in result.messages]
                if previous is not None and step == previous_step and not overflow:
                    assert current[: len(previous)] == previous
                if history:
                    assert current[-1] == encode_openclaw(history[-1])  # the newest message is always there
                previous, previous_step = current, step
                history.extend(_messages(n, spec))
                await engine.after_turn(AfterTurnParams(session_id=SESSION, session_key=SESSION, session_file="", messages=list(history), pre_prompt_message_count=0))
                await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
            assert engine.status(SESSION)["messages"] == len(history)
            await engine.dispose()
        finally:
            shutil.rmtree(state, ignore_errors=True)

    trio.run(main)


@given(
    sizes=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=30),
    pair_at=st.sets(st.integers(min_value=0, max_value=28)),
    frame=st.lists(st.integers(min_value=1, max_value=50), max_size=5),
    budget=st.integers(min_value=1, max_value=600),
)
def test_fit_budget_drops_oldest_first_at_pair_safe_cuts_and_keeps_the_newest(sizes, pair_at, frame, budget):
    tail: list = []
    for i, _ in enumerate(sizes):
        if i - 1 in pair_at and isinstance(tail[-1], AssistantMessage) and tail[-1].content and isinstance(tail[-1].content[0], ToolCallBlock):
            tail.append(ToolResultMessage(tool_call_id=f"c{i - 1}", tool_name="t", content=[], is_error=False, timestamp=i))
        elif i in pair_at:
            tail.append(AssistantMessage(content=[ToolCallBlock(id=f"c{i}", name="t", arguments={})], timestamp=i))
        else:
            tail.append(UserMessage(content=str(i), timestamp=i))
    frame_msgs = [UserMessage(content=f"f{i}", timestamp=0) for i in range(len(frame))]
    kept, tokens, info = fit_budget(frame_msgs, frame, tail, sizes, budget)
    assert kept[-1] is tail[-1]
    kept_tail = [m for m in kept if any(m is t for t in tail)]
    start = len(tail) - len(kept_tail)
    kept_frame = len(kept) - len(kept_tail)
    assert kept[:kept_frame] == frame_msgs[len(frame) - kept_frame :]  # the newest summaries stay
    assert tokens == sum(frame[len(frame) - kept_frame :]) + sum(sizes[start:])
    assert kept_tail == tail[start:]
    assert valid_cuts(tail)[start]
    if sum(frame) + sum(sizes) <= budget:
        assert kept == [*frame_msgs, *tail] and not info["overflow"]
    elif start > 0:
        # Nothing of the frame is left when raw messages had to go.
        assert kept == kept_tail
