"""What `pip install .` / `pipx install .` ships: every module of the three
packages.  A hand-kept package list once left out the sidecar's subpackages,
so an installed sidecar printed `--help` and passed `doctor` but could not
serve a turn (`No module named 'sidecar.lifecycle'`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
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


# ---- the README's OpenClaw snippet and settings

README = ROOT / "README.md"
README_COMMAND = "/home/me/.local/bin/codex-sidecar"


def _readme_snippet() -> str:
    """The README's first json5 block, dedented (it sits in a list item)."""
    text = README.read_text()
    m = re.search(r"^( *)```json5\n(.*?)^\1```", text, re.S | re.M)
    assert m, "no ```json5 block in README.md"
    return textwrap.dedent(m[2]).strip()


def _json5_to_data(text: str) -> object:
    """Enough JSON5 for the snippet: // comments, bare keys, trailing commas."""
    text = re.sub(r"^\s*//.*$", "", text, flags=re.M)
    text = re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:", r'\1"\2":', text)
    text = re.sub(r",(\s*[}\]])", r"\1", text)
    return json.loads(text)


def _leaves(value: object, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], object]:
    if isinstance(value, dict):
        out: dict[tuple[str, ...], object] = {}
        for k, v in value.items():
            out.update(_leaves(v, (*prefix, k)))
        return out
    return {prefix: value}


def test_the_readme_snippet_is_what_doctor_prints():
    from sidecar.doctor import openclaw_snippet

    printed = openclaw_snippet(README_COMMAND, "/usr/local/bin/codex", "legacy", "/state").splitlines()
    body = "\n".join(printed[printed.index("{") : printed.index("}") + 1])
    assert _readme_snippet() == body


def test_the_readme_snippet_is_the_config_the_openclaw_tests_run():
    """tools/openclaw_home.py builds the config the live OpenClaw tests run
    the whole agent with: every setting the README gives must be in it."""
    from tools.openclaw_home import openclaw_config

    readme = _leaves(_json5_to_data(_readme_snippet()))
    assert readme[("plugins", "entries", "codex", "enabled")] is True
    assert readme[("models", "providers", "openai", "agentRuntime", "id")] == "codex"
    tested = _leaves(openclaw_config(README_COMMAND, ROOT))
    assert {k: tested.get(k) for k in readme} == readme


def test_the_readme_documents_every_setting_and_command():
    from sidecar.cli import cli
    from sidecar.config import SETTINGS

    text = README.read_text()
    missing = [s.flag for s in SETTINGS if f"`{s.flag}" not in text]
    missing += [s.envvar for s in SETTINGS if f"`{s.envvar}`" not in text]
    missing += [s.name for s in SETTINGS if f"`{s.name}`" not in text]
    missing += [name for name in ("--config-file", "CODEX_SIDECAR_CONFIG") if name not in text]
    missing += [f"codex-sidecar [OPTIONS] {name}" for name, c in cli.commands.items() if not c.hidden and name != "version" and f"codex-sidecar [OPTIONS] {name}" not in text]
    assert missing == []
