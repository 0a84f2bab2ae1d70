"""Cache-aware maintenance: sizes that follow the budget, and new frames
(each one uncached request) held back while the prompt cache is warm."""

from __future__ import annotations

import time

import pytest
import trio

from engines import encode_openclaw
from engines.lossless.compaction import excess_reads, frame_due, frame_pays, last_turn_tokens, recent_turn_tokens, summaries_wait
from engines.lossless.config import knobs, parse_config
from engines.lossless.store import MessageRow

from .conftest import SESSION, SMALL, assemble, make_engine, run_turn, turn


def test_sizes_follow_the_budget_unless_set():
    cfg = parse_config({})
    assert knobs(cfg, 32_000) == knobs(cfg, 32_000).__class__(
        fresh_tail_tokens=2_560, fresh_tail_messages=4, leaf_chunk_tokens=8_000, leaf_summary_tokens=400, condensed_summary_tokens=600
    )
    small = knobs(cfg, 6_000)
    assert (small.fresh_tail_tokens, small.leaf_chunk_tokens, small.leaf_summary_tokens, small.condensed_summary_tokens) == (480, 1_500, 75, 112)
    assert small.fresh_tail_tokens + small.leaf_chunk_tokens < 6_000 * 0.8  # they fit the budget they are given
    set_ = knobs(parse_config({"fresh_tail_tokens": 5_000, "leaf_chunk_tokens": 900}), 6_000)
    assert (set_.fresh_tail_tokens, set_.leaf_chunk_tokens) == (5_000, 900)


def test_the_fresh_tail_keeps_fewer_messages_at_small_budgets_unless_set():
    """8k bench, ~920-token turns: four messages (the last two turns) held a
    quarter of the room a frame leaves and cost a turn a frame (rebuilds per
    10 turns 2.40 -> 1.93 with two)."""
    cfg = parse_config({})
    assert [knobs(cfg, b).fresh_tail_messages for b in (7_217, 12_000, 15_217, 31_217, 128_000)] == [2, 3, 3, 4, 4]
    assert knobs(parse_config({"fresh_tail_messages": 4}), 7_217).fresh_tail_messages == 4
    assert knobs(parse_config({"fresh_tail_messages": 0}), 31_217).fresh_tail_messages == 0
    with pytest.raises(ValueError, match="fresh_tail_messages"):
        parse_config({"fresh_tail_messages": -1})


def test_bad_cache_settings_are_refused():
    with pytest.raises(ValueError, match="warm_compact_threshold"):
        parse_config({"warm_compact_threshold": 0.7})
    with pytest.raises(ValueError, match="cache_ttl"):
        parse_config({"cache_ttl": -1})


def _row(seq: int, turn: int, tokens: int, role: str = "user") -> MessageRow:
    return MessageRow(id=f"msg_{seq:016x}", seq=seq, turn=turn, role=role, tool_name=None, timestamp=0, tokens=tokens, text="")


def _turns(n: int, each: int = 500) -> list[MessageRow]:
    rows = []
    for k in range(1, n + 1):
        rows += [_row(2 * k - 1, k, each), _row(2 * k, k, each, "assistant")]
    return rows


def test_a_warm_frame_waits_until_its_cold_request_costs_less_than_the_cached_rereads_it_saves():
    # Budget 10,000, a new frame at 1,000 tokens, framing 1,000: its first
    # request costs 0.9 x 2,000 = 1,800 more than a cached one, so the frame
    # pays once the requests since the last one re-read 18,000 tokens above
    # 1,000 (at a tenth of the price). Turns of 1,000 tokens, one request
    # each (its assistant message): 0, 500, 1,500, 2,500, ... above 1,000.
    cfg = parse_config({"framing_tokens": 1_000, "compact_target": 0.1})
    assert [excess_reads(_turns(k), 0, 1_000) for k in range(1, 8)] == [0, 500, 2_000, 4_500, 8_000, 12_500, 18_000]
    assert excess_reads(_turns(2), 600, 1_000) == 100 + 1_100  # the frame counts: every request re-reads it
    assert not frame_pays(_turns(6), 0, 10_000, cfg)
    assert frame_pays(_turns(7), 0, 10_000, cfg)
    # It comes well before the budget forces it (7,000 tokens: below 0.9 of
    # the budget, and two more such turns fit) ...
    assert not frame_due(7_000, 1_000, 10_000, cfg, warm=True)
    assert frame_due(7_000, 1_000, 10_000, cfg, warm=True, pays=True)
    # ... and a step runs for it.
    assert frame_due(7_000, 1_000, 10_000, cfg, warm=False)
    from engines.lossless.compaction import step_needed

    assert not step_needed(0, 7_000, 10_000, cfg, False, 1_000)
    assert step_needed(0, 7_000, 10_000, cfg, False, 1_000, pays=True)
    # Dearer framing, later frame.
    assert not frame_pays(_turns(7), 0, 10_000, parse_config({"framing_tokens": 2_000, "compact_target": 0.1}))


def test_a_frame_waits_while_the_cache_is_warm_until_the_budget_forces_it():
    cfg = parse_config({})
    assert frame_due(26_000, 500, 32_000, cfg, warm=False)  # cold: a new frame costs nothing extra
    assert not frame_due(26_000, 500, 32_000, cfg, warm=True)
    assert frame_due(29_000, 500, 32_000, cfg, warm=True)  # past 0.9 of the budget
    assert frame_due(26_000, 6_500, 32_000, cfg, warm=True)  # a turn like the last would not fit
    assert last_turn_tokens([_row(1, 1, 10), _row(2, 2, 20), _row(3, 2, 30)]) == 50
    # A tool turn every third turn is larger: the largest of the newest three counts.
    rows = [_row(1, 1, 900), _row(2, 2, 1_500), _row(3, 3, 400), _row(4, 4, 300)]
    assert recent_turn_tokens(rows) == 1_500
    assert recent_turn_tokens(rows[2:]) == 400


async def test_warm_maintenance_writes_summaries_but_keeps_the_assembly_until_forced(host):
    # compact_threshold 0.6: the frame is due several turns after the step
    # threshold, so summaries are written early (a window of one turn waits,
    # see test_summaries_wait_for_the_step_of_a_frame_due_within_two_turns).
    engine = await make_engine(host, {**SMALL, "token_budget": 3_000, "cache_ttl": 3_600.0, "compact_threshold": 0.6})
    history: list = []
    previous = None
    installed_at = None
    written_early = False
    for n in range(1, 40):
        result = await run_turn(engine, history, turn(n))
        if previous is not None and installed_at is None:
            status = engine.status(SESSION)
            if status["compactionSteps"]:
                installed_at = n
            else:  # no frame yet: the assembly only appended
                assert encode_openclaw(result.messages[: len(previous.messages)]) == encode_openclaw(previous.messages)
        previous = result
        status = engine.status(SESSION)
        if status["summariesByDepth"] and not status["compactionSteps"]:
            written_early = True
    assert written_early  # summaries were made before their frame was installed
    # ... a chunk at a time as chunks fill, never a lone short chunk a turn
    # (turns here are ~125 tokens, chunks up to 300): a short chunk is
    # summarised only by a step that installs its frame.
    short = [s for s in engine.store.summaries(SESSION) if s.depth == 0 and s.source_tokens < 200]
    assert len(short) <= engine.status(SESSION)["compactionSteps"]
    assert installed_at is not None
    last = engine.status(SESSION)["lastAssembly"]
    assert last["tokens"] <= 3_000 and not last["overflow"]


async def test_summaries_waiting_for_a_cold_cache_are_framed_on_the_next_assembly_without_a_model_call(host):
    engine = await make_engine(host, {**SMALL, "token_budget": 3_000, "cache_ttl": 3_600.0, "compact_threshold": 0.6})
    history: list = []
    for n in range(1, 60):
        await run_turn(engine, history, turn(n))
        status = engine.status(SESSION)
        if status["summarizedThroughSeq"] > status["frameSeq"]:
            break
    else:
        pytest.fail("no summary waited for its frame")
    calls = len(host.calls)
    steps = status["compactionSteps"]
    engine._last_request[SESSION] = time.monotonic() - 3_601.0  # the user was away past the cache's lifetime
    result = await assemble(engine, history)
    after = engine.status(SESSION)
    assert len(host.calls) == calls
    assert after["compactionSteps"] == steps + 1 and after["frameSeq"] == status["summarizedThroughSeq"]
    assert after["lastCompaction"]["reason"] == "cache-cold"
    assert result.messages[0].role == "compactionSummary"


async def test_without_cache_awareness_a_frame_follows_its_summaries_at_once(host):
    engine = await make_engine(host, {**SMALL, "token_budget": 3_000, "cache_ttl": 0})
    history: list = []
    for n in range(1, 40):
        await run_turn(engine, history, turn(n))
        status = engine.status(SESSION)
        assert status["summarizedThroughSeq"] == status["frameSeq"]


async def test_a_cold_assembly_does_not_wait_for_a_step_in_flight(host):
    engine = await make_engine(host, {**SMALL, "token_budget": 3_000, "cache_ttl": 3_600.0})
    history: list = []
    for n in range(1, 60):
        await run_turn(engine, history, turn(n))
        status = engine.status(SESSION)
        if status["summarizedThroughSeq"] > status["frameSeq"]:
            break
    engine._last_request[SESSION] = time.monotonic() - 3_601.0
    held, done = trio.Event(), trio.Event()

    async def step_in_flight():
        async with engine._lock(SESSION):  # a maintenance step holds the session
            held.set()
            await done.wait()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(step_in_flight)
        await held.wait()
        with trio.fail_after(5):
            result = await assemble(engine, history)
        done.set()
    assert engine.status(SESSION)["frameSeq"] == status["frameSeq"]  # no frame yet: it waits for the next one
    assert result.messages


async def test_a_request_stays_within_the_budget_when_maintenance_finishes_a_turn_late(host):
    """The sidecar runs maintenance in the background: the next turn may be
    assembled before the last turn's step has installed its frame (8k bench:
    a shell turn at 17,539 tokens against 16,598). So while the cache is warm
    the frame is due when two turns like the largest recent one would not
    fit: the one already under way and the next."""
    from engines.api import AfterTurnParams, MaintainParams
    from engines.tokens import estimate_message_tokens

    budget = 3_000
    engine = await make_engine(host, {**SMALL, "token_budget": budget, "cache_ttl": 3_600.0})
    history: list = []
    worst = 0
    for n in range(1, 60):
        new = turn(n, tool=n % 3 == 0, size=150 if n % 3 == 0 else 40)
        result = await assemble(engine, history)
        # The request of turn n: its assembly, then the turn's own messages
        # (the prompt, the tool call and its output, the reply).
        worst = max(worst, result.estimated_tokens + sum(estimate_message_tokens(m) for m in new))
        if n > 1:  # the step after turn n-1 ends only now
            await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
        history.extend(new)
        await engine.after_turn(
            AfterTurnParams(session_id=SESSION, session_key=SESSION, session_file="", messages=list(history), pre_prompt_message_count=len(history) - len(new))
        )
    assert engine.status(SESSION)["compactionSteps"] >= 2  # frames were installed along the way
    assert worst <= budget



@pytest.mark.parametrize(
    ("framing", "paid", "share"), [(100, True, (0.2, 0.45)), (1_000_000, True, (0.8, 1.0)), (100, False, (0.8, 1.0))]
)
async def test_a_warm_engine_installs_its_frame_when_it_pays_before_the_budget_forces_it(host, framing, paid, share):
    """A cheap cold request (little framing): the frame comes as soon as the
    cached re-reads above the target have cost as much, well below the
    budget; a frame that never pays, or with ``frames_when_paid = false``,
    comes when the budget forces it, as before."""
    budget = 6_000
    engine = await make_engine(
        host, {**SMALL, "token_budget": budget, "compact_target": 0.15, "cache_ttl": 3_600.0, "framing_tokens": framing, "frames_when_paid": paid}
    )
    history: list = []
    for n in range(1, 80):
        await run_turn(engine, history, turn(n))
        status = engine.status(SESSION)
        if status["compactionSteps"]:
            break
    else:
        pytest.fail("no frame installed")
    before = status["lastCompaction"]["tokensBefore"]
    assert share[0] * budget <= before <= share[1] * budget, before


def test_summaries_wait_for_the_step_of_a_frame_due_within_two_turns():
    """8k bench, ~340-token turns: the step past compact_threshold and the
    one the budget forces came a turn or two apart, two summary calls where
    one does. A wider window still writes summaries early (a cold cache
    then frames them for free)."""
    cfg = parse_config({})
    # 8k, 400-token turns: the frame is due past 7,200 (warm_compact_threshold 0.9).
    assert not summaries_wait(6_300, 400, 8_000, cfg, warm=True)  # due in three turns: summarise now
    assert summaries_wait(6_600, 400, 8_000, cfg, warm=True)  # due within two turns: wait for it
    assert not summaries_wait(7_300, 400, 8_000, cfg, warm=True)  # due now: the step installs
    assert not summaries_wait(25_700, 900, 32_000, cfg, warm=True)  # 32k: the window spans turns
    assert not summaries_wait(6_600, 400, 8_000, cfg, warm=False)  # a cold cache frames at once


async def test_a_frame_due_within_two_turns_costs_one_summary_call(host):
    engine = await make_engine(host, {**SMALL, "token_budget": 3_000, "cache_ttl": 3_600.0})
    history: list = []
    installs = []
    for n in range(1, 40):
        before, steps = len(host.calls), engine.status(SESSION)["compactionSteps"]
        await run_turn(engine, history, turn(n))
        if len(host.calls) > before:
            installs.append(engine.status(SESSION)["compactionSteps"] > steps)
    assert len(installs) >= 2
    assert all(installs), "a step wrote summaries for a frame due a turn or two later"
