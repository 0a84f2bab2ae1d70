"""With no engine the sidecar is invisible: the same scripted session, run
straight against the real codex and through the sidecar, gives the client
the same frames and the model the same request bodies.

Generated ids, timestamps, durations and temp paths differ between any two
runs, sidecar or not, so both sides are normalised the same way first: ids
become placeholders numbered by first appearance (so "the same id twice" is
still checked), timestamps and durations become markers, and each run's
temp root becomes `<root>` (tests/support/normalise.py).
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.normalise import client_view, model_view
from tools.codex_home import codex_env
from tools.fake_model import FakeModel
from tools.scenarios import SCENARIOS, codex_connector, connector, prepare_codex_home, run_scenario

pytestmark = needs_codex


async def run_once(name: str, tmp_path, via_sidecar: bool):
    scenario = SCENARIOS[name]
    # Same-length roots: the fake model's token estimate counts path characters.
    root = tmp_path / ("s" if via_sidecar else "d")
    workdir = root / "work"
    workdir.mkdir(parents=True)
    with FakeModel() as model:
        home = prepare_codex_home(scenario, root / "codex-home", model)
        if via_sidecar:
            env = codex_env(home, {**os.environ, "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN})
            connect = connector([sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"], env=env, cwd=workdir)
        else:
            connect = codex_connector(CODEX_BIN, home, workdir)
        clients: list = []
        await run_scenario(scenario, connect, model, workdir, clients=clients)
        return clients, model.requests, str(root)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_direct_and_proxied_sessions_look_the_same(name, tmp_path):
    d_clients, d_requests, d_root = await run_once(name, tmp_path, via_sidecar=False)
    s_clients, s_requests, s_root = await run_once(name, tmp_path, via_sidecar=True)
    assert model_view(s_requests, s_root) == model_view(d_requests, d_root)
    direct, proxied = client_view(d_clients, d_root), client_view(s_clients, s_root)
    assert len(proxied) == len(direct)
    assert proxied == direct
    # What the client sent is what the scenario sent: nothing injected, nothing lost.
    assert [len(c.sent) for c in s_clients] == [len(c.sent) for c in d_clients]
