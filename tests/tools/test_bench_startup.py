"""tools/bench_startup.py's figures, without starting anything."""

from __future__ import annotations

import os

from tools.bench_startup import Series, cpu_ms, peak_rss_kib, report


def test_the_figures_are_p50s_of_the_paired_differences_and_ratios():
    series = {
        "codex": Series(ms=[100, 300, 200]),
        "legacy": Series(ms=[150, 320, 900], paired_ms=[50, 20, 700], ratios=[1.5, 1.07, 4.5], rss_kib=[30 * 1024, 40 * 1024], cpu_ms=[80, 90, 400]),
        "lossless": Series(ms=[1, 2, 3], paired_ms=[-10, 5, 60], ratios=[0.9, 1.1, 1.3], rss_kib=[99 * 1024], cpu_ms=[100]),
    }
    figures = report(series)
    assert figures["codex"] == {"p50Ms": 200}
    assert figures["legacy"] == {"p50Ms": 320, "p50DeltaMs": 50, "p50Ratio": 1.5, "peakRssMb": 40.0, "p50CpuMs": 90}
    assert figures["lossless"]["p50DeltaMs"] == 5 and figures["lossless"]["peakRssMb"] == 99.0


def test_a_process_s_cpu_and_peak_rss_are_read_from_proc():
    assert cpu_ms(os.getpid()) > 0
    assert peak_rss_kib(os.getpid()) > 1000
    assert cpu_ms(2**22 + 7) is None and peak_rss_kib(2**22 + 7) is None


def test_each_tree_is_started_through_its_own_entry_point(tmp_path):
    """--compare against a checkout from before sidecar.launch must not run
    this tree's entry point on that tree's modules."""
    from tools.bench_startup import ROOT, sidecar_exe

    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[project.scripts]\ncodex-sidecar = "sidecar.cli:main"\n')
    old = sidecar_exe(tmp_path)
    assert "from sidecar.cli import main" in old[-1]
    assert "from sidecar.launch import main" in sidecar_exe(ROOT)[-1]
