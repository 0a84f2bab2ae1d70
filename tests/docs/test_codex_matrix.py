"""The codex versions the project promises and tests name one range
everywhere: doctor's minimum is the matrix's oldest release, and the
README states the releases the matrix runs (docs/testing.md, "Codex versions")."""

from __future__ import annotations

import re
from pathlib import Path

from sidecar.doctor import MIN_CODEX

ROOT = Path(__file__).resolve().parents[2]


def _make_var(name: str) -> str:
    m = re.search(rf"^{name}\s*:=\s*(\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, f"{name} not set in the Makefile"
    return m[1]


def test_doctors_minimum_is_the_oldest_release_the_matrix_runs():
    assert ".".join(map(str, MIN_CODEX)) == _make_var("CODEX_OLDEST")


def test_the_readme_promises_the_oldest_and_names_every_release_tested():
    oldest, pinned, newest = _make_var("CODEX_OLDEST"), _make_var("CODEX_VER"), _make_var("CODEX_NEWEST")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`codex`, {oldest} or newer (tested with {oldest}, {pinned} and {newest};" in readme
    assert f"checks codex (found, at least {oldest})" in readme
