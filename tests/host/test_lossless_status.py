"""``codex-sidecar engines lossless status``: the lossless store's figures per session."""

from __future__ import annotations

import json

from click.testing import CliRunner

from engines.testkit import FakeHost
from sidecar.cli import cli
from tests.engines.lossless.conftest import SESSION, make_engine, run_turn, turn


async def _store(state_dir) -> None:
    """A store where the sidecar binds the engine, with summaries (one extractive)."""
    with FakeHost(state_dir / "engines" / "lossless") as host:
        host.push(*["model summary"] * 3)
        host.fail_all()
        engine = await make_engine(host)
        history: list = []
        for n in range(1, 13):
            await run_turn(engine, history, turn(n))
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
    assert row["messages"] == 48 and row["messageTokens"] > 0
    assert row["summariesByDepth"]["0"]["total"] >= 1
    assert row["fallbackPending"] >= 1
    assert row["compactionSteps"] >= 1 and row["lastAssembly"]["tokens"] > 0
    table = _run(SESSION)
    assert table.exit_code == 0
    assert f"session {SESSION}" in table.output
    assert "48 stored" in table.output
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
