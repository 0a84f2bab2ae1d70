"""A thread's history belongs to the client's thread, not to the engine
setting: a thread rebuilt both ways (in place, then onto a fresh backing
thread) and then served by a sidecar restarted with ``legacy``, with another
engine, with an engine that fails to load, or with the other rebuild setting
lists every turn, and the model's next request carries its newest turns.

Real codex 0.169.0 and the fake model; engines loaded by entry point.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.harness import ROOT
from tests.support.live import finalized, sidecar
from tools.client import AppServerClient
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import FakeModel, Text, input_texts

TURN_TIMEOUT = 30.0
DIST = "live-history-engines"

pytestmark = needs_codex

ENGINES = '''\
from engines import AssembleResult, CompactionSummaryMessage, EngineInfo
from engines.testkit import RecordingEngine


class Summary(RecordingEngine):
    """The oldest messages, in steps of 4, become one summary; 2 or more stay raw."""

    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="live-history-summary", name="summary", version="0"))

    async def handle_assemble(self, params):
        messages = list(params.messages)
        boundary = max(0, (len(messages) - 2) // 4 * 4)
        if boundary:
            summary = CompactionSummaryMessage(summary=f"SUMMARY of {boundary}", tokens_before=boundary * 100, timestamp=0)
            messages = [summary, *messages[boundary:]]
        return AssembleResult(messages=messages, estimated_tokens=len(messages))


class Identity(RecordingEngine):
    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="live-history-identity", name="identity", version="0"))


raise_on_load = None
'''


def install(site: Path) -> None:
    site.mkdir(parents=True)
    (site / "live_history_engines.py").write_text(ENGINES)
    (site / "live_history_broken.py").write_text("raise ImportError('this engine cannot load')\n")
    info = site / "live_history_engines-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(
        "[openclaw.context_engines]\n"
        "live-history-summary = live_history_engines:Summary\n"
        "live-history-identity = live_history_engines:Identity\n"
        "live-history-broken = live_history_broken:Engine\n"
    )


def env_for(tmp: Path, home: Path, engine: str, rebuild: str) -> dict[str, str]:
    (tmp / "sidecar.toml").write_text("")
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    base.update(
        {
            "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN or "",
            "CODEX_SIDECAR_ENGINE": engine,
            "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST,
            "CODEX_SIDECAR_REBUILD": rebuild,
            "CODEX_SIDECAR_STATE_DIR": str(tmp / "state"),
            "CODEX_SIDECAR_CONFIG": str(tmp / "sidecar.toml"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(tmp / "site"), str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
    )
    return codex_env(home, base)


async def all_turns(client: AppServerClient, tid: str, direction: str) -> list[str]:
    ids: list[str] = []
    cursor = None
    while True:
        page = await client.request("thread/turns/list", {"threadId": tid, "sortDirection": direction, "limit": 2, "cursor": cursor})
        ids += [t["id"] for t in page["data"]]
        cursor = page.get("nextCursor")
        if not cursor:
            return ids


def words(tag: str) -> str:
    return f"{tag} " + " ".join(["amber", "basil", "cedar", "delta", "ember", "fjord"] * 10)


@pytest.mark.parametrize(
    ("engine", "rebuild"),
    [
        ("legacy", "fresh"),
        ("live-history-identity", "fresh"),
        ("live-history-broken", "fresh"),
        ("live-history-summary", "revert"),
    ],
    ids=["legacy", "another-engine", "engine-fails-to-load", "other-rebuild-setting"],
)
async def test_a_rebuilt_thread_keeps_every_turn_whatever_the_next_run_s_settings(tmp_path, engine, rebuild):
    work = tmp_path / "work"
    work.mkdir()
    install(tmp_path / "site")
    prompts = [words(f"P{n}") for n in range(1, 7)]
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        model.script(*(Text(f"R{n}") for n in range(1, 7)))
        async with sidecar(env_for(tmp_path, home, "live-history-summary", "fresh"), work) as client:
            tid = await client.start_thread(cwd=str(work))
            turn_ids = []
            for prompt in prompts:
                done = await client.run_turn(tid, prompt, timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                turn_ids.append(done["turn"]["id"])
            status = await finalized(client, tid, turn_ids[-1])
        # Rebuilt both ways: turn 4 in place (no spare yet), turn 6 onto a fresh thread.
        assert status["lifecycle"]["rebuilds"] == 2
        assert status["lifecycle"]["backingThreads"]["switched"] == 1

        model.script(Text("after the restart"))
        async with sidecar(env_for(tmp_path, home, engine, rebuild), work) as again:
            resumed = await again.request("thread/resume", {"threadId": tid, "cwd": str(work)})
            read = await again.request("thread/read", {"threadId": tid, "includeTurns": True})
            desc = await all_turns(again, tid, "desc")
            asc = await all_turns(again, tid, "asc")
            done = await again.run_turn(tid, "What came last?", timeout=TURN_TIMEOUT)
            assert done["turn"]["status"] == "completed", done
            after = await all_turns(again, tid, "asc")
        last_request = model.requests[-1]

    assert resumed["thread"]["id"] == tid
    assert [t["id"] for t in resumed["thread"]["turns"]] == turn_ids
    assert [t["id"] for t in read["thread"]["turns"]] == turn_ids
    assert asc == turn_ids and desc == turn_ids[::-1]
    assert after == [*turn_ids, done["turn"]["id"]]
    seen = "\n".join(input_texts(last_request))
    # The newest turns reach the model (the thread as the last rebuild left
    # it, and the turn after it), and so does the new prompt.
    assert prompts[4].split()[0] in seen and prompts[5].split()[0] in seen and "What came last?" in seen
