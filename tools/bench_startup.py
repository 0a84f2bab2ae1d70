"""Start-up: spawn -> ``initialize`` answered and spawn -> ``thread/start``
answered, the sidecar against codex alone.

OpenClaw starts one app-server per ``--local`` turn and waits for its
``initialize`` answer first, then sends ``initialized`` and ``thread/start``
(or ``thread/resume``) at once and waits for that answer before the turn, so
whatever the sidecar adds to either wait it adds to every turn. The sidecar
answers ``initialize`` before its engine is loaded and holds the client's next
lines until it is, so a change can make the first answer sooner and the
second later: each start times both. Each round spawns codex alone, the
sidecar with ``legacy`` and the sidecar with ``lossless``, in an order that
rotates every round (so none always runs after the same one on a busy
machine), and times from just before the spawn to each answer's last byte
(``thread/start`` needs no model call, so no account). Each sidecar round is
paired with the codex round next to it: the report gives, per engine, the
p50 of the paired differences (sidecar minus codex, ms) for both answers, the
p50 of the ``initialize`` ratios,
against the baseline measured in the same run, with the sidecar's peak RSS
(``VmHWM``), for ``lossless`` read 2 s after the answer so that the
tokenizer it loads in the background counts. ``--check`` exits 1 past issue
25's target, which is on ``initialize`` (``+100 ms`` p50, ``100 MB`` peak RSS
with ``lossless``).

Each measured tree's modules are compiled to bytecode first, as ``pip install``
(or ``pipx install``) does for the wheel users run: a source tree imported
with ``PYTHONDONTWRITEBYTECODE=1`` (set on some machines, this one included)
and no ``__pycache__`` compiles every sidecar module on every start, ~60-100 ms
of CPU that no installed sidecar pays.

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
INITIALIZED = b'{"method":"initialized"}\n'


def thread_start(cwd: str) -> bytes:
    """A ``thread/start`` shaped like OpenClaw's (developer instructions, one
    dynamic tool, config, service name), small: what is timed is the start,
    not the parsing of OpenClaw's ~118 KB of tools."""
    params = {
        "cwd": cwd,
        "developerInstructions": "Bench developer instructions: answer briefly.",
        "dynamicTools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Current weather for a city.",
                "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": False},
            }
        ],
        "config": {},
        "serviceName": "codex_sidecar_bench",
        "experimentalRawEvents": False,
    }
    return json.dumps({"id": 2, "method": "thread/start", "params": params}).encode() + b"\n"


def answer_to(line: bytes) -> tuple[int | None, bool]:
    """The request id a line answers (None for a notification, a server
    request or a line that is not JSON) and whether the answer is an error."""
    try:
        msg = json.loads(line)
    except ValueError:
        return None, False
    if not isinstance(msg, dict) or "method" in msg or not isinstance(msg.get("id"), int):
        return None, False
    return msg["id"], "error" in msg


def installed_python(folder: Path) -> str:
    """A Python laid out as ``pipx install .`` leaves one: this environment's
    dependencies on its path, and not the import finder ``make setup``'s
    ``pip install -e`` adds (read by ``site`` at every start: ~10 ms before
    the entry point runs, which no installed sidecar pays). The measured tree
    comes from ``PYTHONPATH``, compiled as the wheel would be."""
    import sysconfig
    import venv

    venv.create(folder, with_pip=False, symlinks=True)
    purelib = Path(sysconfig.get_paths(scheme="venv", vars={"base": str(folder), "platbase": str(folder)})["purelib"])
    (purelib / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # a path line: no .pth of it runs
    return str(folder / "bin" / "python")


def sidecar_exe(tree: Path = ROOT, python: str = sys.executable) -> list[str]:
    """What the console script users (and OpenClaw) start runs, for the
    source tree ``tree``: its own ``codex-sidecar`` entry point (from its
    pyproject.toml), run as the script runs it. A tree's entry point may
    differ from the installed script's (sidecar.cli:main before issue 25,
    sidecar.launch:main after), so --compare measures each tree's own."""
    import tomllib

    entry = tomllib.loads((tree / "pyproject.toml").read_text())["project"]["scripts"]["codex-sidecar"]
    module, _, fn = entry.partition(":")
    return [python, "-c", f"import sys; from {module} import {fn}; sys.argv[0] = 'codex-sidecar'; sys.exit({fn}())"]


PACKAGES = ("sidecar", "protocol", "engines")
"""The tree's packages the wheel installs (and so compiles)."""


def compile_tree(tree: Path) -> bool:
    """Compile ``tree``'s packages to bytecode where it is missing or stale,
    as a wheel install does; whether every module compiled."""
    import compileall

    return all([compileall.compile_dir(str(tree / p), quiet=1) for p in PACKAGES if (tree / p).is_dir()])


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


@dataclass
class Start:
    init_ms: float
    """Spawn -> the ``initialize`` answer."""
    thread_ms: float
    """Spawn -> the ``thread/start`` answer."""
    rss_kib: int | None
    cpu_ms: float | None


def start_once(argv: list[str], env: dict[str, str], cwd: str, timeout: float = 60.0, settle: float = 0.0) -> Start:
    """Milliseconds from spawn to the ``initialize`` answer and to the
    ``thread/start`` answer (sent with ``initialized`` as soon as the first
    came, as OpenClaw does), the spawned process's peak RSS (KiB) ``settle``
    seconds after the second (what it loads in the background included), and
    the CPU it had used when it answered ``initialize`` (ms): on a busy machine
    the wall time is mostly waiting for a core, the CPU is not."""
    err = tempfile.TemporaryFile()  # shown if it fails, else never read
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env, cwd=cwd)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(INITIALIZE)
        proc.stdin.flush()
        deadline = t0 + timeout
        init_ms = thread_ms = 0.0
        cpu = None
        while not thread_ms:
            line = proc.stdout.readline()
            waiting = "thread/start" if init_ms else "initialize"
            if not line:
                proc.wait()
                err.seek(0)
                tail = err.read()[-4000:].decode(errors="replace")
                raise RuntimeError(f"{argv[:3]} exited ({proc.returncode}) before answering {waiting}; its stderr ends:\n{tail}")
            answered, error = answer_to(line)
            if answered == 1 and not init_ms:
                init_ms = (time.perf_counter() - t0) * 1000
                cpu = cpu_ms(proc.pid)
                proc.stdin.write(INITIALIZED + thread_start(cwd))
                proc.stdin.flush()
            elif answered == 2 and init_ms:
                if error:
                    raise RuntimeError(f"{argv[:3]} answered thread/start with an error: {line[:2000].decode(errors='replace')}")
                thread_ms = (time.perf_counter() - t0) * 1000
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no {waiting} answer")
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
    return Start(init_ms, thread_ms, rss, cpu)


@dataclass
class Series:
    ms: list[float] = field(default_factory=list)
    paired_ms: list[float] = field(default_factory=list)
    """This configuration minus the codex round next to it (``initialize``)."""
    thread_ms: list[float] = field(default_factory=list)
    paired_thread_ms: list[float] = field(default_factory=list)
    """The same for the ``thread/start`` answer."""
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
    python = installed_python(work / "python")
    configs = {"codex": (codex_argv, env)}
    for engine in ENGINES:
        configs[engine] = ([*sidecar_exe(src, python), "proxy", "--", *codex_argv], {**env, "CODEX_SIDECAR_ENGINE": engine})
    if compare is not None:  # another tree's sidecar, in the same rounds
        other = {**env, "PYTHONPATH": str(compare) + env["PYTHONPATH"][len(str(src)) :]}
        for engine in ENGINES:
            configs[f"{engine}@compare"] = ([*sidecar_exe(compare, python), "proxy", "--", *codex_argv], {**other, "CODEX_SIDECAR_ENGINE": engine})
    names = list(configs)
    sidecars = [n for n in names if n != "codex"]
    series = {name: Series() for name in names}
    for warm in names:  # page cache, .pyc files, codex's first start
        start_once(*configs[warm], cwd=str(work))
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        this_round: dict[str, Start] = {}
        for name in order:
            start = start_once(*configs[name], cwd=str(work), settle=SETTLE if name.startswith("lossless") else 0.0)
            if start.cpu_ms is not None and name != "codex":
                series[name].cpu_ms.append(start.cpu_ms)
            this_round[name] = start
            series[name].ms.append(start.init_ms)
            series[name].thread_ms.append(start.thread_ms)
            if start.rss_kib is not None and name != "codex":
                series[name].rss_kib.append(start.rss_kib)
        codex_alone = this_round["codex"]
        for engine in sidecars:
            series[engine].paired_ms.append(this_round[engine].init_ms - codex_alone.init_ms)
            series[engine].paired_thread_ms.append(this_round[engine].thread_ms - codex_alone.thread_ms)
            series[engine].ratios.append(this_round[engine].init_ms / codex_alone.init_ms)
        print(
            f"round {r + 1}/{rounds} (init/thread ms): " + "  ".join(f"{n} {this_round[n].init_ms:.0f}/{this_round[n].thread_ms:.0f}" for n in names),
            file=sys.stderr,
            flush=True,
        )
    return series


def report(series: dict[str, Series]) -> dict[str, dict[str, float]]:
    codex = series["codex"]
    out: dict[str, dict[str, float]] = {"codex": {"p50Ms": statistics.median(codex.ms), "p50ThreadMs": statistics.median(codex.thread_ms)}}
    for engine in [n for n in series if n != "codex"]:
        s = series[engine]
        out[engine] = {
            "p50Ms": statistics.median(s.ms),
            "p50DeltaMs": statistics.median(s.paired_ms),
            "p50ThreadMs": statistics.median(s.thread_ms),
            "p50ThreadDeltaMs": statistics.median(s.paired_thread_ms),
            "p50Ratio": statistics.median(s.ratios),
            "peakRssMb": max(s.rss_kib) / 1024 if s.rss_kib else float("nan"),
            "p50CpuMs": statistics.median(s.cpu_ms) if s.cpu_ms else float("nan"),
        }
    return out


def table(figures: dict[str, dict[str, float]], rounds: int) -> list[str]:
    """The report's lines: per sidecar, its p50 minus codex alone's (paired)
    for the ``initialize`` answer (``init``) and the ``thread/start`` answer."""
    codex = figures["codex"]
    lines = [
        f"spawn -> answered, {rounds} rounds interleaved, p50 minus codex alone (paired); codex alone: init {codex['p50Ms']:.0f} ms, thread/start {codex['p50ThreadMs']:.0f} ms",
        f"{'engine':<17} {'init':>7} {'thread/start':>13} {'init ratio':>11} {'peak RSS':>9} {'CPU ms':>7}",
    ]
    for engine in [n for n in figures if n != "codex"]:
        f = figures[engine]
        lines.append(f"{engine:<17} {f['p50DeltaMs']:>+7.0f} {f['p50ThreadDeltaMs']:>+13.0f} {f['p50Ratio']:>10.2f}x {f['peakRssMb']:>6.0f} MB {f['p50CpuMs']:>7.0f}")
    return lines


def over_target(figures: dict[str, dict[str, float]]) -> bool:
    """Issue 25's rule: ``initialize`` at most +100 ms p50 with each engine,
    ``lossless`` at most 100 MB peak RSS (``thread/start`` is reported, not checked)."""
    return any(figures[e]["p50DeltaMs"] > TARGET_MS or (e == "lossless" and figures[e]["peakRssMb"] > TARGET_RSS_MB) for e in ENGINES if e in figures)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--src", type=Path, default=ROOT, help="the source tree whose sidecar is measured")
    ap.add_argument("--compare", type=Path, help="another source tree (a main checkout) measured in the same rounds")
    ap.add_argument("--check", action="store_true", help=f"exit 1 past +{TARGET_MS:g} ms p50 (initialize) or {TARGET_RSS_MB:g} MB peak RSS")
    args = ap.parse_args(argv)
    codex = find_codex_bin()
    if codex is None:
        print("no codex binary (make setup, or CODEX_SIDECAR_TEST_CODEX_BIN)", file=sys.stderr)
        return 2
    for tree in [args.src, *([args.compare] if args.compare else [])]:
        if not compile_tree(tree.resolve()):
            print(f"{tree}: some modules do not compile", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        figures = report(run(args.rounds, Path(tmp), codex, args.src.resolve(), args.compare.resolve() if args.compare else None))
    print("\n".join(table(figures, args.rounds)))
    failed = over_target(figures)
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": args.rounds, **figures}, indent=2) + "\n")
    if args.check and failed:
        print(f"over the target (+{TARGET_MS:g} ms p50, {TARGET_RSS_MB:g} MB peak RSS with lossless)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
