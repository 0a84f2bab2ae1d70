"""Re-record ``fixtures/`` from the real codex and the fake model (``make fixtures``).

Each scenario of ``tools.scenarios`` runs with the sidecar in front of the
real codex, exactly as OpenClaw launches it, with ``CODEX_SIDECAR_RECORD``
set, so the fixture is what crossed the sidecar's wires. A scenario with
several app-server processes (resume) writes one file per process,
``<name>-<n>.jsonl``. ``fixtures/README.md`` gets a line per fixture.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import trio

from sidecar.record import read_recording
from tools.codex_home import codex_env, find_codex_bin
from tools.fake_model import FakeModel
from tools.scenarios import SCENARIOS, connector, prepare_codex_home, run_scenario

HEADER = """# Fixtures

Sessions recorded through the sidecar (`--record`) from the real codex
app-server 0.169.0 and the project's fake model (`tools/fake_model.py`), by
`make fixtures` (`tools/record_fixtures.py`, scenarios in `tools/scenarios.py`).
Each line of a file is `{"seq","t","dir","frame"}`; `dir` names the wire
(`client>codex`, `codex>client`, ...). `tests/test_replay.py` plays each one
back through the sidecar with `tools/replay.py` standing in for codex.
Paths, thread ids and timestamps are the real ones of the recording run.

| fixture | frames | how it was made |
|---|---|---|
"""


async def record_one(name: str, codex_bin: str, out_dir: Path) -> list[Path]:
    scenario = SCENARIOS[name]
    for old in out_dir.glob(f"{name}*.jsonl"):
        old.unlink()
    with tempfile.TemporaryDirectory(prefix=f"fixture-{name}-") as tmp, FakeModel() as model:
        tmp_path = Path(tmp)
        home = prepare_codex_home(scenario, tmp_path / "codex-home", model)
        workdir = tmp_path / "work"
        workdir.mkdir()
        files: list[Path] = []

        def env_for(n: int) -> dict[str, str]:
            path = out_dir / (f"{name}-{n}.jsonl" if scenario.needs_connect else f"{name}.jsonl")
            files.append(path)
            return codex_env(home, {**os.environ, "CODEX_SIDECAR_CODEX_BIN": codex_bin, "CODEX_SIDECAR_RECORD": str(path)})

        connect = connector([sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"], env=env_for, cwd=workdir)
        await run_scenario(scenario, connect, model, workdir)
    for f in files:
        os.chmod(f, 0o644)  # fixtures are shared test data, unlike live recordings
    return files


async def record_all(codex_bin: str, out_dir: Path, names: list[str]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:
        files = await record_one(name, codex_bin, out_dir)
        for f in files:
            n = len(list(read_recording(f)))
            rows.append(f"| `{f.name}` | {n} | {SCENARIOS[name].description} |")
            print(f"recorded {f} ({n} frames)", file=sys.stderr)
    if set(names) == set(SCENARIOS):
        (out_dir / "README.md").write_text(HEADER + "\n".join(rows) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codex-bin", default=find_codex_bin())
    ap.add_argument("--out", default="fixtures", type=Path)
    ap.add_argument("names", nargs="*", default=sorted(SCENARIOS))
    args = ap.parse_args()
    if not args.codex_bin:
        sys.exit("codex binary not found: run `make setup` or pass --codex-bin")
    trio.run(record_all, os.path.abspath(args.codex_bin), args.out.resolve(), args.names)


if __name__ == "__main__":
    main()
