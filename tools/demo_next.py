"""What to run after ``make demo``: the commands a new user needs next.

A fresh clone has ``codex-sidecar`` only in ``.venv/bin/`` and codex only
under ``.tools/``; neither is on ``PATH``. :func:`next_steps` names both by
their full paths: how to put ``codex-sidecar`` on ``PATH``, ``doctor`` with
the codex the demo ran, and the command that shows what the model saw in the
demo's session (its state dir is kept only with ``ARGS=--keep``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def sidecar_script(python: str) -> Path:
    """The ``codex-sidecar`` console script beside ``python`` (the venv's)."""
    return Path(python).parent / "codex-sidecar"


def demo_thread(state_dir: Path) -> str | None:
    """The thread the demo talked on: its transcript mirror is the largest."""
    mirrors = sorted((state_dir / "sessions").glob("*.jsonl"), key=lambda p: p.stat().st_size, reverse=True)
    return mirrors[0].stem if mirrors else None


def report_command() -> str:
    """``view`` where this sidecar has it (an HTML report), else ``inspect``."""
    from sidecar.cli import cli

    return "view" if "view" in cli.commands else "inspect"


def next_steps(*, script: Path, codex_bin: str, state_dir: Path | None, path: str | None = None, home: str | None = None) -> list[str]:
    """The lines to print after the demo. ``state_dir``: the kept demo's
    (None: removed). ``path``/``home``: the environment's ``PATH`` and ``HOME``."""
    path = os.environ.get("PATH", "") if path is None else path
    home = os.path.expanduser("~") if home is None else home
    lines = ["==> next"]
    on_path = shutil.which("codex-sidecar", path=path)
    if on_path and Path(on_path).resolve() == script.resolve():
        lines.append("  codex-sidecar is on PATH")
        sidecar = "codex-sidecar"
    else:
        local_bin = os.path.join(home, ".local", "bin")
        if local_bin in path.split(os.pathsep):
            lines.append(f"  put codex-sidecar on PATH:  ln -s {script} {local_bin}/codex-sidecar")
        else:
            lines.append(f'  put codex-sidecar on PATH:  export PATH="{script.parent}:$PATH"   (or pipx install . for your user)')
        sidecar = str(script)
    lines.append(f"  check this install:         {sidecar} doctor --codex-bin {codex_bin}")
    report = report_command()
    thread = demo_thread(state_dir) if state_dir is not None else None
    if state_dir is not None and thread is not None:
        lines.append(f"  see what the model saw:     {sidecar} {report} {thread} --state-dir {state_dir}")
    else:
        lines.append(f"  see what the model saw:     make demo ARGS=--keep, then the `{sidecar} {report} ...` line it prints")
    lines.append("  put it in front of OpenClaw: README.md, 'Putting it in front of OpenClaw'")
    return lines
