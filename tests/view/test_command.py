"""``codex-sidecar view``: the command."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

from tools.view_session import PLANTED, SESSION, thread_id, write_session


def run(args, cwd):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.run([sys.executable, "-m", "sidecar", *args], capture_output=True, env=env, timeout=120, cwd=cwd)


def test_view_writes_a_private_page_and_prints_its_path(tmp_path):
    write_session(tmp_path / "state", turns=8, threads=2)
    out = run(["view", thread_id(1), "--state-dir", str(tmp_path / "state"), "-o", "r.html"], tmp_path)
    assert out.returncode == 0, out.stderr
    page = tmp_path / "r.html"
    assert out.stdout.decode().strip() == str(page)
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert PLANTED in page.read_text()


def test_view_redact_leaves_no_planted_text_in_the_file(tmp_path):
    write_session(tmp_path / "state", turns=8, threads=1)
    out = run(["view", SESSION, "--redact", "--state-dir", str(tmp_path / "state"), "-o", "r.html"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert PLANTED.encode() not in (tmp_path / "r.html").read_bytes()


def test_view_of_an_unknown_session_fails_and_writes_nothing(tmp_path):
    out = run(["view", "nobody", "--state-dir", str(tmp_path), "-o", "r.html"], tmp_path)
    assert out.returncode == 1 and b"no turns recorded for nobody" in out.stderr
    assert not (tmp_path / "r.html").exists()
