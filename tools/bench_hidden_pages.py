"""A page of a long-rebuilt thread's archived turns, this tree against another, paired.

The driver writes one thread's turn archive (``--turns`` archived turns,
each with a user message, a command and its output, and a reply, every one
marked dropped by a rebuild) and runs workers of two source trees on it in
interleaved blocks (ABBA order, one fresh process a block). A worker loads
the thread's hidden turns as a session's opening does (not timed), then
times the hooks' answer to ``thread/turns/list`` pages the sidecar answers
itself (on the event loop in the relay): a newest-first page from a sidecar
cursor in the middle of the archive, and an oldest-first first page, each
``--limit`` turns. Reports each case's median per tree and the median of the
per-block ratios.

    python -m tools.bench_hidden_pages --baseline /work/main [--turns 2000] [--blocks 6] [--pages 40]
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
from types import SimpleNamespace
from typing import Any

HERE = Path(__file__).resolve().parents[1]
THREAD = "01a20000-0000-7000-8000-0000000000b0"


def cases(turns: int, limit: int) -> dict[str, dict[str, Any]]:
    return {
        "desc page mid-archive": {"cursor": f"codex-sidecar:turns:desc:{turns // 2}", "limit": limit},
        "asc first page": {"sortDirection": "asc", "limit": limit},
    }


def write_archive(state_dir: Path, turns: int) -> None:
    from sidecar.history.archive import TurnArchive, archive_path

    archive = TurnArchive(archive_path(state_dir, THREAD))
    for k in range(turns):
        archive.append_turn(
            {
                "id": f"turn-{k:05d}",
                "status": "completed",
                "items": [
                    {"type": "userMessage", "id": f"u{k}", "content": [{"type": "text", "text": f"prompt {k} " + "words " * 40}]},
                    {"type": "commandExecution", "id": f"c{k}", "command": "ls -la", "aggregatedOutput": "output line\n" * 30},
                    {"type": "agentMessage", "id": f"a{k}", "text": f"reply {k} " + "text " * 60},
                ],
            }
        )
    archive.mark_dropped([f"turn-{k:05d}" for k in range(turns)])


def worker(state_dir: str, turns: int, limit: int, pages: int) -> dict[str, list[float]]:
    from protocol import parse
    from sidecar.history.reads import ArchivedTurns
    from sidecar.relay import HANDLED, Message, PendingRequest

    answers: list[bytes] = []
    router = SimpleNamespace(answer_client_request=lambda _id, line: answers.append(line), observed=SimpleNamespace(codex_version=None))
    reads = ArchivedTurns(SimpleNamespace(router=router, spawn=lambda *a: None), state_dir)  # type: ignore[arg-type]
    reads.hidden_for(THREAD)  # loaded as a session opens (a worker thread in the relay)
    out: dict[str, list[float]] = {}
    for name, params in cases(turns, limit).items():
        line = json.dumps({"id": 1, "method": "thread/turns/list", "params": {"threadId": THREAD, **params}}).encode()
        times: list[float] = []
        for i in range(pages + 3):  # three warm-up pages
            msg = Message(parse(line), line, request=PendingRequest(1, "thread/turns/list", 1))
            start = time.perf_counter()
            decision = reads.on_turns_list(msg)
            elapsed = time.perf_counter() - start
            assert decision is HANDLED and answers, "the sidecar answers the page itself"
            answers.clear()
            if i >= 3:
                times.append(elapsed * 1e6)
        out[name] = times
    return out


def run_block(tree: Path, state_dir: Path, turns: int, limit: int, pages: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # This file, run as a script from ``tree``: ``tree`` comes first on sys.path.
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(state_dir), "--turns", str(turns), "--limit", str(limit), "--pages", str(pages)]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="the other source tree (e.g. /work/main)")
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--pages", type=int, default=40)
    parser.add_argument("--worker", metavar="STATE_DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, os.environ.get("PYTHONPATH", str(HERE)))
        print(json.dumps(worker(args.worker, args.turns, args.limit, args.pages)))
        return
    if args.baseline is None:
        parser.error("--baseline is required")
    trees = {"baseline": args.baseline.resolve(), "this": HERE}
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, str(HERE))
        write_archive(Path(tmp), args.turns)
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*.jsonl"))
        print(f"{args.turns} archived turns ({size / 1e6:.1f} MB archive), pages of {args.limit}")
        medians: dict[str, dict[str, list[float]]] = {name: {"baseline": [], "this": []} for name in cases(args.turns, args.limit)}
        for block in range(args.blocks):
            order = ("baseline", "this") if block % 2 == 0 else ("this", "baseline")
            for tree in order:
                for name, times in run_block(trees[tree], Path(tmp), args.turns, args.limit, args.pages).items():
                    medians[name][tree].append(statistics.median(times))
    for name, by_tree in medians.items():
        ratios = [t / b for t, b in zip(by_tree["this"], by_tree["baseline"], strict=True)]
        print(
            f"{name}: p50 baseline {statistics.median(by_tree['baseline']):,.0f} µs, this {statistics.median(by_tree['this']):,.0f} µs, "
            f"ratio this/baseline median {statistics.median(ratios):.4f} (blocks {min(ratios):.4f}-{max(ratios):.4f})"
        )


if __name__ == "__main__":
    main()
