"""``codex-sidecar engines lossless status``: the lossless store's figures per session."""

from __future__ import annotations

import json

from click.testing import CliRunner

from engines import AfterTurnParams, AssembleParams, AssistantMessage, MaintainParams, TextBlock, UserMessage
from engines.lossless import LosslessEngine
from engines.testkit import FakeHost
from sidecar.cli import cli

SESSION = "01a20132-6799-70b2-9e11-b6afa40528ac"
SMALL = {"token_budget": 2000, "fresh_tail_tokens": 300, "fresh_tail_messages": 2, "leaf_chunk_tokens": 300, "leaf_summary_tokens": 40, "condense_fanout": 3, "own_framing_tokens": 0}


async def _store(state_dir) -> None:
    """A store where the sidecar binds the engine, 12 turns of 2 messages,
    with summaries (the model's for the first three, extractive after)."""
    with FakeHost(state_dir / "engines" / "lossless") as host:
        host.push(*["model summary"] * 3)
        host.fail_all()
        engine = LosslessEngine(SMALL)
        await engine.bind(host)
        history: list = []
        for n in range(1, 13):
            await engine.assemble(AssembleParams(session_id=SESSION, session_key=SESSION, messages=list(history)))
            ts = 1_700_000_000_000 + n * 10_000
            words = " ".join(f"w{n}x{k}" for k in range(60))
            history += [UserMessage(content=f"turn {n}: {words}", timestamp=ts), AssistantMessage(content=[TextBlock(text=f"reply {n}: {words}")], timestamp=ts + 1)]
            await engine.after_turn(AfterTurnParams(session_id=SESSION, session_key=SESSION, session_file="", messages=list(history), pre_prompt_message_count=len(history) - 2))
            await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
        await engine.dispose()


def _run(*args: str):
    return CliRunner().invoke(cli, ["engines", "lossless", "status", *args], catch_exceptions=False)


async def test_status_shows_messages_summaries_fallbacks_and_the_last_assembly(tmp_path, monkeypatch):
    await _store(tmp_path)
    monkeypatch.setenv("CODEX_SIDECAR_STATE_DIR", str(tmp_path))
    result = _run("--json")
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in result.output.splitlines()]
    assert row["sessionId"] == SESSION
    assert row["messages"] == 24 and row["messageTokens"] > 0
    assert row["summariesByDepth"]["0"]["total"] >= 1
    assert row["fallbackPending"] >= 1
    assert row["compactionSteps"] >= 1 and row["lastAssembly"]["tokens"] > 0
    table = _run(SESSION)
    assert table.exit_code == 0
    assert f"session {SESSION}" in table.output
    assert "24 stored" in table.output
    assert f"{row['fallbackPending']} pending" in table.output
    assert "last assembly" in table.output and "summaries +" in table.output


async def test_status_of_a_state_dir_without_a_store_says_so_and_creates_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("CODEX_SIDECAR_STATE_DIR", str(tmp_path))
    result = _run()
    assert result.exit_code != 0
    assert "no lossless store" in result.output
    assert not (tmp_path / "engines").exists()


async def test_status_of_an_unknown_session_says_so(tmp_path, monkeypatch):
    await _store(tmp_path)
    monkeypatch.setenv("CODEX_SIDECAR_STATE_DIR", str(tmp_path))
    result = _run("01a20132-0000-70b2-9e11-b6afa40528ac")
    assert result.exit_code != 0
    assert "holds no session" in result.output


def test_the_engine_listing_still_answers_without_a_subcommand():
    result = CliRunner().invoke(cli, ["engines"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "lossless" in result.output and "legacy" in result.output


async def test_status_of_a_codex_thread_shows_the_session_it_belongs_to(tmp_path, monkeypatch):
    from sidecar.store import bindings

    await _store(tmp_path)
    bindings.save(tmp_path, bindings.Binding("thr-rotated", SESSION, "relay"))
    monkeypatch.setenv("CODEX_SIDECAR_STATE_DIR", str(tmp_path))
    result = _run("thr-rotated", "--json")
    assert result.exit_code == 0, result.output
    (row,) = [json.loads(line) for line in result.output.splitlines()]
    assert row["sessionId"] == SESSION and row["messages"] == 24


async def test_status_counts_the_engines_model_calls_and_the_heartbeat_messages_it_skipped(tmp_path, monkeypatch):
    with FakeHost(tmp_path / "engines" / "lossless") as host:
        engine = LosslessEngine({**SMALL, "summary_model": "summariser-mini", "summary_max_calls_per_hour": 1, "summary_batch_size": 1, "cache_ttl": 0.0})
        await engine.bind(host)
        history: list = []
        for n in range(1, 13):
            ts = 1_700_000_000_000 + n * 10_000
            words = " ".join(f"w{n}x{k}" for k in range(60))
            beat = n % 4 == 0
            prompt = "Read HEARTBEAT.md; reply HEARTBEAT_OK." if beat else f"turn {n}: {words}"
            history += [UserMessage(content=prompt, timestamp=ts), AssistantMessage(content=[TextBlock(text="HEARTBEAT_OK" if beat else f"reply {n}: {words}")], timestamp=ts + 1)]
            await engine.after_turn(
                AfterTurnParams(session_id=SESSION, session_key=SESSION, session_file="", messages=list(history), pre_prompt_message_count=len(history) - 2, is_heartbeat=beat)
            )
            await engine.maintain(MaintainParams(session_id=SESSION, session_key=SESSION, session_file="", reason="turn"))
        await engine.dispose()
    monkeypatch.setenv("CODEX_SIDECAR_STATE_DIR", str(tmp_path))
    (row,) = [json.loads(line) for line in _run("--json").output.splitlines()]
    assert row["skipped"] == {"heartbeat": 6}
    assert row["modelCalls"]["calls"] == 1 and row["modelCalls"]["byModel"] == {"summariser-mini": 1}
    assert row["modelCalls"]["capped"] >= 1
    table = _run(SESSION).output
    assert "model calls   1 (1 on summariser-mini)" in table
    assert f"{row['modelCalls']['capped']} refused by the hourly cap ({row['modelCalls']['cappedLastHour']} in the last hour)" in table
    assert "skipped       6 messages (heartbeat)" in table
