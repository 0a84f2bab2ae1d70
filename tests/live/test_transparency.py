"""With no engine the sidecar is invisible: the same scripted session, run
straight against the real codex and through the sidecar, gives the client
the same frames and the model the same request bodies.

Generated ids, timestamps, durations and temp paths differ between any two
runs, sidecar or not, so both sides are normalised the same way first: ids
become placeholders numbered by first appearance (so "the same id twice" is
still checked), timestamps and durations become markers, and each run's
temp root becomes `<root>`.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

from tools.codex_home import codex_env, find_codex_bin
from tools.fake_model import FakeModel
from tools.scenarios import SCENARIOS, codex_connector, connector, prepare_codex_home, run_scenario

CODEX_BIN = find_codex_bin()

pytestmark = [
    pytest.mark.codex,
    pytest.mark.skipif(CODEX_BIN is None, reason="real codex not installed: run `make setup`"),
]

UUIDISH = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME_KEY = re.compile(r"(At|AtMs|Ms|_ms|_at|timestamp)$")
# Wall-clock readings embedded in strings: rollout file names, metadata JSON.
ROLLOUT_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}")
EMBEDDED_MS = re.compile(r'(_at_unix_ms\\?":)\d+')
# Codex's own wall-clock readings inside tool output, e.g. "Wall time: 0.0012 seconds".
WALL = re.compile(r"Wall time: [0-9.]+ seconds")
CHUNK = re.compile(r"Chunk ID: \w+")


class Normaliser:
    def __init__(self, root: str) -> None:
        self.root = root
        self.ids: dict[str, str] = {}

    def _id(self, m: re.Match) -> str:
        return self.ids.setdefault(m.group(0), f"<id{len(self.ids)}>")

    def text(self, s: str) -> str:
        s = s.replace(self.root, "<root>")
        s = UUIDISH.sub(self._id, s)
        s = WALL.sub("Wall time: <t> seconds", s)
        s = ROLLOUT_TIME.sub("<time>", s)
        s = EMBEDDED_MS.sub(r"\1<time>", s)
        return CHUNK.sub("Chunk ID: <chunk>", s)

    def value(self, v, key: str | None = None):
        if key is not None and TIME_KEY.search(key) and isinstance(v, (int, float, str)):
            return "<time>"
        if key in ("processId", "pid") and v is not None:
            return "<pid>"
        if isinstance(v, dict):
            # Sorted: Codex serialises some maps (client_metadata) in hash order,
            # and ids are numbered by first appearance.
            return {k: self.value(v[k], k) for k in sorted(v)}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, str):
            return self.text(v)
        return v


# Notifications whose timing relative to the turn is Codex's own business.
UNORDERED = {"account/rateLimits/updated", "remoteControl/status/changed", "warning", "configWarning", "mcpServer/startupStatus/updated"}


def client_view(clients, root: str) -> list:
    norm = Normaliser(root)
    out = []
    for c in clients:
        for line in c.received:
            msg = json.loads(line)
            if msg.get("method") in UNORDERED:
                continue
            out.append(norm.value(msg))
    return out


def model_view(requests, root: str) -> list:
    norm = Normaliser(root)
    return [norm.value(r) for r in requests]


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
