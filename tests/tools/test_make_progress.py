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
