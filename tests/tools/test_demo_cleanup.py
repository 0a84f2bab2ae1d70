"""The demos leave no /tmp/codex-sidecar-demo-* folder behind (unless asked to)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools import demo, demo_lossless


def _fake_run(seen: list[Path]):
    async def run(codex_bin: str, work: Path) -> int:
        (work / "state").mkdir()
        (work / "state" / "file").write_text("x")
        seen.append(work)
        return 0

    return run


@pytest.mark.parametrize("engine", ["transcript-budget", "lossless"])
def test_the_demo_removes_its_folder(monkeypatch, capsys, engine):
    seen: list[Path] = []
    monkeypatch.setattr(demo, "run", _fake_run(seen))
    monkeypatch.setattr(demo_lossless, "run", _fake_run(seen))
    monkeypatch.setattr(sys, "argv", ["demo", "--codex-bin", sys.executable, "--engine", engine])
    with pytest.raises(SystemExit) as done:
        demo.main()
    assert done.value.code == 0
    (work,) = seen
    assert work.name.startswith("codex-sidecar-demo-") and not work.exists()
    assert "ARGS=--keep" in capsys.readouterr().out


def test_keep_keeps_it(monkeypatch, capsys):
    seen: list[Path] = []
    monkeypatch.setattr(demo, "run", _fake_run(seen))
    monkeypatch.setattr(sys, "argv", ["demo", "--codex-bin", sys.executable, "--keep"])
    with pytest.raises(SystemExit):
        demo.main()
    (work,) = seen
    try:
        assert (work / "state" / "file").exists() and f"kept the demo's folder: {work}" in capsys.readouterr().out
    finally:
        import shutil

        shutil.rmtree(work)


async def test_the_lossless_demo_run_alone_cleans_its_own_temporary_folder(monkeypatch, tmp_path):
    """``demo_lossless.run`` without a folder (``python -m tools.demo_lossless``)."""
    seen: list[Path] = []
    real = demo_lossless.run

    async def spy(codex_bin: str, work: Path | None = None) -> int:
        if work is None:
            return await real(codex_bin, None)
        seen.append(work)
        return 0

    monkeypatch.setattr(demo_lossless, "run", spy)
    assert await real("codex", None) == 0
    (work,) = seen
    assert work.name.startswith("codex-sidecar-demo-lossless-") and not work.exists()
