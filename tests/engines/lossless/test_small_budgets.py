"""Small budgets hold: the look-ahead that decides when a warm frame is due
sees a large turn behind several small ones (8k bench, 40 turns: a shell
turn hidden behind two talk turns went to 16,027 tokens against budget +
framing 15,796; 14,415 with eight turns), and a frame always carries some
summaries."""

from __future__ import annotations

from engines.lossless.compaction import frame_room, recent_turn_tokens
from engines.lossless.config import parse_config
from engines.lossless.store import MessageRow

from .conftest import SESSION, SMALL, assemble, make_engine, run_turn, turn


def _row(seq: int, turn_no: int, tokens: int) -> MessageRow:
    return MessageRow(id=f"m{seq}", seq=seq, turn=turn_no, role="user", tool_name=None, timestamp=0, tokens=tokens, text="")


def test_the_look_ahead_sees_a_large_turn_behind_several_small_ones():
    rows = [_row(1, 1, 1_400), *(_row(n, n, 600) for n in range(2, 8))]
    assert recent_turn_tokens(rows) == 1_400  # a shell turn, then six talk turns
    assert recent_turn_tokens(rows, turns=3) == 600


def test_a_frame_keeps_room_for_three_leaf_summaries_when_the_fresh_tail_fills_its_share():
    cfg = parse_config({})
    assert frame_room(cfg, 8_000, 1_400) == 300  # 8k: 960 - 1,400 < 0; three leaf summaries of 100
    assert frame_room(cfg, 32_000, 2_560) == 3_840 - 2_560  # 32k: the share, as before


async def test_a_frame_at_a_small_budget_shows_summaries_and_names_the_tools(host):
    engine = await make_engine(host, {**SMALL, "compact_target": 0.12, "cache_ttl": 0.0})
    history: list = []
    for n in range(1, 30):
        await run_turn(engine, history, turn(n))
    status = engine.status(SESSION)
    assert status["compactionSteps"] >= 1 and status["frameSummaries"], "the frame holds no summary"
    result = await assemble(engine, history)
    assert result.system_prompt_addition and "lcm_grep" in result.system_prompt_addition


def test_the_engine_counts_its_tools_specs_as_its_own_framing_unless_told():
    from engines.lossless.engine import own_tokens

    counted = own_tokens(parse_config({}))
    assert 600 <= counted <= 1_000  # the four tools' specs, as Codex sends them (~780 tokens at 0.169.0)
    assert own_tokens(parse_config({"own_framing_tokens": 0})) == 0
    assert own_tokens(parse_config({"own_framing_tokens": 1_234})) == 1_234


async def test_the_assembly_leaves_room_for_the_engines_own_tool_specs(host):
    """8k bench, 300 turns of ~340 tokens: the engine's four tool specs (783
    tokens) ride in every request beside the assembly, and a request went to
    15,981 tokens against budget + Codex's framing 15,808. The assembly
    (and the frame decisions) work within the budget less those tokens."""
    budget, own = 3_000, 1_000
    engine = await make_engine(host, {**SMALL, "token_budget": budget, "own_framing_tokens": own, "cache_ttl": 0.0})
    history: list = []
    worst = 0
    for n in range(1, 40):
        result = await run_turn(engine, history, turn(n))
        worst = max(worst, result.estimated_tokens)
        assert engine.status(SESSION)["lastAssembly"]["budget"] == budget - own
    assert engine.status(SESSION)["compactionSteps"] >= 1
    assert worst <= budget - own


def test_the_turn_room_is_the_largest_recent_turn_but_never_the_frame_or_the_fresh_tail():
    from engines.lossless.compaction import turn_room

    cuts = [True] * 11
    tail = [300] * 10  # fresh tail: the newest 4 messages (1,200 tokens) at fresh_tail_tokens 640
    assert turn_room(900, 8_000, 500, tail, cuts, 640, 4) == 900  # room to spare: the whole turn
    assert turn_room(900, 2_000, 500, tail, cuts, 640, 4) == 300  # 2,000 - 500 - 1,200
    assert turn_room(900, 1_500, 500, tail, cuts, 640, 4) == 0  # a pasted file in the tail stays whole


async def test_a_late_frame_still_leaves_the_next_turn_its_room(host):
    """Maintenance runs in the background, so a turn may be assembled before
    the step that found its frame due installs it. The frame decisions look
    one turn ahead; the assembly then leaves the turn its room itself (the
    oldest raw messages wait outside it for their summaries). Here no step
    ever runs: every assembly leaves room for a turn like the recent ones."""
    from engines.lossless.compaction import recent_turn_tokens

    budget = 3_000
    engine = await make_engine(host, {**SMALL, "token_budget": budget, "cache_ttl": 3_600.0})
    history: list = []
    dropped = False
    for n in range(1, 40):
        result = await run_turn(engine, history, turn(n), maintain=False)
        recent = recent_turn_tokens(engine.store.messages_between(SESSION, 1))
        assert result.estimated_tokens + recent <= budget, (n, result.estimated_tokens, recent)
        dropped |= bool(engine.status(SESSION)["lastAssembly"].get("overflow"))
    assert dropped  # the conversation outgrew the budget: the oldest raw messages waited outside
