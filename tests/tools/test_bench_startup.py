"""tools/bench_startup.py's figures, without starting anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tools.bench_startup import Series, answer_to, cpu_ms, over_target, peak_rss_kib, report, table, thread_start


def figures_of_three_rounds():
    series = {
        "codex": Series(ms=[100, 300, 200], thread_ms=[150, 400, 250]),
        "legacy": Series(
            ms=[150, 320, 900],
            paired_ms=[50, 20, 700],
            thread_ms=[200, 500, 1000],
            paired_thread_ms=[50, 100, 750],
            ratios=[1.5, 1.07, 4.5],
            rss_kib=[30 * 1024, 40 * 1024],
            cpu_ms=[80, 90, 400],
        ),
        "lossless": Series(ms=[1, 2, 3], paired_ms=[-10, 5, 60], thread_ms=[7, 8, 9], paired_thread_ms=[30, -40, 200], ratios=[0.9, 1.1, 1.3], rss_kib=[99 * 1024], cpu_ms=[100]),
    }
    return report(series)


def test_the_figures_are_p50s_of_the_paired_differences_for_both_answers():
    figures = figures_of_three_rounds()
    assert figures["codex"] == {"p50Ms": 200, "p50ThreadMs": 250}
    assert figures["legacy"] == {
        "p50Ms": 320,
        "p50DeltaMs": 50,
        "p50ThreadMs": 500,
        "p50ThreadDeltaMs": 100,
        "p50Ratio": 1.5,
        "peakRssMb": 40.0,
        "p50CpuMs": 90,
    }
    assert figures["lossless"]["p50DeltaMs"] == 5 and figures["lossless"]["p50ThreadDeltaMs"] == 30
    assert figures["lossless"]["peakRssMb"] == 99.0


def test_the_table_shows_each_engine_minus_codex_for_init_and_thread_start():
    lines = table(figures_of_three_rounds(), 3)
    assert "codex alone: init 200 ms, thread/start 250 ms" in lines[0]
    header = lines[1].split()
    assert header[:3] == ["engine", "init", "thread/start"]
    legacy = next(line for line in lines if line.startswith("legacy")).split()
    lossless = next(line for line in lines if line.startswith("lossless")).split()
    assert legacy[1:3] == ["+50", "+100"]
    assert lossless[1:3] == ["+5", "+30"]


def test_the_check_is_on_the_initialize_answer_not_thread_start():
    figures = figures_of_three_rounds()
    figures["legacy"]["p50DeltaMs"] = 40
    figures["legacy"]["p50ThreadDeltaMs"] = 900
    assert not over_target(figures)
    figures["lossless"]["p50DeltaMs"] = 101
    assert over_target(figures)
    figures["lossless"]["p50DeltaMs"] = 0
    figures["lossless"]["peakRssMb"] = 101
    assert over_target(figures)


def test_only_answers_are_taken_for_the_answer_awaited():
    assert answer_to(b'{"id":2,"result":{"thread":{"id":"019a"}}}\n') == (2, False)
    assert answer_to(b'{"id": 1, "result": {}}\n') == (1, False)
    assert answer_to(b'{"id":2,"error":{"code":-32600,"message":"x"}}\n') == (2, True)
    # a notification naming a thread, a server request with an id, not JSON
    assert answer_to(b'{"method":"thread/started","params":{"thread":{"id":2}}}\n') == (None, False)
    assert answer_to(b'{"id":2,"method":"item/tool/call","params":{}}\n') == (None, False)
    assert answer_to(b"warning: not json\n") == (None, False)


def test_thread_start_is_a_request_with_id_2_in_the_given_cwd():
    msg = json.loads(thread_start("/tmp/w"))
    assert msg["id"] == 2 and msg["method"] == "thread/start"
    assert msg["params"]["cwd"] == "/tmp/w" and msg["params"]["developerInstructions"]


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


def test_each_tree_is_compiled_as_a_wheel_install_compiles_it(tmp_path, monkeypatch):
    """PYTHONDONTWRITEBYTECODE in the environment must not leave the
    measured sidecar compiling its modules on every start."""
    from tools.bench_startup import compile_tree

    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    for package in ("sidecar", "engines"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("X = 1\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("Y = 2\n")
    assert compile_tree(tmp_path) is True
    assert list((tmp_path / "sidecar" / "__pycache__").glob("__init__.*.pyc"))
    assert list((tmp_path / "engines" / "__pycache__").glob("__init__.*.pyc"))
    assert not (tmp_path / "tests" / "__pycache__").exists()  # only what the wheel installs
    (tmp_path / "engines" / "broken.py").write_text("def f(:\n")
    assert compile_tree(tmp_path) is False


def test_the_sidecar_runs_on_a_python_laid_out_as_an_installed_one(tmp_path):
    """The dependencies import; the editable install's finder does not load."""
    from tools.bench_startup import installed_python

    python = installed_python(tmp_path / "py")
    code = "import sys, trio, msgspec, click; print(any('__editable__' in type(f).__module__ or '__editable__' in repr(f) for f in sys.meta_path))"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
