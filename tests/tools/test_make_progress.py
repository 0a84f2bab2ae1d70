"""make's set-up steps say what they do and about how long, and let pip and
npm show their own progress (a first `make demo` is minutes of set-up)."""

from __future__ import annotations

import re
from pathlib import Path

MAKEFILE = (Path(__file__).resolve().parents[2] / "Makefile").read_text()


def recipes() -> dict[str, str]:
    """target -> its recipe, for the targets that install something."""
    out = {}
    for m in re.finditer(r"^(\S+):[^\n=]*\n((?:\t[^\n]*\n|#[^\n]*\n)*)", MAKEFILE, re.M):
        body = m[2]
        if "pip install" in body or "npm install" in body or "plugins install" in body:
            out[m[1]] = body
    return out


def test_every_install_step_announces_itself_with_a_duration():
    steps = recipes()
    assert len(steps) >= 5, steps.keys()  # .venv, codex, node, openclaw, its plugin (and postgres)
    for target, body in steps.items():
        first = body.splitlines()[0]
        assert first.startswith('\t@echo "==> ') and re.search(r"~\d", first), (target, first)


def test_no_install_step_silences_its_tool():
    for target, body in recipes().items():
        assert "--quiet" not in body and "--silent" not in body, target


def test_make_demo_installs_no_test_tool_and_make_test_does():
    """The demo's set-up installs the sidecar alone (``-e .``); pytest, ruff,
    mypy, hypothesis and psycopg come with ``make test``'s own step."""
    steps = recipes()
    demo_chain = re.search(r"^setup:([^\n]*)$", MAKEFILE, re.M)
    assert demo_chain and "test-installed" not in demo_chain[1]
    assert "-e .\n" in steps["$(VENV)/.installed"] and "[test]" not in steps["$(VENV)/.installed"]
    assert "'.[test]'" in steps["$(VENV)/.test-installed"]
    for target in ("test", "lint", "test-openclaw"):
        deps = re.search(rf"^{target}:([^\n]*)$", MAKEFILE, re.M)
        assert deps and "setup-test" in deps[1], target


def test_the_venv_step_shows_it_is_alive():
    body = recipes()["$(VENV)/.installed"]
    assert "-m venv" in body and "printf ." in body and "sleep" in body


def test_a_missing_npm_is_said_before_anything_is_installed(tmp_path):
    """A real PATH without npm: make demo stops at once with one clear message."""
    import shutil
    import subprocess

    root = Path(__file__).resolve().parents[2]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "make", "python3"):
        found = shutil.which(tool)
        if found is None:
            import pytest

            pytest.skip(f"no {tool}")
        (bin_dir / tool).symlink_to(found)
    work = tmp_path / "clone"
    work.mkdir()
    shutil.copy(root / "Makefile", work / "Makefile")
    (work / "pyproject.toml").write_text("")
    out = subprocess.run(["make", "demo"], cwd=work, capture_output=True, text=True, env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, timeout=60)
    assert out.returncode != 0
    assert "npm is needed to install codex" in out.stderr and "apt-get install npm" in out.stderr
    assert not (work / ".venv").exists(), "something was installed before npm was checked"
