"""The entry point starts the child before the sidecar's imports, and the CLI
either adopts that child or ends it: the user sees what they always saw."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sidecar import early as early_child
from sidecar import launch
from sidecar.config import SETTINGS, resolve_codex_bin
from tests.support.harness import CHILDREN

HEAVY = ("click", "trio", "msgspec", "sidecar.cli", "sidecar.config", "sidecar.relay", "engines")

# Runs the entry point in a fresh interpreter and writes, at exit, the order in
# which the child was started and the heavy modules imported.
TRACED = """
import json, os, sys
events = []
HEAVY = set(json.loads(os.environ["TRACE_HEAVY"]))
def hook(event, args):
    if event == "subprocess.Popen":
        events.append(["spawn", list(map(str, args[1]))])
    elif event == "import" and args[0] in HEAVY and ["import", args[0]] not in events:
        events.append(["import", args[0]])
sys.addaudithook(hook)
import atexit
atexit.register(lambda: open(os.environ["TRACE_FILE"], "w").write(json.dumps(events)))
from sidecar.{module} import main
sys.exit(main())
"""


def traced(
    tmp_path: Path, args: list[str], env: dict[str, str], *, stdin: bytes = b"", module: str = "launch", heavy: tuple[str, ...] = HEAVY
) -> tuple[subprocess.CompletedProcess[bytes], list[list]]:
    trace = tmp_path / f"trace-{module}.json"
    full = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    full.update(env)
    full.update(TRACE_FILE=str(trace), TRACE_HEAVY=json.dumps(heavy), XDG_CONFIG_HOME=str(tmp_path / "no-config"))
    out = subprocess.run([sys.executable, "-c", TRACED.format(module=module), *args], input=stdin, capture_output=True, env=full, timeout=60)
    return out, json.loads(trace.read_text())


def running_with(marker: str) -> list[int]:
    """Pids of the processes whose command line holds ``marker``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def test_launch_knows_every_setting_flag():
    """The early parser reads the sidecar's own options without importing
    the settings (click): its tables are the settings'."""
    assert launch.VALUE_SETTINGS == {s.name for s in SETTINGS if s.type is not bool}
    assert launch.BOOL_SETTINGS == {s.name for s in SETTINGS if s.type is bool}


def test_the_entry_point_imports_only_cheap_standard_modules():
    code = "import sys; before = set(sys.modules); import sidecar.launch; print(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    new = set(json.loads(out.stdout.replace("'", '"')))
    assert new - {"sidecar", "sidecar.child", "sidecar.early", "sidecar.launch"} <= CHEAP, sorted(new - CHEAP)


CHEAP = {
    "_locale", "_posixsubprocess", "_weakrefset", "collections.abc", "fcntl", "locale", "math", "select",
    "selectors", "signal", "subprocess", "threading", "errno", "contextlib", "gc",
}  # fmt: skip
"""What ``subprocess`` brings (no ``typing``, ``dataclasses``, ``inspect``, click, trio, ...)."""


@pytest.mark.parametrize(
    "args, expected",
    [
        (["proxy", "--", "cat", "-n"], ["cat", "-n"]),
        (["proxy", "cat", "x"], ["cat", "x"]),
        (["--log-level", "debug", "--record-redact", "--engine=lossless", "proxy", "--", "cat"], ["cat"]),
        (["proxy", "cat", "--help"], None),  # click decides what `proxy --help` means
        (["proxy"], None),
        (["--help"], None),
        (["--version", "proxy", "--", "cat"], None),
        (["--bogus", "proxy", "--", "cat"], None),
        (["--log-level"], None),
        (["doctor"], None),
        (["engines"], None),
        (["version"], None),
        ([], None),
        (["app-server", "--help"], None),
        (["app-server", "generate-json-schema", "--out", "x"], None),
        (["exec", "hi"], None),
    ],
)
def test_the_early_child_is_the_proxy_command_or_nothing(args, expected, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert launch.predict_child(args, os.environ) == expected


def _fake_codex(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "codex"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    return exe


@pytest.mark.parametrize("source", ["path", "flag", "env", "file", "relative-env"])
def test_the_early_drop_in_child_is_the_codex_the_cli_resolves(source, tmp_path, monkeypatch):
    on_path = _fake_codex(tmp_path / "bin")
    configured = _fake_codex(tmp_path / "elsewhere")
    monkeypatch.setenv("PATH", f"{on_path.parent}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("CODEX_SIDECAR_CODEX_BIN", raising=False)
    monkeypatch.delenv("CODEX_SIDECAR_CONFIG", raising=False)
    monkeypatch.delenv(early_child.ACTIVE_ENV, raising=False)
    codex_args = ["-c", "model=x", "app-server", "--listen", "stdio://"]
    lead: list[str] = []
    value = str(configured)
    if source == "flag":
        lead = ["--codex-bin", value]
    elif source == "env":
        monkeypatch.setenv("CODEX_SIDECAR_CODEX_BIN", value)
    elif source == "relative-env":
        monkeypatch.chdir(configured.parent)
        value = "codex"  # resolved on PATH, as the CLI does
        monkeypatch.setenv("CODEX_SIDECAR_CODEX_BIN", value)
    elif source == "file":
        cfg = tmp_path / "cfg" / "codex-sidecar" / "config.toml"
        cfg.parent.mkdir(parents=True)
        cfg.write_text(f"codex_bin = {json.dumps(value)}\nengine = \"legacy\"\n")
    want = resolve_codex_bin(None if source == "path" else value)
    assert launch.predict_child([*lead, *codex_args], os.environ) == [want, *codex_args]


def test_no_early_drop_in_child_when_the_cli_would_refuse(tmp_path, monkeypatch):
    _fake_codex(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("CODEX_SIDECAR_CODEX_BIN", raising=False)
    monkeypatch.delenv("CODEX_SIDECAR_CONFIG", raising=False)
    args = ["app-server"]
    monkeypatch.setenv(early_child.ACTIVE_ENV, "123")  # `codex` on PATH may lead back to a sidecar
    assert launch.predict_child(args, os.environ) is None
    monkeypatch.delenv(early_child.ACTIVE_ENV)
    monkeypatch.setenv("CODEX_SIDECAR_CODEX_BIN", str(tmp_path / "missing"))
    assert launch.predict_child(args, os.environ) is None
    monkeypatch.delenv("CODEX_SIDECAR_CODEX_BIN")
    cfg = tmp_path / "c.toml"
    cfg.write_text('recrod = "typo"\n')  # the CLI stops on an unknown key
    monkeypatch.setenv("CODEX_SIDECAR_CONFIG", str(cfg))
    assert launch.predict_child(args, os.environ) is None
    cfg.write_text("not toml = = =\n")
    assert launch.predict_child(args, os.environ) is None
    monkeypatch.setenv("CODEX_SIDECAR_CONFIG", str(tmp_path / "missing.toml"))
    assert launch.predict_child(args, os.environ) is None


def test_the_child_starts_before_the_sidecar_imports_its_heavy_modules(tmp_path):
    """The point of the entry point: codex runs while the settings, trio and
    the relay are imported, and click not at all. The same session through
    the CLI's own entry starts it after them."""
    argv = [sys.executable, str(CHILDREN / "echo_rpc.py")]
    stdin = b'{"id":1,"method":"initialize","params":{}}\n'
    env = {"ECHO_RPC_QUIET": "1"}
    out, events = traced(tmp_path, ["proxy", "--", *argv], env, stdin=stdin)
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout.splitlines()[0])["id"] == 1
    spawns = [e for e in events if e[0] == "spawn" and e[1] == argv]
    assert len(spawns) == 1, events  # started once: the CLI adopted it
    first_import = next(i for i, e in enumerate(events) if e[0] == "import")
    assert events.index(spawns[0]) < first_import, events
    imported = {e[1] for e in events[first_import:] if e[0] == "import"}
    assert imported >= {"trio", "msgspec", "sidecar.relay"}
    assert not imported & {"click", "sidecar.cli"}  # every setting good: the session runs without click
    # Through sidecar.cli:main (no early start) the order is the other way round.
    _out, events = traced(tmp_path, ["proxy", "--", *argv], env, stdin=stdin, module="cli")
    spawn_at = next(i for i, e in enumerate(events) if e[0] == "spawn" and e[1] == argv)
    assert spawn_at > events.index(["import", "trio"]) or spawn_at > events.index(["import", "click"])


def test_with_settings_given_the_child_still_starts_before_trio_and_the_relay(tmp_path):
    """Given settings are resolved before the spawn (they could fail), and
    nothing else: the spawn still comes before trio, the relay and click."""
    argv = [sys.executable, str(CHILDREN / "echo_rpc.py")]
    env = {"ECHO_RPC_QUIET": "1", "CODEX_SIDECAR_ENGINE": "legacy", "CODEX_SIDECAR_TOKEN_BUDGET": "1000"}
    out, events = traced(tmp_path, ["proxy", "--", *argv], env, stdin=b'{"id":1,"method":"initialize","params":{}}\n')
    assert out.returncode == 0, out.stderr.decode()
    spawn_at = events.index(["spawn", argv])
    imported_before = {e[1] for e in events[:spawn_at] if e[0] == "import"}
    assert not imported_before & {"trio", "sidecar.relay", "click", "sidecar.cli"}, imported_before


@pytest.mark.parametrize("engine", ["legacy", "lossless"])
def test_a_session_starts_without_what_it_does_not_use(tmp_path, engine):
    """The session's whole start (relay, lifecycle, engine) spawns nothing but
    the child (trio's import runs ``ldconfig -p`` unless sidecar.trio_import
    imports it) and imports no importlib.metadata (a built-in engine is found
    without entry points), and no recorder or secret scanner when nothing is
    recorded."""
    argv = [sys.executable, str(CHILDREN / "echo_rpc.py")]
    # The second request waits for the lifecycle and the engine (held lines go on once they are in).
    stdin = b'{"id":1,"method":"initialize","params":{}}\n{"id":2,"method":"thread/list","params":{}}\n'
    env = {"ECHO_RPC_QUIET": "1", "CODEX_SIDECAR_ENGINE": engine, "CODEX_SIDECAR_STATE_DIR": str(tmp_path / "state")}
    watched = ("sidecar.lifecycle", "engines.lossless.engine", "importlib.metadata", "sidecar.record", "engines.scrub")
    out, events = traced(tmp_path, ["proxy", "--", *argv], env, stdin=stdin, heavy=watched)
    assert out.returncode == 0, out.stderr.decode()
    assert [json.loads(line)["id"] for line in out.stdout.splitlines()] == [1, 2]
    assert [e[1] for e in events if e[0] == "spawn"] == [argv]
    imported = {e[1] for e in events if e[0] == "import"}
    assert "sidecar.lifecycle" in imported  # the whole start ran
    assert ("engines.lossless.engine" in imported) == (engine == "lossless")
    assert not imported & {"importlib.metadata", "sidecar.record", "engines.scrub"}, imported


@pytest.mark.parametrize(
    "env",
    [
        {"CODEX_SIDECAR_MAX_LINE_BYTES": "12"},  # below the minimum: the CLI rejects it
        {"CODEX_SIDECAR_LOG_LEVEL": "loud"},
    ],
)
def test_a_setting_the_cli_rejects_starts_no_child_and_its_error_is_the_last_line(tmp_path, env):
    """Settings that could fail are resolved before codex is spawned: a bad
    one is reported with no codex started (whose own start-up lines buried
    the error), as the CLI alone reports it."""
    # A child that ignores stdin EOF and SIGTERM (so also the death signal the
    # sidecar's exit sends): only the sidecar ending it for sure ends it.
    marker = str(tmp_path / f"early-child-{time.monotonic_ns()}")
    argv = [sys.executable, str(CHILDREN / "stubborn.py"), marker, "ignore-term"]
    out, events = traced(tmp_path, ["proxy", "--", *argv], env)
    assert not any(e[0] == "spawn" for e in events), "a child was started for settings that fail"
    assert out.stderr.decode().strip().splitlines()[-1].startswith("Error: invalid value")
    plain, plain_events = traced(tmp_path, ["proxy", "--", *argv], env, module="cli")
    assert not any(e[0] == "spawn" for e in plain_events)
    assert out.returncode == plain.returncode != 0
    assert out.stderr == plain.stderr and b"invalid value" in out.stderr
    assert out.stdout == b""
    assert running_with(marker) == []


def test_an_early_child_the_cli_does_not_take_is_ended_and_its_own_started(tmp_path):
    """If the CLI resolves another command than the early guess (never on
    purpose, but the guess is only a guess), the early child ends first."""
    marker = f"early-guess-{os.getpid()}-{time.monotonic_ns()}"
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    early = launch.start_early(["proxy", "--", sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        assert early is not None and early.popen.poll() is None
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]  # forwarded meanwhile
        assert early_child.adopt([sys.executable, "-c", "pass"], early_child.child_env()) is None
        assert early.popen.poll() is not None and running_with(marker) == []
        assert {s: signal.getsignal(s) for s in before} == before
    finally:
        early_child.discard()
        if early is not None and early.popen.poll() is None:
            early.popen.kill()
            early.popen.wait()


def test_an_early_child_with_another_environment_is_not_adopted():
    early = launch.start_early(["proxy", "--", sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert early is not None
        env = early_child.child_env()
        env["SOMETHING_SET_LATER"] = "1"
        assert early_child.adopt(early.argv, env) is None
        assert early.popen.poll() is not None
    finally:
        early_child.discard()


def test_a_discarded_child_that_exits_at_stdin_eof_gets_no_signal(tmp_path):
    """Codex at stdin EOF finishes starting and exits: not cut short (it may
    be snapshotting a login shell), as when the relay's client leaves."""
    mark = tmp_path / "mark"
    script = (
        "import signal, sys, time\n"
        f"mark = {str(mark)!r}\n"
        "signal.signal(signal.SIGTERM, lambda *a: (open(mark, 'a').write('term\\n'), sys.exit(9)))\n"
        "open(mark, 'a').write('ready\\n')\n"
        "sys.stdin.buffer.read()\n"
        "time.sleep(0.3)\n"
        "open(mark, 'a').write('eof\\n')\n"
    )
    early = launch.start_early(["proxy", "--", sys.executable, "-c", script])
    try:
        assert early is not None
        deadline = time.monotonic() + 10
        while not (mark.exists() and "ready" in mark.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        early_child.discard()
        assert early.popen.returncode == 0
        assert mark.read_text() == "ready\neof\n"
    finally:
        early_child.discard()
        if early is not None and early.popen.poll() is None:
            early.popen.kill()
            early.popen.wait()


def test_a_session_with_options_runs_without_click_and_with_them(tmp_path):
    """Options before the command reach the session as the CLI passes them."""
    rec = tmp_path / "rec.jsonl"
    argv = [sys.executable, str(CHILDREN / "echo_rpc.py")]
    out, events = traced(
        tmp_path,
        ["--record", str(rec), "--record-redact", "--log-format=json", "proxy", "--", *argv],
        {"ECHO_RPC_QUIET": "1"},
        stdin=b'{"id":1,"method":"initialize","params":{}}\n',
    )
    assert out.returncode == 0, out.stderr.decode()
    assert ["import", "click"] not in events
    assert rec.exists() and b'"initialize"' in rec.read_bytes()
    assert all(json.loads(line)["logger"].startswith("codex_sidecar") for line in out.stderr.decode().splitlines())


def test_a_recording_that_cannot_be_opened_is_reported_as_the_cli_reports_it(tmp_path):
    argv = [sys.executable, str(CHILDREN / "echo_rpc.py")]
    args = ["--record", str(tmp_path / "missing-dir" / "rec.jsonl"), "proxy", "--", *argv]
    fast, _ = traced(tmp_path, args, {})
    plain, _ = traced(tmp_path, args, {}, module="cli")
    assert fast.returncode == plain.returncode == 1
    assert fast.stderr == plain.stderr and b"Error: cannot open recording" in fast.stderr


def test_a_config_file_the_cli_rejects_starts_no_child_and_gives_the_same_error(tmp_path):
    """A config file could fail, so it is read before ``proxy``'s child is
    started: a bad file is the CLI's error, and no child was ever started."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('recrod = "typo"\n')
    marker = str(tmp_path / f"early-config-{time.monotonic_ns()}")
    argv = [sys.executable, str(CHILDREN / "stubborn.py"), marker]
    env = {"CODEX_SIDECAR_CONFIG": str(cfg)}
    out, events = traced(tmp_path, ["proxy", "--", *argv], env)
    assert not any(e[0] == "spawn" for e in events)
    plain, _ = traced(tmp_path, ["proxy", "--", *argv], env, module="cli")
    assert out.returncode == plain.returncode != 0
    assert out.stderr == plain.stderr and b"unknown key 'recrod'" in out.stderr
    assert running_with(marker) == []
