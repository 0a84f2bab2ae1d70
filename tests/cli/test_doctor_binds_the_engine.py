"""doctor binds the selected engine to a throwaway host, so a store the
engine cannot open is a FAIL with the engine's own words, and a session logs
those words too.

The missing extra is real: a venv made for the test holds every package of
this one but psycopg (the ``[postgres]`` extra), as ``pip install
openclaw-codex-sidecar`` without the extra leaves it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.support.harness import CHILDREN

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2-not-logged"
URL = f"postgresql://sidecar:{SECRET}@127.0.0.1:1/lossless"
INSTALL = "pip install 'openclaw-codex-sidecar[postgres]'"


@pytest.fixture(scope="module")
def venv_without_postgres(tmp_path_factory) -> Path:
    """A real venv with this one's packages, psycopg left out."""
    home = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home)], check=True, timeout=120)
    ours = Path(sysconfig.get_paths()["purelib"])
    (theirs,) = home.glob("lib/python*/site-packages")
    for entry in ours.iterdir():
        if not entry.name.lower().startswith("psycopg"):
            (theirs / entry.name).symlink_to(entry)
    python = home / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import psycopg"], capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert probe.returncode != 0, "psycopg still importable"
    return python


def config(tmp: Path, url: str = URL) -> Path:
    cfg = tmp / "config.toml"
    cfg.write_text(f'engine = "lossless"\n\n[engines.lossless]\ndatabase_url = "{url}"\n')
    return cfg


def env(tmp: Path, cfg: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    e.update(PYTHONPATH=str(ROOT), CODEX_SIDECAR_CONFIG=str(cfg), CODEX_SIDECAR_STATE_DIR=str(tmp / "state"), XDG_CONFIG_HOME=str(tmp), ECHO_RPC_QUIET="1")
    return e


def engine_line(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line[5:].startswith("engine ")]
    return line


def test_doctor_fails_the_engine_when_its_postgres_extra_is_missing(tmp_path, venv_without_postgres):
    out = subprocess.run([str(venv_without_postgres), "-m", "sidecar", "doctor"], capture_output=True, text=True, env=env(tmp_path, config(tmp_path)), cwd=tmp_path, timeout=120)
    line = engine_line(out.stdout)
    assert line.startswith("FAIL engine") and "psycopg is not installed" in line and INSTALL in line, line
    assert out.returncode == 1
    assert SECRET not in out.stdout + out.stderr


def test_a_session_logs_what_to_install_when_the_postgres_extra_is_missing(tmp_path, venv_without_postgres):
    cfg = config(tmp_path)
    e = {**env(tmp_path, cfg), "CODEX_SIDECAR_LOG_FORMAT": "json"}
    out = subprocess.run(
        [str(venv_without_postgres), "-m", "sidecar", "proxy", "--", sys.executable, str(CHILDREN / "echo_rpc.py")],
        input=b'{"id":1,"method":"initialize","params":{}}\n',
        capture_output=True,
        env=e,
        cwd=tmp_path,
        timeout=120,
    )
    assert json.loads(out.stdout.splitlines()[0])["result"]["userAgent"].startswith("echo_rpc/")
    (failed,) = [r for r in map(json.loads, out.stderr.decode().splitlines()) if r["msg"].startswith("context engine bind failed")]
    assert failed["error"] == "StoreError" and INSTALL in failed["message"]
    assert SECRET.encode() not in out.stderr


def test_doctor_fails_an_engine_whose_database_cannot_be_reached_and_masks_the_password(tmp_path):
    pytest.importorskip("psycopg")
    out = subprocess.run([sys.executable, "-m", "sidecar", "doctor"], capture_output=True, text=True, env=env(tmp_path, config(tmp_path)), cwd=tmp_path, timeout=120)
    line = engine_line(out.stdout)
    assert line.startswith("FAIL engine") and "cannot connect to the lossless store postgresql://sidecar:***@127.0.0.1:1/lossless" in line, line
    assert SECRET not in out.stdout + out.stderr


def test_doctor_binds_a_working_engine_and_leaves_nothing_behind(tmp_path):
    state = tmp_path / "state"
    e = env(tmp_path, tmp_path / "none.toml")
    (tmp_path / "none.toml").write_text('engine = "lossless"\n')
    out = subprocess.run([sys.executable, "-m", "sidecar", "doctor"], capture_output=True, text=True, env=e, cwd=tmp_path, timeout=120)
    assert engine_line(out.stdout).startswith("ok   engine       lossless"), out.stdout
    assert not state.exists()
