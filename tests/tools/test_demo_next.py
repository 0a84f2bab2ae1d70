"""After the demo: the next commands, with the paths a fresh clone has."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import demo, demo_lossless
from tools.demo_next import next_steps

CODEX = "/clone/.tools/codex-0.169.0/node_modules/.bin/codex"


def kept_state(tmp: Path) -> Path:
    state = tmp / "state"
    (state / "sessions").mkdir(parents=True)
    (state / "sessions" / "019a-small.jsonl").write_text("x\n")
    (state / "sessions" / "019a-the-demo.jsonl").write_text("x\n" * 50)
    return state


def test_a_fresh_clone_is_told_how_to_put_the_sidecar_on_path_and_doctor_with_the_demo_s_codex(tmp_path):
    script = tmp_path / "venv" / "bin" / "codex-sidecar"
    lines = next_steps(script=script, codex_bin=CODEX, state_dir=None, path="/usr/bin:/bin", home=str(tmp_path))
    text = "\n".join(lines)
    assert f'export PATH="{script.parent}:$PATH"' in text
    assert f"{script} doctor --codex-bin {CODEX}" in text
    assert "make demo ARGS=--keep" in text


def test_with_local_bin_on_path_the_link_goes_there(tmp_path):
    script = tmp_path / "venv" / "bin" / "codex-sidecar"
    local = tmp_path / ".local" / "bin"
    text = "\n".join(next_steps(script=script, codex_bin=CODEX, state_dir=None, path=f"{local}:/usr/bin", home=str(tmp_path)))
    assert f"ln -s {script} {local}/codex-sidecar" in text


def test_a_sidecar_already_on_path_is_called_by_its_name(tmp_path):
    script = tmp_path / "bin" / "codex-sidecar"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    text = "\n".join(next_steps(script=script, codex_bin=CODEX, state_dir=None, path=str(script.parent), home=str(tmp_path)))
    assert "codex-sidecar is on PATH" in text and f"codex-sidecar doctor --codex-bin {CODEX}" in text


def test_a_kept_demo_names_the_command_that_shows_its_session(tmp_path):
    state = kept_state(tmp_path)
    text = "\n".join(next_steps(script=tmp_path / "codex-sidecar", codex_bin=CODEX, state_dir=state, path="", home=str(tmp_path)))
    assert f"019a-the-demo --state-dir {state}" in text
    assert " view 019a-the-demo" in text or " inspect 019a-the-demo" in text


@pytest.mark.parametrize("keep", [False, True])
def test_the_demo_ends_with_the_next_commands(monkeypatch, capsys, keep):
    async def run(codex_bin: str, work: Path) -> int:
        kept_state(work)
        return 0

    monkeypatch.setattr(demo, "run", run)
    monkeypatch.setattr(demo_lossless, "run", run)
    monkeypatch.setattr(sys, "argv", ["demo", "--codex-bin", CODEX, *(["--keep"] if keep else [])])
    with pytest.raises(SystemExit):
        demo.main()
    out = capsys.readouterr().out
    nxt = out[out.index("==> next") :]
    assert f"doctor --codex-bin {CODEX}" in nxt
    assert "put codex-sidecar on PATH" in nxt or "codex-sidecar is on PATH" in nxt
    if keep:
        state = next(line for line in out.splitlines() if line.startswith("kept the demo's folder: ")).split(": ", 1)[1]
        assert f"019a-the-demo --state-dir {state}/state" in nxt
        import shutil

        shutil.rmtree(state)
    else:
        assert "make demo ARGS=--keep" in nxt
