"""A turn over the model's context window, live: the real codex 0.169.0,
the fake model rejecting an oversized input as the Responses API does
(``context_length_exceeded``, once), and an engine that owns compaction,
loaded by entry point like any third-party engine.

The sidecar has the engine compact and retries the turn once on a rebuilt
thread (reverted in place, or a fresh backing thread): the model's second
request carries the engine's summary instead of the history that did not
fit, the client sees one completed turn under the id it was given, and the
transcript mirror holds the turn once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.harness import ROOT
from tests.support.live import TURN_TIMEOUT, sidecar
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import FakeModel, Text, context_window, input_chars, input_texts

pytestmark = needs_codex

DIST = "live-overflow-engines"
ENGINE_ID = "live-overflow-compacting"
SUMMARY = "SUMMARY of the history that did not fit"
BIG = "big " * 1500
NEXT = "next " * 600

ENGINE_MODULE = f'''\
"""An engine that owns compaction (tests/live/test_overflow.py)."""

from engines import AssembleResult, CompactionDetails, CompactionSummaryMessage, CompactResult, EngineInfo
from engines.testkit import RecordingEngine


class Compacting(RecordingEngine):
    """The mirrored history unchanged until it compacts; one summary after."""

    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="{ENGINE_ID}", name="compacting", version="0", owns_compaction=True))
        self.compacted = False

    async def handle_compact(self, params):
        self.compacted = True
        details = CompactionDetails(summary="{SUMMARY}", first_kept_entry_id=None, tokens_before=3000, tokens_after=20, details={{}})
        return CompactResult(ok=True, compacted=True, result=details)

    async def handle_assemble(self, params):
        if self.compacted:
            return AssembleResult(messages=[CompactionSummaryMessage(summary="{SUMMARY}", tokens_before=3000, timestamp=0)], estimated_tokens=20)
        return AssembleResult(messages=list(params.messages), estimated_tokens=len(params.messages))
'''


def install_engine(site: Path) -> None:
    site.mkdir(parents=True, exist_ok=True)
    (site / "live_overflow_engines.py").write_text(ENGINE_MODULE)
    info = site / "live_overflow_engines-0.0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[openclaw.context_engines]\n{ENGINE_ID} = live_overflow_engines:Compacting\n")


@pytest.mark.parametrize("rebuild", ["revert", "fresh"])
async def test_a_turn_over_the_window_is_retried_once_after_the_engine_compacts(tmp_path, rebuild):
    work = tmp_path / "work"
    work.mkdir()
    site = tmp_path / "site"
    install_engine(site)
    state = tmp_path / "state"
    config = tmp_path / "sidecar.toml"
    config.write_text("")
    with FakeModel() as model:
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
        base.update(
            {
                "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN or "",
                "CODEX_SIDECAR_ENGINE": ENGINE_ID,
                "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST,
                "CODEX_SIDECAR_STATE_DIR": str(state),
                "CODEX_SIDECAR_CONFIG": str(config),
                "CODEX_SIDECAR_REBUILD": rebuild,
                "PYTHONPATH": os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH")) if p),
            }
        )
        env = codex_env(home, base)
        async with sidecar(env, work) as client:
            tid = await client.start_thread(cwd=str(work))
            model.script(Text("first answer"))
            first = await client.run_turn(tid, BIG, timeout=TURN_TIMEOUT)
            assert first["turn"]["status"] == "completed"
            # The window: what the first request held, plus less than the next prompt.
            limit = input_chars(model.requests[-1]) + len(NEXT) // 2
            model.script(context_window(limit), context_window(limit), context_window(limit))
            seen = client.mark()
            done = await client.run_turn(tid, NEXT, timeout=TURN_TIMEOUT)
            turn_id = done["turn"]["id"]
            status = await client.request("sidecar/status")
            notes = client.notifications[seen:]
        requests = model.requests[1:]
    overflow = status["lifecycle"]["threads"][tid]["lastOverflow"]
    # The model: the attempt with the whole history was rejected; the retry held the summary instead.
    rejected, retried = requests[0], requests[-1]
    assert input_chars(rejected) > limit and BIG.strip() in "\n".join(input_texts(rejected))
    retried_text = "\n".join(input_texts(retried))
    assert SUMMARY in retried_text and NEXT.strip() in retried_text and BIG.strip() not in retried_text
    # The client: one turn, completed, under the id it was given; no error.
    assert done["turn"]["status"] == "completed", done
    assert overflow["retried"] is True and overflow["turnId"] == turn_id
    retry_id = overflow["retryTurnId"]
    assert not [n for n in notes if n["method"] == "error"]
    assert not [n for n in notes if json.dumps(retry_id) in json.dumps(n)]
    assert [n["params"]["turn"]["id"] for n in notes if n["method"] == "turn/started"] == [turn_id]
    assert [n["params"]["turn"]["status"] for n in notes if n["method"] == "turn/completed"] == ["completed"]
    # The mirror: each user turn once, the failed attempt nowhere.
    entries = [json.loads(line) for line in (state / "sessions" / f"{tid}.jsonl").read_text().splitlines() if line.strip()]
    users = [e["message"]["content"] for e in entries if e.get("type") == "message" and e["message"]["role"] == "user"]
    texts = [c[0]["text"] if isinstance(c, list) else c for c in users]
    assert [t.strip() for t in texts] == [BIG.strip(), NEXT.strip()]
    assert any(e.get("type") == "compaction" and e.get("summary") == SUMMARY for e in entries)
