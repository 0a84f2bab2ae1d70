"""Start-up: spawn -> ``initialize`` answered, the sidecar against codex alone.

OpenClaw starts one app-server per ``--local`` turn and waits for its
``initialize`` answer first, so whatever the sidecar adds to that wait it
adds to every turn. Each round spawns codex alone, the sidecar with
``legacy`` and the sidecar with ``lossless``, in an order that rotates every
round (so none always runs after the same one on a busy machine), and times
from just before the spawn to the answer's last byte. Each sidecar round is
paired with the codex round next to it: the report gives, per engine, the
p50 of the paired differences (sidecar minus codex, ms) and of the ratios,
against the baseline measured in the same run, with the sidecar's peak RSS
(``VmHWM``), for ``lossless`` read 2 s after the answer so that the
tokenizer it loads in the background counts. ``--check`` exits 1 past the target
(``+100 ms`` p50, ``100 MB`` peak RSS with ``lossless``).

    python -m tools.bench_startup [--rounds 20] [--json FILE] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.codex_home import codex_env, find_codex_bin, make_codex_home

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("legacy", "lossless")
TARGET_MS = 100.0
TARGET_RSS_MB = 100.0
SETTLE = 2.0
"""Seconds the lossless sidecar is left after its answer before its peak RSS
is read: the tokenizer it loads then is part of its peak."""
INITIALIZE = (
    json.dumps(
        {
            "id": 1,
            "method": "initialize",
            "params": {"clientInfo": {"name": "codex_sidecar_bench", "title": "bench", "version": "0"}, "capabilities": {"experimentalApi": True}},
        }
    ).encode()
    + b"\n"
)


def sidecar_exe(tree: Path = ROOT) -> list[str]:
    """What the console script users (and OpenClaw) start runs, for the
    source tree ``tree``: its own ``codex-sidecar`` entry point (from its
    pyproject.toml), run as the script runs it. A tree's entry point may
    differ from the installed script's (sidecar.cli:main before issue 25,
    sidecar.launch:main after), so --compare measures each tree's own."""
    import tomllib

    entry = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]["codex-sidecar"]
    module, _, fn = entry.partition(":")
    return [sys.executable, "-c", f"import sys; from {module} import {fn}; sys.argv[0] = 'codex-sidecar'; sys.exit({fn}())"]


def peak_rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_ms(pid: int) -> float | None:
    """User + system CPU a process has used so far, in ms (its own, not its children's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def start_once(argv: list[str], env: dict[str, str], cwd: str, timeout: float = 60.0, settle: float = 0.0) -> tuple[float, int | None, float | None]:
    """Milliseconds from spawn to the ``initialize`` answer, the spawned
    process's peak RSS (KiB) ``settle`` seconds after it answered (what it
    loads in the background once it answered included), and the CPU it had
    used when it answered (ms): on a busy machine the wall time is mostly
    waiting for a core, the CPU is not."""
    err = tempfile.TemporaryFile()  # shown if it fails, else never read
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, cwd=cwd)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        deadline = t0 + timeout
        while True:
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                err.seek(0)
                tail = err.read()[-4000:].decode(errors="replace")
                raise RuntimeError(f"{argv[:3]} exited ({proc.returncode}) before answering initialize; its stderr ends:\n{tail}")
            if b'"id":1' in line.replace(b" ", b""):
                elapsed = (time.perf_counter() - t0) * 1000
                cpu = cpu_ms(proc.pid)
                break
            if time.perf_counter() > deadline:
                raise TimeoutError("no initialize answer")
        if settle:
            time.sleep(settle)
        rss = peak_rss_kib(proc.pid)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        err.close()
    return elapsed, rss, cpu


@dataclass
class Series:
    ms: list[float] = field(default_factory=list)
    paired_ms: list[float] = field(default_factory=list)
    """This configuration minus the codex round next to it."""
    ratios: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)


def run(rounds: int, work: Path, codex: str, src: Path = ROOT, compare: Path | None = None) -> dict[str, Series]:
    home = make_codex_home(work / "codex-home", "http://127.0.0.1:9/v1")
    base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    base["PYTHONPATH"] = str(src) + (os.pathsep + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    env = codex_env(home, base)
    # A HOME of its own (as OpenClaw gives codex): codex snapshots the login
    # shell at start-up, and each start stopped right after its answer would
    # otherwise run the real ~/.bashrc and may cut a `pyenv rehash` short,
    # leaving its lock (~/.pyenv/shims/.pyenv-shim) behind for everyone.
    (work / "home").mkdir(exist_ok=True)
    env["HOME"] = str(work / "home")
    (work / "sidecar.toml").write_text("")  # never the developer's own config
    env["CODEX_SIDECAR_CONFIG"] = str(work / "sidecar.toml")
    env["CODEX_SIDECAR_STATE_DIR"] = str(work / "state")
    env["CODEX_SIDECAR_LOG_LEVEL"] = "warning"
    codex_argv = [codex, "app-server"]
    configs = {"codex": (codex_argv, env)}
    for engine in ENGINES:
        configs[engine] = ([*sidecar_exe(src), "proxy", "--", *codex_argv], {**env, "CODEX_SIDECAR_ENGINE": engine})
    if compare is not None:  # another tree's sidecar, in the same rounds
        other = {**env, "PYTHONPATH": str(compare) + env["PYTHONPATH"][len(str(src)) :]}
        for engine in ENGINES:
            configs[f"{engine}@compare"] = ([*sidecar_exe(compare), "proxy", "--", *codex_argv], {**other, "CODEX_SIDECAR_ENGINE": engine})
    names = list(configs)
    sidecars = [n for n in names if n != "codex"]
    series = {name: Series() for name in names}
    for warm in names:  # page cache, .pyc files, codex's first start
        start_once(*configs[warm], cwd=str(work))
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        this_round: dict[str, float] = {}
        for name in order:
            ms, rss, cpu = start_once(*configs[name], cwd=str(work), settle=SETTLE if name.startswith("lossless") else 0.0)
            if cpu is not None and name != "codex":
                series[name].cpu_ms.append(cpu)
            this_round[name] = ms
            series[name].ms.append(ms)
            if rss is not None and name != "codex":
                series[name].rss_kib.append(rss)
        for engine in sidecars:
            series[engine].paired_ms.append(this_round[engine] - this_round["codex"])
            series[engine].ratios.append(this_round[engine] / this_round["codex"])
        print(f"round {r + 1}/{rounds}: " + "  ".join(f"{n} {this_round[n]:.0f} ms" for n in names), file=sys.stderr, flush=True)
    return series


def report(series: dict[str, Series]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {"codex": {"p50Ms": statistics.median(series["codex"].ms)}}
    for engine in [n for n in series if n != "codex"]:
        s = series[engine]
        out[engine] = {
            "p50Ms": statistics.median(s.ms),
            "p50DeltaMs": statistics.median(s.paired_ms),
            "p50Ratio": statistics.median(s.ratios),
            "peakRssMb": max(s.rss_kib) / 1024 if s.rss_kib else float("nan"),
            "p50CpuMs": statistics.median(s.cpu_ms) if s.cpu_ms else float("nan"),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--src", type=Path, default=ROOT, help="the source tree whose sidecar is measured")
    ap.add_argument("--compare", type=Path, help="another source tree (a main checkout) measured in the same rounds")
    ap.add_argument("--check", action="store_true", help=f"exit 1 past +{TARGET_MS:g} ms p50 or {TARGET_RSS_MB:g} MB peak RSS")
    args = ap.parse_args(argv)
    codex = find_codex_bin()
    if codex is None:
        print("no codex binary (make setup, or CODEX_SIDECAR_TEST_CODEX_BIN)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        figures = report(run(args.rounds, Path(tmp), codex, args.src.resolve(), args.compare.resolve() if args.compare else None))
    print(f"spawn -> initialize answered, {args.rounds} rounds interleaved, p50 (codex alone {figures['codex']['p50Ms']:.0f} ms)")
    print(f"{'engine':<17} {'p50 ms':>8} {'minus codex':>12} {'ratio':>7} {'peak RSS':>9} {'CPU ms':>7}")
    failed = False
    for engine in [n for n in figures if n != "codex"]:
        f = figures[engine]
        print(f"{engine:<17} {f['p50Ms']:>8.0f} {f['p50DeltaMs']:>+11.0f}  {f['p50Ratio']:>6.2f}x {f['peakRssMb']:>6.0f} MB {f['p50CpuMs']:>7.0f}")
        if engine in ENGINES:
            failed |= f["p50DeltaMs"] > TARGET_MS or (engine == "lossless" and f["peakRssMb"] > TARGET_RSS_MB)
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": args.rounds, **figures}, indent=2) + "\n")
    if args.check and failed:
        print(f"over the target (+{TARGET_MS:g} ms p50, {TARGET_RSS_MB:g} MB peak RSS with lossless)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
