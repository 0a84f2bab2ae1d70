"""The command line as OpenClaw runs it: drop-in argv, settings, signals, stdout hygiene."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sidecar.cli import split_drop_in
from sidecar.config import ConfigError, resolve_codex_bin
from sidecar.record import read_recording
from tests.support.harness import CHILDREN

SIDECAR = [sys.executable, "-m", "sidecar"]


def run_sidecar(args, stdin: bytes, env=None, timeout=20):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    full_env.update(env or {})
    return subprocess.run(SIDECAR + args, input=stdin, capture_output=True, env=full_env, timeout=timeout)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["app-server", "--listen", "stdio://"], ["_codex", "--", "app-server", "--listen", "stdio://"]),
        (["-c", "a=1", "-c", "b=2", "app-server"], ["_codex", "--", "-c", "a=1", "-c", "b=2", "app-server"]),
        (["--config=a=1", "app-server"], ["_codex", "--", "--config=a=1", "app-server"]),
        (
            ["--log-format", "json", "--record-redact", "-c", "x=1", "app-server"],
            ["--log-format", "json", "--record-redact", "_codex", "--", "-c", "x=1", "app-server"],
        ),
        (["--codex-bin=/x/codex", "app-server"], ["--codex-bin=/x/codex", "_codex", "--", "app-server"]),
        (["proxy", "--", "cat"], ["proxy", "--", "cat"]),
        (["--log-level", "debug", "proxy", "--", "cat"], ["--log-level", "debug", "proxy", "--", "cat"]),
        (["--help"], ["--help"]),
        ([], []),
    ],
)
def test_drop_in_argv_is_recognised_and_kept_intact(argv, expected):
    assert split_drop_in(argv) == expected


def test_drop_in_spawns_codex_with_exactly_its_arguments(tmp_path):
    log = tmp_path / "argv.json"
    args = ["-c", 'model="gpt x"', "-c", "features.y=true", "app-server", "--listen", "stdio://", "--weird=1", "--"]
    out = run_sidecar(
        args,
        b'{"id":1,"method":"initialize","params":{}}\n',
        env={"CODEX_SIDECAR_CODEX_BIN": str(CHILDREN / "argv_echo.py"), "ARGV_ECHO_LOG": str(log), "ECHO_RPC_QUIET": "1"},
    )
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(log.read_text()) == args
    assert json.loads(out.stdout.splitlines()[0])["result"]["userAgent"].startswith("echo_rpc/")


def test_flags_beat_environment_beat_config_file(tmp_path):
    cfg = tmp_path / "c.toml"
    rec_cfg, rec_env, rec_flag = tmp_path / "cfg.jsonl", tmp_path / "env.jsonl", tmp_path / "flag.jsonl"
    cfg.write_text(f'record = "{rec_cfg}"\nlog_format = "json"\n[engines.demo]\nx = 1\n')
    stdin = b'{"method":"n"}\n'
    child = ["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")]
    base = {"CODEX_SIDECAR_CONFIG": str(cfg)}
    run_sidecar(child, stdin, env=base)
    run_sidecar(child, stdin, env={**base, "CODEX_SIDECAR_RECORD": str(rec_env)})
    out = run_sidecar(["--record", str(rec_flag), *child], stdin, env={**base, "CODEX_SIDECAR_RECORD": str(rec_env)})
    assert [len(list(read_recording(p))) for p in (rec_cfg, rec_env, rec_flag)] == [2, 2, 2]
    # log_format from the file applied: every stderr line is a JSON object.
    lines = out.stderr.decode().splitlines()
    assert lines and all(json.loads(l)["logger"].startswith("codex_sidecar") for l in lines)


def test_bad_config_is_a_clear_error(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('recrod = "typo"\n')
    out = run_sidecar(["proxy", "--", "cat"], b"", env={"CODEX_SIDECAR_CONFIG": str(cfg)})
    assert out.returncode != 0 and b"unknown key 'recrod'" in out.stderr and b"did you mean 'record'?" in out.stderr
    out = run_sidecar(["proxy", "--", "cat"], b"", env={"CODEX_SIDECAR_CONFIG": str(tmp_path / "missing.toml")})
    assert out.returncode != 0 and b"config file not found" in out.stderr


def test_codex_on_path_is_never_the_sidecar_itself(tmp_path, monkeypatch):
    fake_self = tmp_path / "a" / "codex"
    fake_self.parent.mkdir()
    fake_self.write_text("#!/usr/bin/python3\nfrom sidecar.cli import main\nmain()\n")
    real = tmp_path / "b" / "codex"
    real.parent.mkdir()
    real.write_text("#!/bin/sh\nexit 0\n")
    for p in (fake_self, real):
        p.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_self.parent}{os.pathsep}{real.parent}")
    assert resolve_codex_bin(None) == str(real)
    with pytest.raises(ConfigError):
        resolve_codex_bin(str(fake_self))
    monkeypatch.setenv("PATH", str(fake_self.parent))
    with pytest.raises(ConfigError, match="cannot find the real codex"):
        resolve_codex_bin(None)


def test_a_sidecar_started_by_a_sidecar_refuses_to_loop():
    out = run_sidecar(["app-server"], b"", env={"CODEX_SIDECAR_ACTIVE": "12345"})
    assert out.returncode != 0 and b"started by another codex-sidecar" in out.stderr


def test_missing_child_exits_127_with_a_message():
    out = run_sidecar(["proxy", "--", "/nonexistent/codex"], b"")
    assert out.returncode == 127 and b"not found" in out.stderr


def test_stdout_carries_frames_only_and_json_logs_carry_no_prompt_text(tmp_path):
    secret = "PLANTED-PROMPT-MARKER"
    stdin = (
        json.dumps({"id": 1, "method": "turn/start", "params": {"input": [{"type": "text", "text": secret}]}}).encode()
        + b"\nnot json "
        + secret.encode()
        + b"\n"
    )
    out = run_sidecar(
        ["--log-format", "json", "--log-level", "debug", "--max-line-bytes", "1024", "proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")],
        stdin + b'{"method":"big","params":{"p":"' + secret.encode() * 200 + b'"}}\n',
    )
    assert out.returncode == 0
    for line in out.stdout.splitlines():
        if not line.startswith(b"not json"):
            json.loads(line)
    logs = out.stderr.decode().splitlines()
    assert logs and all(isinstance(json.loads(l), dict) for l in logs)
    assert secret not in out.stderr.decode()


def test_sigterm_is_forwarded_and_the_childs_status_returned(tmp_path):
    mark = tmp_path / "mark"
    proc = subprocess.Popen(
        SIDECAR + ["proxy", "--", sys.executable, str(CHILDREN / "stubborn.py"), str(mark), "", "7"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.readline() == b'{"method":"child/ready","params":{}}\n'
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 7
    assert mark.read_text() == f"signal {signal.SIGTERM}\n"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_sigint_and_sighup_are_forwarded_too(tmp_path, sig):
    mark = tmp_path / "mark"
    proc = subprocess.Popen(
        SIDECAR + ["proxy", "--", sys.executable, str(CHILDREN / "stubborn.py"), str(mark)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    proc.send_signal(sig)
    assert proc.wait(timeout=10) == 128 + sig
    assert mark.read_text() == f"signal {sig}\n"


def test_sigkill_of_the_sidecar_takes_the_child_down_and_leaves_a_readable_recording(tmp_path):
    mark = tmp_path / "mark"
    rec = tmp_path / "rec.jsonl"
    proc = subprocess.Popen(
        SIDECAR + ["--record", str(rec), "proxy", "--", sys.executable, str(CHILDREN / "stubborn.py"), str(mark)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.readline()
    for i in range(200):
        proc.stdin.write(b'{"method":"flood","params":{"i":%d}}\n' % i)
    proc.stdin.flush()
    # Kill mid-stream, once frames are demonstrably being recorded.
    deadline = time.monotonic() + 10
    while (not rec.exists() or rec.read_bytes().count(b"\n") < 20) and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    # The child creates the file, then writes its line: wait for the line.
    while not (mark.exists() and mark.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.read_text() == f"signal {signal.SIGTERM}\n", "the orphaned child was told to stop"
    entries = list(read_recording(rec))
    assert entries and entries[0].dir == "codex>client"
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))


def test_inspect_table_shows_the_hold_and_each_rebuild_s_revert():
    from sidecar.cli import _ms, _rebuild_cell

    assert _ms(3.456) == "3.5" and _ms(None) == "-"
    assert _rebuild_cell({"rebuilt": False, "revertMs": None}) == "-"
    assert _rebuild_cell({"rebuilt": True, "revertMs": 52.4}) == "revert 52 ms"
    assert _rebuild_cell({"rebuilt": True, "revertMs": None}) == "yes"  # nothing to revert: framing only


def test_start_up_objects_are_frozen_out_of_full_collections():
    """What start-up built is moved to the permanent generation, so a full
    collection in the middle of a turn does not walk a tokenizer's tables."""
    import gc

    from sidecar.cli import freeze_startup_heap

    before = gc.get_freeze_count()
    tables = [[i] for i in range(10_000)]  # tracked objects, like a loaded engine's
    try:
        frozen = freeze_startup_heap()
        assert frozen >= before + len(tables)
        # (a thread of pytest-xdist's may free a frozen object meanwhile, never add one)
        assert frozen - 64 <= gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()  # this is pytest's process: give the collector everything back


SLOW_ENGINE = """
import pathlib, time
from engines import AssembleResult, BaseContextEngine, CompactResult, EngineInfo, IngestResult

class Engine(BaseContextEngine):
    def __init__(self, config):
        super().__init__(config)
        self.info = EngineInfo(id="slow-start", name="Slow start", version="1.0")

    async def ingest(self, params):
        return IngestResult(ingested=False)

    async def assemble(self, params):
        return AssembleResult(messages=params.messages, estimated_tokens=0)

    async def compact(self, params):
        return CompactResult(ok=True, compacted=False)

def make(config):
    pathlib.Path(config["loading"]).write_text("loading")
    time.sleep(float(config["seconds"]))
    return Engine(config)
"""


def test_codex_starts_before_the_engine_loads_and_gets_a_signal_sent_meanwhile(tmp_path):
    """The sidecar starts codex first and loads its engine once a client
    line waits for it (here a request that is not ``initialize``); a SIGTERM
    in that window goes to codex, and the sidecar still ends with codex's
    status instead of dying of the signal itself."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "slow_start_engine.py").write_text(SLOW_ENGINE)
    dist = site / "slow_start-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: slow-start\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[openclaw.context_engines]\nslow-start = slow_start_engine:make\n")
    loading, mark, ready = tmp_path / "loading", tmp_path / "mark", tmp_path / "ready"
    config = tmp_path / "sidecar.toml"
    config.write_text(f'[engines."slow-start"]\nloading = {json.dumps(str(loading))}\nseconds = 5\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    env.update(
        {
            "PYTHONPATH": os.pathsep.join([str(site), env.get("PYTHONPATH", "")]),
            "CODEX_SIDECAR_ENGINE": "slow-start",
            "CODEX_SIDECAR_CONFIG": str(config),
            "CODEX_SIDECAR_STATE_DIR": str(tmp_path / "state"),
            "STUBBORN_READY": str(ready),
        }
    )
    proc = subprocess.Popen(
        SIDECAR + ["proxy", "--", sys.executable, str(CHILDREN / "stubborn.py"), str(mark), "", "7"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b'{"id":1,"method":"thread/list","params":{}}\n')  # held until the engine is in
        proc.stdin.flush()
        deadline = time.monotonic() + 20
        while not loading.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert loading.exists(), proc.stderr.read1(4096) if proc.poll() is not None else "engine never loaded"
        while not ready.exists() and time.monotonic() < deadline:  # the child's handlers are in (it started before the engine's import)
            time.sleep(0.02)
        assert ready.exists(), "the child never got ready"
        proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert mark.read_text() == f"signal {signal.SIGTERM}\n"  # forwarded while the engine was still loading
        assert proc.wait(timeout=20) == 7  # codex's status: the sidecar did not die of the signal (that is -15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
