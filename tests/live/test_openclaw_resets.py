"""OpenClaw's `/new` and `/reset` through the real gateway (issue 33, "Done
when"): the real `openclaw` 2026.9.6 with its Codex plugin 2026.9.5, the real
codex 0.169.0, the fake model, the sidecar with `lossless` wrapped so that it
writes down what it is given.

Through `openclaw gateway run`, session A plants a fact in two turns and
session B another in one; A gets `/new` and a turn, B gets `/reset` and a
turn. Then web search is turned off and the gateway restarted (OpenClaw
starts another Codex thread for the session and renders its transcript into
it: the post-reset session must continue there) for two more turns of A, the
second asking the model to look for the fact with `lcm_grep`; then one
`openclaw agent --local` turn of A (a new process, and one tool fewer than
the gateway: another thread). `--local` itself does not reset: it sends
`/new` to the model as a prompt.

After each reset: no pre-reset fact in any model request, `assemble`,
`after_turn` or `lcm_*` answer; every later engine call is one new session;
the pre-reset transcript and store rows are still in the state dirs.

Slow (an OpenClaw turn takes 10-60 s on a loaded machine): run alone with
`make test-openclaw PYTEST_ARGS=tests/live/test_openclaw_resets.py`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from engines.lossless import DB_NAME, Store
from sidecar.lifecycle.resets import RESET_ENTRY
from sidecar.store import bindings
from sidecar.store.mirror import session_path
from tests.support.openclaw import CODEX_BIN, MARKS, SETTLED, TIMED_OUT, UNREACHABLE, require_tools
from tools.fake_model import FakeModel, Rules, Step, Text, tool_names, tool_outputs
from tools.openclaw_home import AgentFailed, OpenClawHome, make_openclaw_home, sidecar_command, transcript_user_texts

ROOT = Path(__file__).resolve().parents[2]

pytestmark = MARKS

DIST = "live-openclaw-resets-engines"
ENGINE_ID = "live-openclaw-resets-lossless"
ENGINE = '''\
import json, os
from engines.lossless import LosslessEngine


def _texts(messages):
    out = []
    for m in messages or []:
        content = getattr(m, "content", None)
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(getattr(b, "text", "") for b in content)
        summary = getattr(m, "summary", None)
        if summary:
            out.append(summary)
    return out


class RecordingLossless(LosslessEngine):
    """`lossless`, every assemble, after_turn, tool call and reset written down."""

    def _note(self, method, params, **more):
        with open(os.environ["LIVE_RESETS_LOG"], "a") as f:
            f.write(json.dumps({"method": method, "sessionId": params.session_id,
                                "texts": _texts(getattr(params, "messages", None)),
                                "prompt": getattr(params, "prompt", None), **more}) + "\\n")

    async def assemble(self, params):
        result = await super().assemble(params)
        self._note("assemble", params, assembled=_texts(result.messages))
        return result

    async def after_turn(self, params):
        self._note("after_turn", params)
        await super().after_turn(params)

    async def call_tool(self, params):
        result = await super().call_tool(params)
        self._note("call_tool", params, tool=params.name, answer=result.text)
        return result

    async def on_session_reset(self, params):
        self._note("on_session_reset", params, previous=params.previous_session_id)
        await super().on_session_reset(params)
'''

A, B = "agent:main:reset-a", "agent:main:reset-b"
FACT_A = "Remember the locker code 4711."
FACT_B = "Remember the otter code 9182."
SECRET_A, SECRET_B = "4711", "9182"
A_BEFORE = [FACT_A, "What is 2+2?"]
A_GATEWAY = "Which code did I give you?"
A_AFTER = ["What is 3+3?", "Use lcm_grep to find locker."]
A_LOCAL = "Thanks, that is all."
B_GATEWAY = "Which code did I give you?"


def _home(root: Path, model: FakeModel) -> OpenClawHome:
    openclaw_bin, template, _ = require_tools()
    root.mkdir(parents=True, exist_ok=True)
    site = root / "site"
    site.mkdir()
    (site / "live_openclaw_resets_engines.py").write_text(ENGINE)
    info = site / "live_openclaw_resets_engines-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST}\nVersion: 0.0.1\n")
    (info / "entry_points.txt").write_text(f"[openclaw.context_engines]\n{ENGINE_ID} = live_openclaw_resets_engines:RecordingLossless\n")
    (root / "sidecar.toml").write_text("")
    env = {
        "CODEX_SIDECAR_CODEX_BIN": CODEX_BIN,
        "CODEX_SIDECAR_ENGINE": ENGINE_ID,
        "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST,
        "CODEX_SIDECAR_STATE_DIR": str(root / "sidecar-state"),
        "CODEX_SIDECAR_CONFIG": str(root / "sidecar.toml"),
        "LIVE_RESETS_LOG": str(root / "engine.jsonl"),
        "PYTHONPATH": os.pathsep.join(p for p in (str(site), str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    return make_openclaw_home(root, openclaw_bin=openclaw_bin, template=template, app_server_command=sidecar_command(), base_url=model.base_url, env=env)


def _turn(home: OpenClawHome, model: FakeModel, key: str, message: str, steps: Sequence[Step], *, local: bool = True) -> tuple[range, dict]:
    before = len(model.requests)
    for attempt in range(3):
        model.clear_script()
        model.script(*steps)
        try:
            result = home.agent("", message, local=local, session_key=key)
            return range(before, len(model.requests)), result
        except AgentFailed as exc:
            # Repeated only when it reached no model and is no reset (a
            # reset that went through must not run twice).
            retry = (TIMED_OUT in str(exc) or UNREACHABLE in str(exc)) and not message.startswith("/")
            if not retry or len(model.requests) != before or attempt == 2:
                raise
            sys.stderr.write("openclaw turn failed before reaching the model; repeated\n")
    raise AssertionError("unreachable")


def _gateway(home: OpenClawHome, log: Path, timeout: float = 600.0):
    """`openclaw gateway run`, once listening and done starting up."""
    gateway = home.start_gateway(_free_port(), log)
    deadline = time.monotonic() + timeout
    while SETTLED not in log.read_text(errors="replace"):
        if time.monotonic() > deadline:
            gateway.stop()
            raise TimeoutError(f"gateway did not finish starting: {gateway.log_tail()}")
        time.sleep(1)
    return gateway


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stored(state: Path, session_id: str) -> list[str]:
    (folder,) = {p.parent for p in state.glob(f"engines/*/{DB_NAME}")}
    store = Store.open(folder, DB_NAME)
    try:
        return [r.text for r in store.messages_between(session_id, 1)]
    finally:
        store.close()


def _web_search_off(home: OpenClawHome) -> None:
    config = json.loads(home.config_path.read_text())
    config.setdefault("tools", {}).setdefault("web", {}).setdefault("search", {})["enabled"] = False
    home.config_path.write_text(json.dumps(config, indent=2) + "\n")


def test_new_and_reset_through_the_gateway_begin_a_new_engine_session_that_holds_nothing_before_them(tmp_path):
    rules = Rules()
    root = tmp_path / "oc"
    with FakeModel() as model:
        home = _home(root, model)
        gateway = _gateway(home, root / "gateway.log")
        try:
            for n, message in enumerate(A_BEFORE, 1):
                _turn(home, model, A, message, [Text(f"Noted {n}.")], local=False)
            _turn(home, model, B, FACT_B, [Text("Noted.")], local=False)
            new = _turn(home, model, A, "/new", [Text("unexpected model turn")], local=False)
            a_gateway = _turn(home, model, A, A_GATEWAY, [Text("I do not know a code.")], local=False)
            reset = _turn(home, model, B, "/reset", [Text("unexpected model turn")], local=False)
            b_gateway = _turn(home, model, B, B_GATEWAY, [Text("I do not know a code.")], local=False)
        finally:
            gateway.stop()
        # Web search off: OpenClaw starts another Codex thread for the session
        # and renders its (post-reset) transcript into its first turn.
        _web_search_off(home)
        gateway = _gateway(home, root / "gateway-2.log")
        try:
            a_after = [
                _turn(home, model, A, A_AFTER[0], [Text("Six.")], local=False),
                _turn(home, model, A, A_AFTER[1], [rules, rules, rules], local=False),
            ]
        finally:
            gateway.stop()
        # --local (one tool fewer than the gateway: another thread), a new process.
        a_after.append(_turn(home, model, A, A_LOCAL, [Text("You are welcome.")]))
        requests = list(model.requests)
    acks = [new[1], reset[1]]
    (root / "model.json").write_text(json.dumps({"requests": requests, "acks": acks}))
    assert not [r for r in (new[0], reset[0]) if len(r)], "a bare /new or /reset is answered by OpenClaw, no model turn"
    check(root, requests, a_gateway[0], b_gateway[0], [r for r, _ in a_after])


def check(root: Path, requests: list[dict], a_gateway: range, b_gateway: range, a_after: list[range]) -> None:
    rules = Rules()
    state = root / "sidecar-state"
    calls = [json.loads(line) for line in (root / "engine.jsonl").read_text().splitlines()]
    # The resets: one engine notification each, from OpenClaw's session (its relay id) to a new one.
    resets = [c for c in calls if c["method"] == "on_session_reset"]
    assert len(resets) == 2, resets
    (a_old, a_new), (b_old, b_new) = [(c["previous"], c["sessionId"]) for c in resets]
    assert a_old.startswith("codex-") and b_old.startswith("codex-") and a_old != b_old
    assert a_new not in (a_old, b_old, b_new)
    # Every engine call after a reset is the new session's, and holds nothing from before it.
    a_at = calls.index(resets[0])
    b_at = calls.index(resets[1])
    for c in calls[a_at:]:
        if c["sessionId"] in (a_old, a_new):
            assert c["sessionId"] == a_new, c
            assert SECRET_A not in json.dumps(c), c
    for c in calls[b_at:]:
        if c["sessionId"] in (b_old, b_new):
            assert c["sessionId"] == b_new, c
            assert SECRET_B not in json.dumps(c), c
    a_assembles = [c for c in calls[a_at:] if c["method"] == "assemble" and c["sessionId"] == a_new]
    assert [c["prompt"] for c in a_assembles] == [A_GATEWAY, *A_AFTER, A_LOCAL]
    assert a_assembles[0]["texts"] == []  # the new session's first assemble: nothing
    # The model: no pre-reset fact in any request after the reset.
    for i in [*a_gateway, *b_gateway, *(i for r in a_after for i in r)]:
        text = json.dumps(requests[i])
        assert SECRET_A not in text and SECRET_B not in text, i
    # lcm_grep ran in the new session and found nothing from before the reset.
    grep = [requests[i] for i in a_after[1]]
    assert "lcm_grep" in tool_names(grep[0]) and rules.kind(grep[0]) == "tool-call", [rules.kind(r) for r in grep]
    answers = [c for c in calls if c["method"] == "call_tool"]
    assert answers and all(c["sessionId"] == a_new and SECRET_A not in c["answer"] for c in answers), answers
    assert not any(SECRET_A in o for r in grep[1:] for o in tool_outputs(r).values())
    # The post-reset session continued on the next Codex threads (web search off, then --local).
    threads = bindings.threads_of(state, a_new)
    assert len(threads) >= 3, threads
    assert bindings.load_relay(state, a_old).session == a_new
    # Nothing of the old sessions is gone: the mirror, the store, OpenClaw's transcript.
    assert FACT_A in session_path(state, a_old).read_text() and FACT_B in session_path(state, b_old).read_text()
    assert any(SECRET_A in t for t in _stored(state, a_old)) and any(SECRET_B in t for t in _stored(state, b_old))
    assert not any(SECRET_A in t for t in _stored(state, a_new))
    marks = [json.loads(line) for line in session_path(state, a_old).read_text().splitlines()]
    assert [m["data"]["nextSessionId"] for m in marks if m.get("customType") == RESET_ENTRY] == [a_new]
    assert FACT_A in _openclaw_user_texts(root / "state")


def _openclaw_user_texts(state: Path) -> list[str]:
    """Every user message of OpenClaw's own transcripts (all sessions)."""
    import sqlite3

    db = state / "agents" / "main" / "agent" / "openclaw-agent.sqlite"
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        ids = [row[0] for row in conn.execute("SELECT DISTINCT session_id FROM transcript_events")]
    finally:
        conn.close()
    return [t for sid in ids for t in transcript_user_texts(state, sid)]
