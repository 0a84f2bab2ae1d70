"""The engine's own model calls: on ``summary_model`` at ``summary_effort``,
within ``summary_max_calls_per_hour`` (extractive summaries past it),
counted for ``engines lossless status``, and a ``summary_timeout`` that
leaves a slow (reasoning) model room."""

from __future__ import annotations

import time
import types

import trio

from engines import ToolCallParams
from engines.lossless import LosslessConfig, calls_budget
from engines.lossless.calls_budget import admits

from .conftest import SESSION, SMALL, make_engine, run_turn, turn


def _config(**extra):
    return {**SMALL, "cache_ttl": 0.0, **extra}


async def _compact(engine, turns: int = 14) -> list:
    history: list = []
    for n in range(1, turns + 1):
        await run_turn(engine, history, turn(n))
    return history


async def test_summaries_are_asked_of_the_summary_model_at_its_effort(host):
    engine = await make_engine(host, _config(summary_model="summariser-mini", summary_effort="minimal"))
    await _compact(engine)
    assert host.calls, "no summary was asked for"
    assert {(c.model, c.effort) for c in host.calls} == {("summariser-mini", "minimal")}
    assert not [s for s in engine.store.summaries(SESSION) if s.fallback]


async def test_by_default_summaries_use_the_clients_model_at_low_effort(host):
    engine = await make_engine(host, _config())
    await _compact(engine)
    assert host.calls and {(c.model, c.effort) for c in host.calls} == {(None, "low")}
    engine_default = LosslessConfig()
    assert engine_default.summary_model is None and engine_default.summary_effort == "low"


async def test_an_empty_effort_leaves_the_models_default(host):
    engine = await make_engine(host, _config(summary_effort=""))
    await _compact(engine)
    assert host.calls and {c.effort for c in host.calls} == {None}


async def test_lcm_expand_query_asks_the_summary_model_too(host):
    engine = await make_engine(host, _config(summary_model="summariser-mini"))
    await _compact(engine, 4)
    before = len(host.calls)
    host.push("The answer.\nSources: none")
    result = await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="c", name="lcm_expand_query", arguments={"query": "turn 2"}))
    assert not result.is_error, result.text
    (asked,) = host.calls[before:]
    assert (asked.model, asked.effort) == ("summariser-mini", "low")


def test_the_cap_admits_calls_below_it_and_none_means_no_cap():
    assert admits(0, 1) and not admits(1, 1) and not admits(5, 3)
    assert admits(10_000, 0)


async def test_past_the_hourly_cap_summaries_are_extractive_and_counted_as_capped(host):
    engine = await make_engine(host, _config(summary_max_calls_per_hour=2, summary_batch_size=1, retries_per_maintain=0))
    await _compact(engine)
    summaries = engine.store.summaries(SESSION)
    assert len(host.calls) == 2  # the cap: no third call reached the host
    assert len([s for s in summaries if not s.fallback]) == 2
    assert [s for s in summaries if s.fallback], "past the cap the summaries should be extractive"
    figures = engine.status(SESSION)["modelCalls"]
    assert figures["calls"] == 2 and figures["lastHour"] == 2 and figures["allSessionsLastHour"] == 2
    assert figures["capped"] >= 1 and figures["cappedLastHour"] == figures["capped"]
    assert figures["byModel"] == {"(client's model)": 2}


async def test_an_hour_later_the_extractive_summaries_are_rewritten_by_the_model(host, monkeypatch):
    engine = await make_engine(host, _config(summary_max_calls_per_hour=2, summary_batch_size=1, retries_per_maintain=2))
    await _compact(engine)
    pending = len([s for s in engine.store.summaries(SESSION) if s.fallback])
    assert pending and len(host.calls) == 2
    later = types.SimpleNamespace(time=lambda: time.time() + 3_700)
    monkeypatch.setattr(calls_budget, "time", later)
    history: list = []
    await run_turn(engine, history, [])  # one more maintenance: its retries fit the new hour
    assert len([s for s in engine.store.summaries(SESSION) if s.fallback]) < pending


async def test_past_the_cap_lcm_expand_query_says_so(host):
    engine = await make_engine(host, _config(summary_max_calls_per_hour=1, summary_batch_size=1, retries_per_maintain=0))
    await _compact(engine)
    result = await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION, call_id="c", name="lcm_expand_query", arguments={"query": "turn 2"}))
    assert result.is_error and "summary_max_calls_per_hour" in result.text


async def test_a_slow_model_within_summary_timeout_writes_the_summaries(host):
    async def slow(params):
        await trio.sleep(0.6)
        return "a considered summary"

    host.answer_with(slow)
    patient = await make_engine(host, _config(summary_timeout=5.0, summary_batch_size=1))
    await _compact(patient)
    assert patient.store.summaries(SESSION) and not [s for s in patient.store.summaries(SESSION) if s.fallback]


async def test_a_model_slower_than_summary_timeout_gives_an_extractive_summary(host):
    async def slower(params):
        await trio.sleep(30)
        return "too late"

    host.answer_with(slower)
    hasty = await make_engine(host, _config(summary_timeout=0.2, summary_batch_size=1, retries_per_maintain=0))
    await _compact(hasty)
    assert hasty.store.summaries(SESSION) and all(s.fallback for s in hasty.store.summaries(SESSION))


def test_the_default_timeouts_fit_the_sidecars_engine_deadline_with_room_for_a_reasoning_model():
    from sidecar.config import SETTINGS

    deadline = next(s for s in SETTINGS if s.name == "engine_deadline").default
    cfg = LosslessConfig()
    # A summary may take 15 s (was 10 s: room for a reasoning model's think
    # time; the hidden thread adds ~0.2 s), and the step stops asking
    # before the sidecar's deadline cancels it.
    assert cfg.summary_timeout >= 15 and cfg.summary_timeout < cfg.step_deadline < deadline
    assert cfg.expand_query_timeout < deadline
