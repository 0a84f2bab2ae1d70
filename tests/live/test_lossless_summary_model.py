"""``lossless``'s own model calls, live: real codex 0.169.0, the fake model
answering the summary model slowly, as a reasoning model thinks.

The engine asks for its summaries on ``summary_model`` at ``summary_effort``;
Codex must carry both to the provider (the fake model logs each request's
model and reasoning effort), the client's turns stay on the client's model,
and a summariser that takes seconds still writes the summaries within the
default ``summary_timeout``. The sidecar's log gives each completion's wall
time: the model's think time plus what the hidden Codex thread adds (0.19 s
here on 2026-12-02: 3,186 ms for a 3 s model; printed with ``-s``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import trio

from engines.lossless import DB_NAME, LosslessConfig, Store
from tests.support.codex import CODEX_BIN, needs_codex
from tests.support.harness import ROOT
from tests.support.live import TURN_TIMEOUT, finalized, sidecar
from tools.codex_home import codex_env, make_codex_home
from tools.fake_model import FakeModel, Rules

pytestmark = needs_codex

SUMMARY_MODEL = "summariser-mini"
THINK_SECONDS = 3.0
CONFIG = f"""\
[engines.lossless]
token_budget = 2000
own_framing_tokens = 0
fresh_tail_tokens = 200
fresh_tail_messages = 2
leaf_chunk_tokens = 300
leaf_summary_tokens = 60
condensed_summary_tokens = 80
compact_target = 0.3
cache_ttl = 0
summary_model = "{SUMMARY_MODEL}"
"""
ANSWERED = re.compile(rb"host completion answered.*?ms=([0-9.]+)")


def env_for(tmp: Path, home: Path) -> dict[str, str]:
    (tmp / "sidecar.toml").write_text(CONFIG)
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    base.update(
        {
            "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN or "",
            "CODEX_SIDECAR_ENGINE": "lossless",
            "CODEX_SIDECAR_STATE_DIR": str(tmp / "state"),
            "CODEX_SIDECAR_CONFIG": str(tmp / "sidecar.toml"),
            "CODEX_SIDECAR_LOG_LEVEL": "info",
            "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        }
    )
    return codex_env(home, base)


async def test_summaries_run_on_the_summary_model_at_low_effort_and_a_slow_one_still_writes_them(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    rules = Rules(reply_words=(60, 90))
    with FakeModel() as model:
        model.script(*[rules] * 200)
        model.slow(THINK_SECONDS, when=lambda body: body.get("model") == SUMMARY_MODEL)
        home = make_codex_home(tmp_path / "codex-home", model.base_url)
        async with sidecar(env_for(tmp_path, home), work) as client:
            tid = await client.start_thread(cwd=str(work))
            for n in range(8):
                done = await client.run_turn(tid, f"Step {n}: " + " ".join(f"note{n}x{k}" for k in range(60)), timeout=TURN_TIMEOUT)
                assert done["turn"]["status"] == "completed", done
                await finalized(client, tid, done["turn"]["id"])
            with trio.fail_after(TURN_TIMEOUT):  # background summaries: until every one is answered
                while True:
                    calls = (await client.request("sidecar/status"))["lifecycle"]["host"]["completions"]
                    if calls["calls"] and model.in_flight == 0 and len([m for m in model.models if m[0] == SUMMARY_MODEL]) >= calls["calls"]:
                        break
                    await trio.sleep(0.1)
            await trio.sleep(0.5)
            log = bytes(client.stderr_bytes)
        seen = model.models
    summary_calls = [m for m in seen if m[0] == SUMMARY_MODEL]
    turn_calls = [m for m in seen if m[0] != SUMMARY_MODEL]
    assert summary_calls and set(summary_calls) == {(SUMMARY_MODEL, LosslessConfig().summary_effort)}
    assert turn_calls and SUMMARY_MODEL not in {m for m, _ in turn_calls}
    store = Store.open(tmp_path / "state" / "engines" / "lossless", DB_NAME)
    try:
        session = store.session_ids()[0]
        summaries = store.summaries(session)
        figures = store.status(session)["modelCalls"]
    finally:
        store.close()
    assert summaries and not [s for s in summaries if s.fallback], "a 3 s summariser fits the default summary_timeout"
    assert figures["byModel"] == {SUMMARY_MODEL: len(summary_calls)}
    walls = [float(ms) for ms in ANSWERED.findall(log)]
    if walls:
        print(f"completion wall times with a {THINK_SECONDS:g} s model: {', '.join(f'{w:.0f} ms' for w in walls)}; "
              f"added by the hidden thread: {min(walls) - THINK_SECONDS * 1000:.0f}-{max(walls) - THINK_SECONDS * 1000:.0f} ms")
