"""A real OpenClaw heartbeat through the sidecar with `lossless` (issue 35,
"Done when": heartbeat turns, none stored by default): the real `openclaw`
2026.9.6 with its Codex plugin 2026.9.5, the real codex 0.169.0, the fake
model, the sidecar with the built-in `lossless` engine.

Only the gateway runs heartbeats: `openclaw agent` (`--local` or through
the gateway) always runs its turn with `trigger: "user"`
(`dist/attempt-execution.runtime-*.mjs`), and a turn has `trigger:
"heartbeat"` (the Codex plugin's `turn/start` `turnTrigger`) only when the
gateway's heartbeat runner drives the reply pipeline with `isHeartbeat`
(`dist/heartbeat-runner-run-*.mjs`, `dist/agent-runner.runtime-*.mjs`).
So: `openclaw gateway run`, one ordinary turn on the agent's main session
(`agent:main:main`), then `openclaw system event --mode now`, which asks the
gateway (`wake`) to run a heartbeat now on that session.

The lossless store keeps the ordinary turn and leaves the heartbeat's
messages out, counted as skipped (`engines lossless status`); the sidecar's
transcript mirror, the client's history, keeps both turns.

Slow (a gateway start and two OpenClaw turns: 1-2 minutes on a loaded
2-core machine): run alone with
`make test-openclaw PYTEST_ARGS=tests/live/test_openclaw_heartbeats.py`.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from engines.lossless import DB_NAME, Store
from engines.lossless.skipping import skipped_figures
from sidecar.record import read_recording
from tests.support.openclaw import CODEX_BIN, MARKS, SETTLED, TIMED_OUT, UNREACHABLE, require_tools
from tools.fake_model import FakeModel, Text, input_texts
from tools.openclaw_home import AgentFailed, OpenClawHome, make_openclaw_home, message_text, sidecar_command, transcript_user_texts

ROOT = Path(__file__).resolve().parents[2]

pytestmark = MARKS

#: The agent's main session: where `openclaw system event` wakes a heartbeat.
MAIN = "agent:main:main"
PROMPT = "Remember the word heron."
ANSWER = "Noted: heron."
EVENT = "Build 7 finished."
HEARTBEAT_REPLY = "HEARTBEAT_OK"
#: Words of the prompt OpenClaw 2026.9.6 sends codex for a heartbeat.
HEARTBEAT_WORDS = "heartbeat_respond"
#: What OpenClaw's own transcript keeps of the heartbeat's prompt.
HEARTBEAT_POLL = "[OpenClaw heartbeat poll]"


def _home(root: Path, model: FakeModel) -> OpenClawHome:
    openclaw_bin, template, _ = require_tools()
    root.mkdir(parents=True, exist_ok=True)
    (root / "sidecar.toml").write_text("")  # never the developer's own config file: lossless's defaults
    env = {
        "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN,
        "CODEX_SIDECAR_ENGINE": "lossless",
        "CODEX_SIDECAR_STATE_DIR": str(root / "sidecar-state"),
        "CODEX_SIDECAR_CONFIG": str(root / "sidecar.toml"),
        "CODEX_SIDECAR_RECORD": str(root / "recording.jsonl"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    return make_openclaw_home(root, openclaw_bin=openclaw_bin, template=template, app_server_command=sidecar_command(), base_url=model.base_url, env=env)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, done, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def _turn(home: OpenClawHome, model: FakeModel) -> None:
    before = len(model.requests)
    for attempt in range(3):
        model.clear_script()
        model.script(Text(ANSWER))
        try:
            home.agent("", PROMPT, local=False, session_key=MAIN)
            return
        except AgentFailed as exc:
            if not (TIMED_OUT in str(exc) or UNREACHABLE in str(exc)) or len(model.requests) != before or attempt == 2:
                raise
            sys.stderr.write("openclaw turn failed before reaching the model; repeated\n")


def _wake_heartbeat(home: OpenClawHome) -> None:
    """`openclaw system event --mode now`: the gateway runs a heartbeat on
    the main session now, with the event in its prompt."""
    argv = [home.openclaw_bin, "system", "event", "--text", EVENT, "--mode", "now", "--json"]
    proc = subprocess.run(argv, env=home.env, cwd=home.workspace, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout).get("ok") is True, proc.stdout


def _mirror(state: Path) -> tuple[str, list[tuple[str, str]]]:
    """The one mirrored session's id and its (role, text) messages."""
    files = sorted((state / "sessions").glob("*.jsonl"))
    assert len(files) == 1, f"one session mirrored: {files}"
    out = []
    for line in files[0].read_text().splitlines():
        entry = json.loads(line)
        message = entry.get("message") if entry.get("type") == "message" else None
        if isinstance(message, dict):
            out.append((message["role"], message_text(message.get("content"))))
    return files[0].stem, out


def _store(state: Path, session_id: str) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(role, text) of the lossless store's messages of the session, and its
    skipped messages by reason."""
    store = Store.open(state / "engines" / "lossless", DB_NAME)
    try:
        return [(r.role, r.text) for r in store.messages_between(session_id, 1)], skipped_figures(store, session_id)
    finally:
        store.close()


def _seen(state: Path, session_id: str) -> int:
    """Messages of the session the engine stored or skipped."""
    stored, skipped = _store(state, session_id)
    return len(stored) + sum(skipped.values())


def _turn_triggers(recording: Path) -> list[str | None]:
    """`turnTrigger` of every `turn/start` OpenClaw sent the sidecar."""
    triggers = []
    for entry in read_recording(recording):
        if entry.dir == "client>codex" and entry.frame:
            frame = json.loads(entry.line())
            if frame.get("method") == "turn/start":
                triggers.append(frame["params"].get("turnTrigger"))
    return triggers


def _status(root: Path) -> list[dict]:
    """`codex-sidecar engines lossless status --json`: a session a line."""
    env = {**os.environ, "CODEX_SIDECAR_STATE_DIR": str(root / "sidecar-state"), "CODEX_SIDECAR_CONFIG": str(root / "sidecar.toml")}
    proc = subprocess.run([sidecar_command(), "engines", "lossless", "status", "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _openclaw_session_ids(state: Path) -> list[str]:
    """The sessions of OpenClaw's own transcript (its per-agent SQLite database)."""
    db = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT DISTINCT session_id FROM transcript_events")]
    finally:
        conn.close()


def test_a_real_openclaw_heartbeat_is_left_out_of_the_lossless_store_and_kept_in_the_mirror(tmp_path):
    root = tmp_path / "oc"
    state = root / "sidecar-state"
    with FakeModel() as model:
        home = _home(root, model)
        log = root / "gateway.log"
        gateway = home.start_gateway(_free_port(), log)
        try:
            _wait("the gateway finished starting", lambda: SETTLED in log.read_text(errors="replace"))
            _turn(home, model)
            _wait("the turn reached the mirror", lambda: len(list((state / "sessions").glob("*.jsonl"))) == 1)
            session_id, _ = _mirror(state)
            _wait("the turn reached the store", lambda: (state / "engines" / "lossless" / DB_NAME).exists() and _seen(state, session_id) == 2)
            model.clear_script()
            model.script(Text(HEARTBEAT_REPLY))
            _wake_heartbeat(home)
            # The heartbeat's after_turn has run: its messages were stored or skipped.
            _wait("the heartbeat turn reached the engine", lambda: _seen(state, session_id) > 2)
        finally:
            gateway.stop()
        requests = list(model.requests)

    # A real heartbeat: OpenClaw said so on turn/start, and the model got its prompt.
    assert _turn_triggers(root / "recording.jsonl") == ["user", "heartbeat"]
    assert len(requests) == 2
    assert PROMPT in "\n".join(input_texts(requests[0], role="user"))
    heartbeat_prompt = "\n".join(input_texts(requests[1], role="user"))
    assert HEARTBEAT_WORDS in heartbeat_prompt and EVENT in heartbeat_prompt

    # The store: the ordinary turn, and nothing of the heartbeat's but its count.
    stored, skipped = _store(state, session_id)
    assert stored == [("user", PROMPT), ("assistant", ANSWER)]
    assert skipped == {"heartbeat": 2}
    (status,) = _status(root)
    assert (status["sessionId"], status["messages"], status["skipped"]) == (session_id, 2, {"heartbeat": 2})

    # The client's history keeps the heartbeat: the sidecar's mirror and OpenClaw's own transcript.
    _, mirrored = _mirror(state)
    assert [role for role, _ in mirrored] == ["user", "assistant", "user", "assistant"]
    assert mirrored[:2] == stored
    assert HEARTBEAT_WORDS in mirrored[2][1] and mirrored[3] == ("assistant", HEARTBEAT_REPLY)
    (openclaw_session,) = _openclaw_session_ids(home.state)
    assert transcript_user_texts(home.state, openclaw_session) == [PROMPT, HEARTBEAT_POLL]
