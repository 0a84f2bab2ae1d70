"""``make demo`` ends by writing the session's report and printing its path."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from tools import demo, demo_lossless
from tools.view_session import PLANTED, thread_id, write_session


@pytest.mark.parametrize("engine", ["transcript-budget", "lossless"])
def test_the_demo_prints_the_path_of_its_session_report_which_outlives_its_folder(monkeypatch, capsys, engine):
    seen: list[Path] = []

    async def run(codex_bin: str, work: Path) -> int:
        write_session(work / "state", turns=8, threads=1)
        (work / "state" / "inspect" / "zz-later.jsonl").write_text("")  # the demo's thread is the first one
        seen.append(work)
        return 0

    monkeypatch.setattr(demo, "run", run)
    monkeypatch.setattr(demo_lossless, "run", run)
    monkeypatch.setattr(sys, "argv", ["demo", "--codex-bin", sys.executable, "--engine", engine])
    with pytest.raises(SystemExit):
        demo.main()
    (work,) = seen
    lines = capsys.readouterr().out.rstrip().splitlines()
    heading = lines.index("the session's report (codex-sidecar view), to open in a browser:")  # (the next commands follow it)
    report = Path(lines[heading + 1].strip())
    try:
        assert report == work.with_name(work.name + ".html") and not work.exists()
        assert stat.S_IMODE(report.stat().st_mode) == 0o600 and PLANTED in report.read_text() and thread_id(1) in report.read_text()
    finally:
        report.unlink(missing_ok=True)
