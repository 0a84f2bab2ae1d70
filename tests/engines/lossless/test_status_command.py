"""``codex-sidecar engines lossless status`` reads the store the config
names, on both backends: the SQLite file under the state directory, or the
PostgreSQL database of ``[engines.lossless] database_url``."""

from __future__ import annotations

import json

from click.testing import CliRunner

from engines.lossless import DB_NAME
from engines.testkit import FakeHost
from sidecar.cli import cli
from sidecar.store import bindings

from .conftest import SESSION, make_engine, run_turn, turn


def _cli(tmp_path, *args: str, database_url: str | None = None):
    config = tmp_path / "config.toml"
    table = f'[engines.lossless]\ndatabase_url = "{database_url}"\n' if database_url else ""
    config.write_text(f'state_dir = "{tmp_path / "sidecar"}"\n{table}')
    return CliRunner().invoke(cli, ["--config-file", str(config), "engines", "lossless", *args], catch_exceptions=False)


async def test_status_reports_the_configured_store_on_either_backend(tmp_path, backend):
    store_dir = tmp_path / "sidecar" / "engines" / "lossless"
    with FakeHost(store_dir) as h:
        h.answer_with(lambda p: f"model summary of {len(p.prompt)} chars")
        engine = await make_engine(h)
        history: list = []
        for n in range(1, 9):
            await run_turn(engine, history, turn(n, size=120))
        expected = engine.store.status(SESSION)
        await engine.dispose()
    # On PostgreSQL there is no SQLite file to fall back on: the figures come from the database.
    assert (store_dir / DB_NAME).is_file() == (backend is None)
    assert expected["messages"] == 32 and expected["summariesByDepth"] and expected["lastAssembly"]

    listed = _cli(tmp_path, "status", "--json", database_url=backend)
    assert listed.exit_code == 0, listed.output
    assert [json.loads(line) for line in listed.output.splitlines()] == [json.loads(json.dumps(expected))]

    table = _cli(tmp_path, "status", SESSION, database_url=backend)
    assert table.exit_code == 0, table.output
    assert f"session {SESSION}" in table.output and "32 stored" in table.output and "last assembly" in table.output

    # A Codex thread bound to the session (the binding stays under the state
    # directory, whichever backend holds the rows) reads the session's figures.
    bindings.save(tmp_path / "sidecar", bindings.Binding("codex-thread-7", SESSION, "relay-id"))
    by_thread = _cli(tmp_path, "status", "codex-thread-7", "--json", database_url=backend)
    assert by_thread.exit_code == 0, by_thread.output
    assert json.loads(by_thread.output)["sessionId"] == SESSION


async def test_status_of_an_empty_database_says_it_holds_no_session(tmp_path, backend):
    if backend is None:
        (tmp_path / "sidecar" / "engines" / "lossless").mkdir(parents=True)
        result = _cli(tmp_path, "status")
        assert result.exit_code == 1 and "no lossless store" in result.output
        return
    result = _cli(tmp_path, "status", database_url=backend)
    assert result.exit_code == 1 and "holds no session" in result.output
    assert "postgresql://" in result.output and not (tmp_path / "sidecar" / "engines" / "lossless" / DB_NAME).exists()
