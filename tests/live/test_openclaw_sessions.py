"""One OpenClaw session, one engine session, across processes and Codex
threads: the real `openclaw agent --local` (2026.9.6, its Codex plugin
2026.9.5), the real codex 0.169.0, the fake model, the sidecar with an
engine that writes down what it is given (issue 24).

Session A runs 4 turns, then web search is turned off (OpenClaw starts a new
Codex thread for the session and renders its transcript into the new
thread's first turn), then 2 more; session B runs one turn. Every turn is a
new OpenClaw process and a new sidecar.

Slow (an OpenClaw turn takes 10-60 s on a loaded machine): run alone with
`make test-openclaw PYTEST_ARGS=tests/live/test_openclaw_sessions.py`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from sidecar.projection import CONTEXT_HEADER
from sidecar.store import bindings
from sidecar.store.mirror import session_path
from tools.codex_home import find_codex_bin
from tools.fake_model import FakeModel, Text, input_texts
from tools.openclaw_home import AgentFailed, OpenClawHome, OpenClawMissing, find_openclaw, make_openclaw_home, sidecar_command

try:
    OPENCLAW = find_openclaw()
    MISSING: str | None = None
except OpenClawMissing as exc:
    OPENCLAW, MISSING = None, str(exc)
CODEX_BIN = find_codex_bin()
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.openclaw,
    pytest.mark.codex,
    pytest.mark.skipif(OPENCLAW is None and MISSING is None, reason="OpenClaw env not set: run through `make test` or `make test-openclaw`"),
]

DIST = "live-openclaw-sessions-engines"
ENGINE_ID = "live-openclaw-sessions-recording"
ENGINE = f'''\
import json, os
from engines import EngineInfo
from engines.testkit import RecordingEngine


class Recording(RecordingEngine):
    """The history unchanged; every call written down (session, key, prompt, history)."""

    def __init__(self, config=None):
        super().__init__(config, info=EngineInfo(id="{ENGINE_ID}", name="recording", version="0"))

    def _note(self, method, params):
        users = [m.content if isinstance(m.content, str) else " ".join(getattr(b, "text", "") for b in m.content)
                 for m in getattr(params, "messages", None) or [] if m.role == "user"]
        with open(os.environ["LIVE_SESSIONS_LOG"], "a") as f:
            f.write(json.dumps({{"method": method, "sessionId": params.session_id, "sessionKey": params.session_key,
                                "prompt": getattr(params, "prompt", None), "users": users}}) + "\\n")

    async def handle_assemble(self, params):
        self._note("assemble", params)
        return await super().handle_assemble(params)

    async def handle_after_turn(self, params):
        self._note("after_turn", params)
'''

A_BEFORE = ["Remember the word heron.", "What is 2+2?", "What is 3+3?", "What is 4+4?"]
A_AFTER = ["Which word did I ask you to remember?", "Thanks, that is all."]
B = ["Remember the word otter."]
TIMED_OUT = "codex app-server request timed out"


def _home(root: Path, model: FakeModel) -> OpenClawHome:
    if MISSING is not None:
        pytest.fail(MISSING, pytrace=False)
    assert OPENCLAW is not None and CODEX_BIN is not None
    openclaw_bin, template = OPENCLAW
    root.mkdir(parents=True, exist_ok=True)
    site = root / "site"
    site.mkdir()
    (site / "live_openclaw_sessions_engines.py").write_text(ENGINE)
    info = site / "live_openclaw_sessions_engines-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[openclaw.context_engines]\n{ENGINE_ID} = live_openclaw_sessions_engines:Recording\n")
    (root / "sidecar.toml").write_text("")
    env = {
        "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN,
        "CODEX_SIDECAR_ENGINE": ENGINE_ID,
        "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST,
        "CODEX_SIDECAR_STATE_DIR": str(root / "sidecar-state"),
        "CODEX_SIDECAR_CONFIG": str(root / "sidecar.toml"),
        "LIVE_SESSIONS_LOG": str(root / "engine.jsonl"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    return make_openclaw_home(root, openclaw_bin=openclaw_bin, template=template, app_server_command=sidecar_command(), base_url=model.base_url, env=env)


def _turn(home: OpenClawHome, model: FakeModel, session: str, message: str, reply: str) -> range:
    before = len(model.requests)
    model.clear_script()
    model.script(Text(reply))
    for attempt in range(3):
        try:
            home.agent(session, message)
            return range(before, len(model.requests))
        except AgentFailed as exc:
            if TIMED_OUT not in str(exc) or len(model.requests) != before or attempt == 2:
                raise
            sys.stderr.write("openclaw turn timed out before reaching the model; repeated\n")
    raise AssertionError("unreachable")


def _web_search_off(home: OpenClawHome) -> None:
    config = json.loads(home.config_path.read_text())
    config.setdefault("tools", {}).setdefault("web", {}).setdefault("search", {})["enabled"] = False
    home.config_path.write_text(json.dumps(config, indent=2) + "\n")


def _mirror_users(state: Path, session_id: str) -> list[str]:
    out = []
    for line in session_path(state, session_id).read_bytes().splitlines():
        entry = json.loads(line)
        if entry.get("type") == "message" and entry["message"]["role"] == "user":
            content = entry["message"]["content"]
            out.append(content if isinstance(content, str) else "\n".join(b.get("text", "") for b in content if b.get("type") == "text"))
    return out


def test_one_openclaw_session_is_one_engine_session_across_processes_and_a_thread_rotation(tmp_path):
    with FakeModel() as model:
        home = _home(tmp_path / "oc", model)
        turns = [_turn(home, model, "oc-a", m, f"Answer {n}.") for n, m in enumerate(A_BEFORE, 1)]
        _web_search_off(home)
        turns += [_turn(home, model, "oc-a", m, f"Answer {n}.") for n, m in enumerate(A_AFTER, 5)]
        turns += [_turn(home, model, "oc-b", m, "Noted: otter.") for m in B]
        requests = list(model.requests)

    state = tmp_path / "oc" / "sidecar-state"
    calls = [json.loads(line) for line in (tmp_path / "oc" / "engine.jsonl").read_text().splitlines()]
    assembles = [c for c in calls if c["method"] == "assemble"]
    # An assemble on every turn, the rotated thread's first included.
    assert [c["prompt"] for c in assembles] == [*A_BEFORE, *A_AFTER, *B]
    a_ids = {(c["sessionId"], c["sessionKey"]) for c in calls if c["prompt"] in (*A_BEFORE, *A_AFTER) or c["method"] == "after_turn" and B[0] not in c["users"]}
    b_ids = {(c["sessionId"], c["sessionKey"]) for c in calls if c["prompt"] in B}
    assert len(a_ids) == 1 and len(b_ids) == 1 and a_ids != b_ids  # one session key per session
    (a_session, _), (b_session, _) = next(iter(a_ids)), next(iter(b_ids))
    assert a_session.startswith("codex-") and b_session.startswith("codex-")  # OpenClaw's relay ids
    threads = bindings.threads_of(state, a_session)
    assert len(threads) >= 2, "turning web search off should have started a new Codex thread"
    # The rotated thread's first turn assembled the whole session before it.
    assert assembles[4]["users"] == A_BEFORE
    # The model got the session once: the engine's projection, not OpenClaw's as well.
    rotated = "\n".join(input_texts(requests[turns[4][-1]]))
    assert rotated.count("Remember the word heron.") == 1
    # One transcript per session, every prompt once, no projection in it.
    assert _mirror_users(state, a_session) == [*A_BEFORE, *A_AFTER]
    assert _mirror_users(state, b_session) == B
    assert CONTEXT_HEADER not in session_path(state, a_session).read_text()
