"""The scenario registry and runner plumbing (no codex needed)."""

from __future__ import annotations

import inspect
import sys

from tools.client import AppServerClient
from tools.fake_model import FakeModel
from tools.scenarios import SCENARIOS, Scenario, connector, prepare_codex_home, run_scenario


def test_all_seven_scenarios_are_registered_with_runnable_signatures():
    assert list(SCENARIOS) == [
        "plain_conversation",
        "shell_approval",
        "dynamic_tool_call",
        "interrupted_turn",
        "native_compaction",
        "resume_fresh_process",
        "model_error",
    ]
    for scenario in SCENARIOS.values():
        params = list(inspect.signature(scenario.run).parameters)
        assert params[:3] == ["client", "model", "workdir"]
        assert ("connect" in params) == scenario.needs_connect
        assert isinstance(scenario.codex_config(), dict)


def test_approval_scenario_asks_for_an_approval_policy_that_prompts(tmp_path):
    import tomllib

    with FakeModel() as model:
        home = prepare_codex_home(SCENARIOS["shell_approval"], tmp_path, model)
        cfg = tomllib.loads((home / "config.toml").read_text())
    assert cfg["approval_policy"] == "on-request"
    assert cfg["model_providers"]["mock"]["base_url"] == model.base_url


async def test_runner_passes_connect_and_keeps_every_client(tmp_path):
    calls = []

    async def two_processes(client, model, workdir, *, connect):
        calls.append(client)
        await client.close()
        async with connect() as second:
            calls.append(second)
        return {"ok": True}

    scenario = Scenario("two", "two processes", two_processes, needs_connect=True)
    connect = connector([sys.executable, "-c", "import sys; sys.stdin.read()"])
    with FakeModel() as model:
        kept: list[AppServerClient] = []
        run = await run_scenario(scenario, connect, model, tmp_path, clients=kept)
    assert run.summary == {"ok": True}
    assert run.clients == calls == kept
    assert [c.returncode for c in kept] == [0, 0]
