"""The relay and the CLI when a child, an engine or the settings misbehave.

Each case was a bug found by review: a child dying in the middle of a line,
an engine that prints, an engine loader warning that ignored the log format,
prompt text left in a redacted recording, requests the sidecar answered
itself staying pending, a distribution without a version, and an empty
allowlist variable read as "trust everything".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from sidecar.record import Recorder
from sidecar.relay import ProxyOptions, RpcError
from tests.support.harness import CHILDREN, child, proxied

SIDECAR = [sys.executable, "-m", "sidecar"]


def _lines(out: bytes) -> tuple[list[dict], list[bytes]]:
    good, bad = [], []
    for line in out.split(b"\n"):
        if line:
            try:
                good.append(json.loads(line))
            except ValueError:
                bad.append(line)
    return good, bad


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    env.update({"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "CODEX_SIDECAR_STATE_DIR": str(tmp_path / "state"), "ECHO_RPC_QUIET": "1"})
    env.update(extra)
    return env


def _engine_site(tmp_path: Path, version: str | None = "0.1", noisy: bool = True) -> Path:
    """A distribution providing engine ``noisy`` whose constructor prints."""
    site = tmp_path / "site"
    (site / "noisy_pkg").mkdir(parents=True)
    (site / "noisy_pkg" / "__init__.py").write_text(
        "from engines import BaseContextEngine, EngineInfo, AssembleResult, IngestResult, CompactResult\n"
        "class Noisy(BaseContextEngine):\n"
        "    info = EngineInfo(id='noisy', name='noisy', version='0.1')\n"
        "    def __init__(self, config):\n"
        "        super().__init__(config)\n"
        + ("        print('noisy engine: loaded')\n" if noisy else "")
        + "    async def ingest(self, p): return IngestResult(ingested=True)\n"
        "    async def assemble(self, p): return AssembleResult(messages=p.messages, estimated_tokens=0)\n"
        "    async def compact(self, p): return CompactResult(ok=True, compacted=False)\n"
    )
    dist = site / "noisy_engine-0.1.dist-info"
    dist.mkdir()
    (dist / "entry_points.txt").write_text("[openclaw.context_engines]\nnoisy = noisy_pkg:Noisy\n")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: noisy-engine\n" + (f"Version: {version}\n" if version else ""))
    return site


def test_a_child_dying_mid_line_still_gets_its_requests_answered(tmp_path):
    p = subprocess.run(
        [*SIDECAR, "proxy", "--", sys.executable, str(CHILDREN / "torn_exit.py")],
        input=b'{"id":1,"method":"x","params":{}}\n',
        capture_output=True,
        timeout=30,
        env=_env(tmp_path),
    )
    good, bad = _lines(p.stdout)
    assert bad == [b'{"id":1,"resu'], "the torn line is forwarded as it was, on a line of its own"
    assert [m["id"] for m in good if "error" in m] == [1]
    assert p.returncode == 3


def test_an_engine_that_prints_cannot_corrupt_the_protocol_stream(tmp_path):
    site = _engine_site(tmp_path)
    p = subprocess.run(
        [*SIDECAR, "--engine", "noisy", "proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")],
        input=b'{"id":1,"method":"initialize","params":{}}\n',
        capture_output=True,
        timeout=30,
        env=_env(tmp_path, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])),
    )
    good, bad = _lines(p.stdout)
    assert bad == [] and [m.get("id") for m in good] == [1]
    assert b"noisy engine: loaded" in p.stderr


def test_the_engine_loader_logs_as_json_when_asked(tmp_path):
    p = subprocess.run(
        [*SIDECAR, "--log-format", "json", "--engine", "nope", "proxy", "--", "cat"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
        env=_env(tmp_path),
    )
    good, bad = _lines(p.stderr)
    assert bad == [], bad
    assert any("nope" in json.dumps(m) and m.get("level") == "warning" for m in good), good


def test_a_redacted_recording_keeps_no_preview_reasoning_diff_or_amendment(tmp_path):
    frames = [
        {"method": "thread/started", "params": {"thread": {"id": "t1", "preview": "SECRET first prompt"}}},
        {"id": 0, "method": "item/commandExecution/requestApproval", "params": {"command": "curl SECRET", "reason": "SECRET why", "proposedExecpolicyAmendment": ["curl SECRET"]}},
        {"method": "item/completed", "params": {"item": {"type": "reasoning", "id": "r", "summary": ["SECRET summary"], "content": []}}},
        {"method": "item/completed", "params": {"item": {"type": "fileChange", "id": "f", "changes": [{"path": "a.txt", "kind": "add", "diff": "SECRET body"}]}}},
    ]
    path = tmp_path / "rec.jsonl"
    rec = Recorder(path, redact=True)
    for f in frames:
        rec.record("codex>client", json.dumps(f).encode())
    rec.close()
    data = path.read_text()
    assert "SECRET" not in data
    assert '"path":"a.txt"' in data and '"id":"t1"' in data, "the shape stays"


def test_a_page_the_sidecar_answers_is_answered_once(tmp_path):
    p = subprocess.run(
        [*SIDECAR, "--engine", "transcript-budget", "proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")],
        input=b'{"id":5,"method":"thread/turns/list","params":{"threadId":"00000000-0000-0000-0000-000000000001","cursor":"codex-sidecar:turns:desc:0"}}\n'
        b'{"id":6,"method":"sidecar/status"}\n',
        capture_output=True,
        timeout=30,
        env=_env(tmp_path),
    )
    good, _ = _lines(p.stdout)
    assert [m.get("id") for m in good].count(5) == 1, good
    status = next(m for m in good if m.get("id") == 6)["result"]
    assert status["pendingRequests"] == 0, status


def test_engines_lists_a_distribution_without_a_version(tmp_path):
    site = _engine_site(tmp_path, version=None, noisy=False)
    p = subprocess.run([*SIDECAR, "engines"], capture_output=True, timeout=30, env=_env(tmp_path, PYTHONPATH=str(site)))
    assert p.returncode == 0, p.stderr.decode()[-300:]
    assert b"noisy" in p.stdout


def test_an_empty_allowlist_variable_trusts_only_the_built_ins(tmp_path):
    site = _engine_site(tmp_path, noisy=False)
    env = _env(tmp_path, PYTHONPATH=str(site))
    trusted = subprocess.run([*SIDECAR, "engines"], capture_output=True, timeout=30, env=env)
    empty = subprocess.run([*SIDECAR, "engines"], capture_output=True, timeout=30, env={**env, "CODEX_SIDECAR_ENGINE_ALLOWLIST": ""})
    flag = subprocess.run([*SIDECAR, "--engine-allowlist", "", "engines"], capture_output=True, timeout=30, env=env)
    noisy = lambda out: next(line for line in out.decode().splitlines() if " noisy " in line)  # noqa: E731
    assert "not in allowlist" not in noisy(trusted.stdout)
    assert "not in allowlist" in noisy(empty.stdout)
    assert noisy(empty.stdout) == noisy(flag.stdout)


def test_engines_shows_a_distribution_that_registers_a_built_in_id_as_ignored(tmp_path):
    site = _engine_site(tmp_path, noisy=False)
    (site / "noisy_engine-0.1.dist-info" / "entry_points.txt").write_text("[openclaw.context_engines]\nlossless = noisy_pkg:Noisy\n")
    p = subprocess.run([*SIDECAR, "engines"], capture_output=True, timeout=30, env=_env(tmp_path, PYTHONPATH=str(site), CODEX_SIDECAR_ENGINE="lossless"))
    assert p.returncode == 0, p.stderr.decode()[-300:]
    rows = [line for line in p.stdout.decode().splitlines() if " lossless " in line]
    impostor = next(line for line in rows if "noisy-engine" in line)
    builtin = next(line for line in rows if "noisy-engine" not in line)
    assert impostor.endswith("(ignored: a built-in id)") and impostor.startswith(" ")
    assert builtin.startswith("*") and "ignored" not in builtin


# ------------------------------------------------------------------------
# Lines longer than --max-line-bytes are streamed through unparsed; they must
# still be matched to their requests, keep ids apart, and never have other
# frames spliced into them.


async def test_frames_wait_behind_an_oversized_line_still_streaming():

    opts = ProxyOptions(eof_grace=2.0, kill_grace=2.0, forward_signals=False, max_line=1024)
    env = {"BIG_ANSWER_SPLIT": "1", "BIG_ANSWER_PAUSE": "0.5"}
    async with proxied(child("big_answers.py"), options=opts, env=env) as c:
        await c.send(b'{"id":1,"method":"thread/read","params":{}}\n')
        await trio.sleep(0.25)  # the first half is out, the line is open
        await c.send(b'{"id":2,"method":"sidecar/status"}\n')
        lines = await c.wait_lines(2)
    frames = [json.loads(line) for line in lines]
    assert [f["id"] for f in frames] == [1, 2], "the status reply follows the big line, whole"
    assert len(frames[0]["result"]["blob"]) == 3000


async def test_an_oversized_response_answers_its_request_once_with_the_client_s_id():

    opts = ProxyOptions(eof_grace=2.0, kill_grace=2.0, forward_signals=False, max_line=1024)
    async with proxied(child("big_answers.py"), options=opts) as c:
        await c.send(b'{"id":1,"method":"thread/read","params":{}}\n{"id":"codex-sidecar:7","method":"thread/read","params":{}}\n')
        await c.wait_lines(2)
        status = json.loads((await _status(c))["line"])["result"]
        await c.close()
        await c.wait_exit()
    ids = [json.loads(line)["id"] for line in c.lines if b'"blob"' in line]
    assert ids == [1, "codex-sidecar:7"]
    assert status["pendingRequests"] == 0
    assert not [line for line in c.lines if b"-32001" in line], "no second answer when the child exits"


async def test_an_oversized_request_with_a_reserved_id_gets_its_answer():

    opts = ProxyOptions(eof_grace=2.0, kill_grace=2.0, forward_signals=False, max_line=1024)
    requests = [
        {"id": "codex-sidecar:9", "method": "turn/start", "params": {"pad": "y" * 3000}},
        # the member order a JavaScript client may well use
        {"jsonrpc": "2.0", "method": "turn/start", "id": "codex-sidecar:10", "params": {"pad": "y" * 3000}},
    ]
    async with proxied(child("echo_rpc.py"), options=opts, env={"ECHO_RPC_QUIET": "1"}) as c:
        for request in requests:
            await c.send(json.dumps(request).encode() + b"\n")
        lines = await c.wait_lines(2)
        assert len(c.proxy.router.pending) == 0
    assert [json.loads(line)["id"] for line in lines] == ["codex-sidecar:9", "codex-sidecar:10"]


async def test_an_oversized_answer_to_the_sidecar_s_own_request_fails_it_and_stays_away():

    opts = ProxyOptions(eof_grace=2.0, kill_grace=2.0, forward_signals=False, max_line=1024)
    async with proxied(child("big_answers.py"), options=opts) as c:
        with pytest.raises(RpcError, match="max line"):
            await c.proxy.request("thread/read", {}, timeout=5)
        await c.send(b'{"id":3,"method":"thread/read","params":{}}\n')
        lines = await c.wait_lines(1)
    assert [json.loads(line)["id"] for line in lines] == [3], "the sidecar's answer never reached the client"


async def _status(c) -> dict:
    n = len(c.lines)
    await c.send(b'{"id":"status","method":"sidecar/status"}\n')
    lines = await c.wait_lines(n + 1)
    return {"line": lines[n]}


async def test_a_malformed_error_code_fails_the_sidecar_s_request_not_the_sidecar():

    code = (
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    print(json.dumps({'id': m['id'], 'error': {'code': 'oops', 'message': 'bad'}}), flush=True)\n"
    )
    async with proxied([sys.executable, "-c", code]) as c:
        with pytest.raises(RpcError) as info:
            await c.proxy.request("thread/list", {}, timeout=5)
        assert info.value.code == -32603 and info.value.message == "bad"
        await c.send(b'{"id":1,"method":"thread/list","params":{}}\n')
        lines = await c.wait_lines(1)
    assert json.loads(lines[0])["error"]["code"] == "oops", "the client's own answer passes as it is"


# A server request too long to parse (codex writes {"id", "method", ...})
# is not an answer: it must not take the place of the client's request with
# the same id.
_BIG_SERVER_REQUEST_CHILD = r"""
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("method") == "thread/read":
        big = {"id": m["id"], "method": "item/tool/call", "params": {"arguments": "z" * 3000}}
        os.write(1, json.dumps(big, separators=(",", ":")).encode() + b"\n")
        if os.environ.get("DIE_AFTER"):
            os._exit(3)
"""


async def test_an_oversized_server_request_leaves_the_client_s_request_pending():

    opts = ProxyOptions(eof_grace=2.0, kill_grace=2.0, forward_signals=False, max_line=1024)
    async with proxied([sys.executable, "-c", _BIG_SERVER_REQUEST_CHILD], options=opts) as c:
        await c.send(b'{"id":0,"method":"thread/read","params":{}}\n')
        lines = await c.wait_lines(1)
        assert json.loads(lines[0])["method"] == "item/tool/call"
        assert len(c.proxy.router.pending) == 1, "the client's request 0 is still waiting for its answer"
    async with proxied([sys.executable, "-c", _BIG_SERVER_REQUEST_CHILD], options=opts, env={"DIE_AFTER": "1"}) as c:
        await c.send(b'{"id":0,"method":"thread/read","params":{}}\n')
        await c.wait_exit()
    answers = [f for f in map(json.loads, c.lines) if "method" not in f]
    assert [a["error"]["code"] for a in answers if a.get("id") == 0] == [-32603], "codex had it: outcome unknown"
