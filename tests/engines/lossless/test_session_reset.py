"""`lossless` across OpenClaw's `/new` and `/reset` (on_session_reset): a clean
start by default; `reset_keep_summaries = N` begins the new session's frame
with the previous session's newest N summaries. Nothing of the previous
session is deleted either way."""

from __future__ import annotations

import pytest

from engines import AssembleParams, CompactionSummaryMessage, SessionResetParams, ToolCallParams

from .conftest import SESSION, SMALL, make_engine, run_turn, turn

NEW = "thread-2"


def reset_params() -> SessionResetParams:
    return SessionResetParams(session_id=NEW, session_key=NEW, previous_session_id=SESSION, previous_session_key=SESSION, session_file="")


async def _summarised(host, keep: int):
    engine = await make_engine(host, {**SMALL, "reset_keep_summaries": keep})
    history: list = []
    for n in range(1, 21):
        await run_turn(engine, history, turn(n, say=f"fact-{n}"))
    assert engine.store.session(SESSION).frame_ids, "the old session should show summaries"
    return engine


async def _new_assembly(engine):
    return await engine.assemble(AssembleParams(session_id=NEW, session_key=NEW, messages=[]))


async def test_by_default_the_new_session_starts_empty_and_the_old_one_stays(host):
    engine = await _summarised(host, 0)
    before = engine.store.messages_between(SESSION, 1)
    await engine.on_session_reset(reset_params())
    result = await _new_assembly(engine)
    assert result.messages == [] and result.system_prompt_addition is None
    def grep(session: str):
        return engine.call_tool(ToolCallParams(session_id=session, session_key=session, call_id="c1", name="lcm_grep", arguments={"query": "fact-1"}))

    assert "fact-1" in (await grep(SESSION)).text  # the tool works, on the old session
    found = await grep(NEW)
    assert found.text.startswith("No match")
    assert engine.store.messages_between(SESSION, 1) == before


@pytest.mark.parametrize("keep", [1, 2])
async def test_kept_summaries_begin_the_new_session_s_frame(host, keep):
    engine = await _summarised(host, keep)
    old_frame = engine.store.session(SESSION)
    await engine.on_session_reset(reset_params())
    await engine.on_session_reset(reset_params())  # a replay carries nothing more
    result = await _new_assembly(engine)
    assert all(isinstance(m, CompactionSummaryMessage) for m in result.messages)
    assert len(result.messages) == min(keep, len(old_frame.frame_ids))
    assert engine.store.session(NEW).frame_ids == old_frame.frame_ids[-keep:]
    assert result.system_prompt_addition  # the model is told what a summary is
    assert engine.store.messages_between(NEW, 1) == []  # no old message is the new session's


def test_a_negative_count_is_refused():
    from engines.lossless.config import parse_config

    with pytest.raises(ValueError, match="reset_keep_summaries"):
        parse_config({"reset_keep_summaries": -1})
