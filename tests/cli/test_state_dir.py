"""Fail open on state: whatever the state dir, the client gets its app-server.

Each case runs the real command line in front of a test double of the
app-server, sends ``initialize`` and checks the answer came back, that the
sidecar logged exactly one error naming the failing path and the fix, and
that ``doctor`` reports the same case. The suite runs as root, for whom
permission bits never fail, so unreadable, unwritable and full folders are
injected (``tests/support/faults``) into the sidecar's process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar.store.usable import state_dir_problem
from tests.support.harness import CHILDREN

FAULTS = Path(__file__).resolve().parents[1] / "support" / "faults"
ROOT = Path(__file__).resolve().parents[2]
INIT = b'{"id":1,"method":"initialize","params":{}}\n'


def run(args: list[str], state_dir: Path, faults: list[dict] | None = None, engine: str = "lossless", stdin: bytes = INIT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    env.update(
        CODEX_SIDECAR_STATE_DIR=str(state_dir),
        CODEX_SIDECAR_ENGINE=engine,
        CODEX_SIDECAR_LOG_FORMAT="json",
        ECHO_RPC_QUIET="1",
    )
    env["XDG_CONFIG_HOME"] = str(state_dir.parent / "no-config")
    if faults:
        env["PYTHONPATH"] = os.pathsep.join([str(FAULTS), str(ROOT)])
        env["CODEX_SIDECAR_TEST_FAULTS"] = json.dumps(faults)
    return subprocess.run([sys.executable, "-m", "sidecar", *args], input=stdin, capture_output=True, env=env, timeout=60)


def relay(state_dir: Path, faults: list[dict] | None = None, engine: str = "lossless"):
    out = run(["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")], state_dir, faults, engine)
    assert out.returncode == 0, out.stderr.decode()
    answer = json.loads(out.stdout.splitlines()[0])
    assert answer["id"] == 1 and answer["result"]["userAgent"].startswith("echo_rpc/")
    logs = [json.loads(line) for line in out.stderr.decode().splitlines()]
    return [entry for entry in logs if entry["level"] == "error"], logs


def doctor_line(state_dir: Path, faults: list[dict] | None = None) -> str:
    out = run(["doctor"], state_dir, faults, engine="legacy", stdin=b"")
    (line,) = [line for line in out.stdout.decode().splitlines() if " state dir " in line]
    return line


def fault(op: str, path: Path, code: str) -> dict:
    return {"op": op, "path": str(path), "errno": code}


def assert_one_error(errors: list[dict], path: Path, code: str, running: str) -> None:
    assert len(errors) == 1, errors
    (e,) = errors
    assert f"state dir unusable: {path} " in e["msg"] and "fix: " in e["msg"], e
    assert "--state-dir" in e["msg"] and "CODEX_SIDECAR_STATE_DIR" in e["msg"]
    assert e["path"] == str(path) and e["code"] == code and e["running"] == running
    assert e["setting"] == "CODEX_SIDECAR_STATE_DIR"


@pytest.mark.parametrize("engine", ["lossless", "legacy"])
def test_a_state_dir_that_is_a_file_leaves_a_pure_relay(tmp_path, engine):
    state = tmp_path / "state"
    state.write_text("not a folder")
    errors, logs = relay(state, engine=engine)
    assert_one_error(errors, state, "state-not-a-folder", "pure relay")
    assert "move that file away" in errors[0]["msg"]
    assert not any(entry["msg"] == "context engine loaded" for entry in logs)
    assert "FAIL" in (line := doctor_line(state)) and f"{state} is a file, not a folder" in line


def test_a_state_dir_under_a_file_names_the_file(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    errors, _ = relay(blocker / "deeper" / "state")
    assert_one_error(errors, blocker, "state-not-a-folder", "pure relay")
    assert "FAIL" in (line := doctor_line(blocker / "deeper" / "state")) and str(blocker) in line


def test_a_missing_state_dir_and_parents_are_created_private(tmp_path):
    state = tmp_path / "a" / "b" / "state"
    errors, logs = relay(state)
    assert errors == []
    assert any(entry["msg"] == "context engine bound to the host" for entry in logs)
    assert all((p.stat().st_mode & 0o777) == 0o700 for p in (tmp_path / "a", tmp_path / "a" / "b", state))


def test_legacy_with_a_missing_state_dir_logs_nothing_and_creates_nothing(tmp_path):
    """Legacy has nothing to read there and writes nothing: invisible."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    for state in (tmp_path / "absent", blocker / "state"):
        errors, logs = relay(state, engine="legacy")
        assert errors == [] and not state.exists()
        assert [e["msg"] for e in logs if e["level"] != "info" or "state" in e["msg"]] == []


def test_a_missing_state_dir_that_cannot_be_created_leaves_a_pure_relay(tmp_path):
    parent = tmp_path / "locked"
    parent.mkdir()
    state = parent / "state"
    errors, _ = relay(state, [fault("create", parent, "EACCES")])
    assert_one_error(errors, state, "state-cannot-create", "pure relay")
    assert f"mkdir -m 700 {state}" in errors[0]["msg"]
    assert "FAIL" in (line := doctor_line(state, [fault("create", parent, "EACCES")])) and str(state) in line


def test_a_backing_folder_that_is_a_file_leaves_a_pure_relay(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "backing").write_text("")
    errors, _ = relay(state, engine="legacy")
    assert_one_error(errors, state / "backing", "state-not-a-folder", "pure relay")
    assert "FAIL" in (line := doctor_line(state)) and str(state / "backing") in line


def test_an_unreadable_backing_folder_leaves_a_pure_relay(tmp_path):
    """The issue's case: ``backing/`` created by root, the sidecar run by a user."""
    state = tmp_path / "state"
    (state / "backing").mkdir(parents=True, mode=0o700)
    faults = [fault("listdir", state / "backing", "EACCES")]
    for engine in ("legacy", "lossless"):
        errors, _ = relay(state, faults, engine=engine)
        assert_one_error(errors, state / "backing", "state-unreadable", "pure relay")
        assert f"chown -R $(id -un) {state / 'backing'}" in errors[0]["msg"]
    assert "FAIL" in (line := doctor_line(state, faults)) and "cannot be read" in line and str(state / "backing") in line


def test_an_unreadable_state_dir_leaves_a_pure_relay(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    faults = [fault("listdir", state, "EACCES")]
    errors, _ = relay(state, faults)
    assert_one_error(errors, state, "state-unreadable", "pure relay")
    assert "FAIL" in doctor_line(state, faults)


NOBODY = 65534
WITHOUT_ROOTS_PASS = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--inh-caps=-dac_override,-dac_read_search,-fowner"]
"""Root without the capabilities that let it into any user's folder: to the
kernel it is then one user among others, so a folder ``nobody`` owns (0700)
is closed to it for real. (Running the sidecar as ``nobody`` instead needs a
checkout and a venv ``nobody`` can read: a clone in a private home folder
is neither.)"""
for_real = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root, to hand a folder to another user")


def nobodys(folder: Path) -> Path:
    folder.mkdir()
    os.chown(folder, NOBODY, NOBODY)
    folder.chmod(0o700)
    return folder


def run_as_another_user(args: list[str], state: Path, top: Path, engine: str = "legacy", stdin: bytes = INIT) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    env.update(CODEX_SIDECAR_STATE_DIR=str(state), CODEX_SIDECAR_ENGINE=engine, CODEX_SIDECAR_LOG_FORMAT="json", ECHO_RPC_QUIET="1", HOME=str(top), XDG_CONFIG_HOME=str(top))
    return subprocess.run([*WITHOUT_ROOTS_PASS, sys.executable, "-m", "sidecar", *args], input=stdin, capture_output=True, env=env, cwd=ROOT, timeout=60)


@for_real
def test_a_backing_folder_another_user_owns_leaves_a_pure_relay_for_real(tmp_path):
    """No injection: the state dir is the user's, ``backing/`` another user's (0700)."""
    tmp_path.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    nobodys(state / "backing")
    out = run_as_another_user(["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")], state, tmp_path)
    assert out.returncode == 0, out.stderr.decode()
    assert json.loads(out.stdout.splitlines()[0])["result"]["userAgent"].startswith("echo_rpc/")
    errors = [e for e in map(json.loads, out.stderr.decode().splitlines()) if e["level"] == "error"]
    assert_one_error(errors, state / "backing", "state-unreadable", "pure relay")
    doctor = run_as_another_user(["doctor"], state, tmp_path, stdin=b"")
    assert f"FAIL state dir    state dir unusable: {state / 'backing'} cannot be read" in doctor.stdout.decode()


@for_real
@pytest.mark.parametrize("engine", ["legacy", "lossless"])
def test_a_state_dir_inside_a_folder_this_user_cannot_enter_answers_initialize_for_real(tmp_path, engine):
    """Another user's 0700 folder above the state dir: ``Path.exists()``
    itself fails (EACCES, not "missing"); the client still gets its
    app-server, as a pure relay, and one error line names the folder."""
    tmp_path.chmod(0o755)
    closed = nobodys(tmp_path / "theirs")
    state = closed / "state"
    out = run_as_another_user(["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")], state, tmp_path, engine)
    assert out.returncode == 0, out.stderr.decode()
    assert b"Traceback" not in out.stderr
    assert json.loads(out.stdout.splitlines()[0])["result"]["userAgent"].startswith("echo_rpc/")
    errors = [e for e in map(json.loads, out.stderr.decode().splitlines()) if e["level"] == "error"]
    assert_one_error(errors, state, "state-unreadable", "pure relay")
    assert f"is inside {closed}, which this user cannot enter (Permission denied)" in errors[0]["msg"]
    doctor = run_as_another_user(["doctor"], state, tmp_path, stdin=b"")
    assert f"FAIL state dir    state dir unusable: {state} is inside {closed}" in doctor.stdout.decode(), doctor.stdout.decode() + doctor.stderr.decode()


def test_an_unwritable_state_dir_keeps_the_history_without_an_engine(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    faults = [fault("create", state, "EACCES")]
    for engine in ("legacy", "lossless"):
        errors, logs = relay(state, faults, engine=engine)
        assert_one_error(errors, state, "state-unwritable", "history only, no engine")
        assert not any(entry["msg"] == "context engine loaded" for entry in logs)
    assert "FAIL" in (line := doctor_line(state, faults)) and "not writable" in line


def test_an_unwritable_subfolder_is_named(tmp_path):
    state = tmp_path / "state"
    (state / "sessions").mkdir(parents=True, mode=0o700)
    errors, _ = relay(state, [fault("create", state / "sessions", "EACCES")])
    assert_one_error(errors, state / "sessions", "state-unwritable", "history only, no engine")


def test_a_read_only_mount_is_named_as_such(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    errors, _ = relay(state, [fault("create", state, "EROFS")])
    assert_one_error(errors, state, "state-unwritable", "history only, no engine")
    assert "is on a read-only file system" in errors[0]["msg"]


def test_a_full_disk_keeps_the_history_without_an_engine(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    faults = [fault("full", state, "ENOSPC")]
    errors, _ = relay(state, faults)
    assert_one_error(errors, state, "state-full", "history only, no engine")
    assert "free space" in errors[0]["msg"]
    assert "FAIL" in (line := doctor_line(state, faults)) and "full disk" in line


def test_status_says_the_state_dir_is_unusable(tmp_path):
    state = tmp_path / "state"
    state.write_text("")
    env_args = ["proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")]
    out = run(env_args, state, stdin=b'{"id":1,"method":"sidecar/status"}\n')
    status = json.loads(out.stdout.splitlines()[0])["result"]
    assert status["stateDir"]["usable"] is False and status["stateDir"]["path"] == str(state)
    assert status["settings"]["state_dir"] == {"value": str(state), "source": "CODEX_SIDECAR_STATE_DIR"}


def test_a_usable_state_dir_has_no_problem_and_the_check_writes_nothing(tmp_path):
    state = tmp_path / "state"
    (state / "backing").mkdir(parents=True)
    before = os.stat(state).st_mtime_ns
    assert state_dir_problem(state, create=True) is None
    assert sorted(p.name for p in state.iterdir()) == ["backing"] and os.stat(state).st_mtime_ns == before
    assert state_dir_problem(tmp_path / "absent", create=False) is None and not (tmp_path / "absent").exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc, a file system that refuses new folders")
def test_a_state_dir_the_file_system_refuses_is_named_as_such_by_doctor_and_the_sidecar():
    """``/proc/x``: root passes every permission check, yet no folder can be
    made there. doctor tries for real instead of saying "will be created",
    and the sidecar says it cannot be created rather than blaming ownership."""
    state = Path("/proc/codex-sidecar-test")
    line = doctor_line(state)
    assert line.startswith("FAIL") and f"{state} cannot be created (/proc refuses new folders" in line
    errors, _ = relay(state, engine="lossless")
    assert len(errors) == 1 and errors[0]["code"] == "state-cannot-create", errors
    assert f"{state} cannot be created" in errors[0]["msg"] and "chown" not in errors[0]["msg"]
