"""The request path of one ``turn/start``, this tree against another, paired.

A worker runs a real ``Proxy`` with the lifecycle in front of the fake
app-server (``tests/support/lifecycle.py``), with an engine whose assembly
adds one note a turn (a delta tail projected into ``additionalContext``, no
rebuild), and times each turn's request path: from the client's line handed
to the relay until the rewritten ``turn/start`` is queued for the child (the
child and the engine's own work are not in the window; the assembly is
instant). The driver runs workers of two source trees in interleaved blocks
(ABBA order, one fresh process a block) on the same machine at the same time,
so load affects both alike, and reports each block's median and the median
of the per-block ratios.

    python -m tools.bench_request_path --baseline /work/main [--blocks 8] [--turns 20] [--text-kb 1 64]
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
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def worker(turns: int, text_kb: int) -> list[float]:
    import trio

    from engines import AssembleResult, UserMessage
    from sidecar.relay.shell import Outbox
    from tests.support.lifecycle import make_engine, sidecar, wait_until

    arrived: dict[bytes, float] = {}
    real_put_line = Outbox.put_line

    def put_line(self, line: bytes) -> bool:
        if b'"method":"turn/start"' in line:
            start = line.find(b"bench-marker-")
            if start >= 0:
                arrived.setdefault(line[start : start + 20], time.perf_counter())
        return real_put_line(self, line)

    Outbox.put_line = put_line  # type: ignore[method-assign]

    async def assemble(p):
        note = UserMessage(content=f"retrieved note {len(p.messages)}", timestamp=0)
        return AssembleResult(messages=[*p.messages, note], estimated_tokens=10)

    engine = make_engine()
    engine.set_result("assemble", assemble)
    filler = "lorem ipsum dolor sit amet " * (text_kb * 1024 // 27 + 1)
    out: list[float] = []

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            async with sidecar(Path(tmp), engine, mode="auto") as run:
                thread_id = await run.start_thread()
                await run.turn(thread_id, "the first turn opens the session")
                for i in range(turns + 2):  # two warm-up turns
                    marker = f"bench-marker-{i:07d}".encode()
                    rid, line = run.turn_start_line(thread_id, f"{marker.decode()} {filler[: text_kb * 1024]}")
                    sent = time.perf_counter()
                    await run.send(line)
                    await wait_until(lambda m=marker: m in arrived, what="the turn/start at the child")
                    await run.finish_turn(thread_id, rid)
                    if i >= 2:
                        out.append((arrived[marker] - sent) * 1e6)

    trio.run(main)
    return out


def run_block(tree: Path, turns: int, text_kb: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # This file, run as a script from ``tree``: ``tree`` comes first on sys.path.
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--worker", "--turns", str(turns), "--text-kb", str(text_kb)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="the other source tree (e.g. /work/main)")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--text-kb", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, os.environ.get("PYTHONPATH", str(HERE)))
        print(json.dumps(worker(args.turns, args.text_kb[0])))
        return
    if args.baseline is None:
        parser.error("--baseline is required")
    trees = {"baseline": args.baseline.resolve(), "this": HERE}
    for kb in args.text_kb:
        medians: dict[str, list[float]] = {"baseline": [], "this": []}
        ratios = []
        for block in range(args.blocks):
            order = ("baseline", "this") if block % 2 == 0 else ("this", "baseline")
            for name in order:
                medians[name].append(statistics.median(run_block(trees[name], args.turns, kb)))
            ratios.append(medians["this"][-1] / medians["baseline"][-1])
        print(
            f"text {kb} KB: request path p50 baseline {statistics.median(medians['baseline']):.0f} µs, "
            f"this {statistics.median(medians['this']):.0f} µs, ratio this/baseline median {statistics.median(ratios):.3f} "
            f"(blocks: {', '.join(f'{r:.2f}' for r in ratios)})"
        )


if __name__ == "__main__":
    main()
