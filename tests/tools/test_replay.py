"""Every recorded fixture, replayed through the sidecar without the codex binary.

The fake app-server (tools.replay) answers each client frame with the frames
the real codex 0.169.0 sent at that point; the client side sends the recorded
client frames in causal order. With no engine the sidecar must be invisible:
the client receives exactly the recorded server frames, byte for byte.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.support.harness import ROOT, proxied
from tools.replay import replay_plan

FIXTURES = sorted((ROOT / "fixtures").glob("*.jsonl"))
EXPECTED = {
    "plain_conversation",
    "shell_approval",
    "dynamic_tool_call",
    "interrupted_turn",
    "native_compaction",
    "resume_fresh_process",
    "model_error",
}


def test_every_required_fixture_is_present():
    names = {p.stem for p in FIXTURES}
    # resume is recorded as one file per app-server process.
    names = {n.rsplit("-", 1)[0] if n.startswith("resume_fresh_process") else n for n in names}
    assert EXPECTED <= names, f"missing fixtures: {sorted(EXPECTED - names)}"


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.stem for p in FIXTURES])
async def test_fixture_replays_byte_for_byte_through_the_sidecar(fixture):
    plan = replay_plan(fixture)
    assert any(s.send for s in plan) and any(not s.send for s in plan)
    env = {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    async with proxied([sys.executable, "-m", "tools.replay", str(fixture)], env=env) as c:
        expected = []
        for step in plan:
            if step.send:
                await c.wait_lines(len(expected))  # causality: what came before is here
                await c.send(step.line + b"\n")
            else:
                expected.append(step)
        got = await c.wait_lines(len(expected), timeout=30)
        await c.close()
        status = await c.wait_exit()
    assert status == 0
    for step, line in zip(expected, got):
        if step.control:  # the sidecar's own replies: same request answered
            assert json.loads(line)["id"] == json.loads(step.line)["id"]
        else:
            assert line == step.line
    assert len(c.lines) == len(expected)
