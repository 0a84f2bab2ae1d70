"""What `pip install .` / `pipx install .` ships: every module of the three
packages.  A hand-kept package list once left out the sidecar's subpackages,
so an installed sidecar printed `--help` and passed `doctor` but could not
serve a turn (`No module named 'sidecar.lifecycle'`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "sidecar", "engines")


def _sources(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for pkg in PACKAGES for p in (root / pkg).rglob("*.py") if "__pycache__" not in p.parts}


def test_the_build_ships_every_module_of_the_packages(tmp_path):
    # Build from a copy, so the build writes nothing into the repository.
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path / "lib"
    # build_py is the step that lays out the wheel's files (the wheel is a zip of it).
    proc = subprocess.run(
        [sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py", "--build-lib", str(out)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    expected = _sources(src)
    assert {"sidecar/lifecycle/__init__.py", "sidecar/relay/router.py", "engines/lossless/__init__.py"} <= expected
    shipped = {str(p.relative_to(out)) for p in out.rglob("*.py")}
    assert expected - shipped == set(), "modules a pip install would lack"
