"""What a history rebuild costs Codex itself, with no sidecar in the way.

    python -m tools.bench_rebuild [--rounds N] [--at 14,21,28,38]
                                  [--context-bytes 13345,14677,15653,17951]
                                  (what `make bench-rebuild` runs)

Issue 4 asks for sidecar wall time within 10% of native, and engines that
rebuild the thread's history do not meet it (README, "Wall time"). This
benchmark separates what the rebuild primitive costs Codex from what the
sidecar adds: the client here talks to the real codex directly and does, by
hand, what the sidecar does at a rebuild, on bench-context's scripted 40-turn
session (same prompts, replies, tool calls, workspace, developer
instructions, empty HOME and counting fake model). Three variants:

* ``native``: the session as it is;
* ``revert`` (what the sidecar ships): at each rebuild turn,
  ``thread/revert`` to before the thread's first remaining turn, then the
  turn with a context block of the given size in ``additionalContext`` parts
  of at most 3,000 bytes, exactly as the sidecar sends a rebuild;
* ``fresh`` (the alternative the README weighs): a spare thread is started
  ahead of time with the same ``thread/start`` params, in the background,
  and each rebuild turn goes to it instead, with the same context; the next
  spare is started right away. This is what a "fresh backing thread behind
  the client's thread id" design would cost Codex at best (the id
  translation it needs is not measured, so this is a lower bound).

``--growth N`` measures something else: one thread, N times a turn then a
``thread/revert`` to before it (each revert writes Codex a new rollout
segment), printing the revert's answer time by tens of reverts and, at the
end, what ``thread/resume`` of that thread costs a fresh app-server process
against a thread of the same turns and no revert. It shows what a long-lived
thread's rebuilds cost as they accumulate.

The default rebuild turns and context sizes are those of the budget engine
in ``make bench-context`` (1-based turns 14, 21, 28 and 38; 13-18 KB).
Every rebuilding run is bracketed by native runs and its ratio is its time
per turn over the mean of the native runs right before and after it.

stdout carries the table only; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import trio

from sidecar.projection import CONTEXT_KEY, CONTEXT_PART_BYTES, split_utf8
from tools.bench_context import (
    DEFAULT_SEED,
    DEFAULT_TURNS,
    DEVELOPER_INSTRUCTIONS,
    TURN_TIMEOUT,
    CountingFakeModel,
    Router,
    Turn,
    build_script,
    make_workspace,
)
from tools.client import AppServerClient
from tools.codex_home import codex_env, find_codex_bin, make_codex_home

VARIANTS = ("native", "revert", "fresh")
DEFAULT_AT = (14, 21, 28, 38)
DEFAULT_CONTEXT_BYTES = (13345, 14677, 15653, 17951)


def progress(msg: str) -> None:
    print(f"[bench-rebuild] {msg}", file=sys.stderr, flush=True)


def context_block(script: Sequence[Turn], upto: int, size: int) -> dict[str, dict[str, str]]:
    """A rebuild's context as the sidecar sends it: the conversation so far
    (newest last), cut to ``size`` characters, in ``additionalContext`` parts."""
    lines: list[str] = []
    for turn in script[:upto]:
        lines.append(f"user: {turn.prompt}")
        lines.append(f"assistant: {turn.reply}")
    text = "\n\n".join(lines)[-size:] if size > 0 else ""
    while len(text) < size:  # a short script: repeat it, deterministically
        text = (text + "\n\n" + text)[-size:] if text else "x" * size
    return {
        (CONTEXT_KEY if n == 1 else f"{CONTEXT_KEY}_{n:03d}"): {"kind": "application", "value": part}
        for n, part in enumerate(split_utf8(text, CONTEXT_PART_BYTES), 1)
    }


@dataclasses.dataclass
class Run:
    variant: str
    turn_ms: list[float] = dataclasses.field(default_factory=list)
    op_ms: list[float] = dataclasses.field(default_factory=list)
    """revert: each thread/revert's answer time; fresh: each spare's thread/start (off the turn path)."""
    failed: list[int] = dataclasses.field(default_factory=list)

    @property
    def per_turn(self) -> float:
        return statistics.fmean(self.turn_ms)


class _Codex:
    """codex app-server on its own CODEX_HOME, talking to ``model``, with
    bench-context's workspace, empty HOME and developer instructions."""

    def __init__(self, model: CountingFakeModel, codex_home: Path, root: Path, codex_bin: str) -> None:
        home = make_codex_home(codex_home, model.base_url)
        self.env = codex_env(home, {**os.environ, "HOME": str(root / "home")})
        self.argv = [codex_bin, "app-server", "--listen", "stdio://"]
        self.cwd = str(root / "work")
        self.thread_params = {"cwd": self.cwd, "developerInstructions": DEVELOPER_INSTRUCTIONS}

    @contextlib.asynccontextmanager
    async def client(self) -> AsyncIterator[AppServerClient]:
        async with AppServerClient.spawn(self.argv, env=self.env, cwd=self.cwd, request_timeout=TURN_TIMEOUT) as client:
            await client.initialize(experimental=True, name="codex_sidecar_bench", title="codex-sidecar rebuild bench")
            yield client


async def session(run: Run, script: Sequence[Turn], at: dict[int, int], root: Path, codex_bin: str, index: int) -> list[dict]:
    """Run ``script`` once as ``run.variant`` in ``root/runs/<index>``
    (``root`` holds ``work/`` and ``home/``); return the model's request bodies."""
    router = Router(script)
    run_dir = root / "runs" / f"{index:02d}"
    run_dir.mkdir(parents=True)
    with CountingFakeModel() as model:
        model.script(*([router] * (4 * len(script) + 16)))
        codex = _Codex(model, run_dir / "codex-home", root, codex_bin)
        async with codex.client() as client:
            params = codex.thread_params
            thread_id = await client.start_thread(**params)
            spare: list[str] = []
            spare_ready = trio.Event()

            async def start_spare() -> None:
                nonlocal spare_ready
                t0 = time.perf_counter()
                spare.append(await client.start_thread(**params))
                run.op_ms.append((time.perf_counter() - t0) * 1000)
                spare_ready.set()

            async with trio.open_nursery() as nursery:
                if run.variant == "fresh":
                    nursery.start_soon(start_spare)
                first_turn: str | None = None
                for i, turn in enumerate(script):
                    router.begin(i)
                    extra: dict = {}
                    t0 = time.perf_counter()
                    if i + 1 in at and run.variant != "native":
                        extra["additionalContext"] = context_block(script, i, at[i + 1])
                        if run.variant == "revert" and first_turn is not None:
                            r0 = time.perf_counter()
                            await client.request("thread/revert", {"threadId": thread_id, "beforeTurnId": first_turn})
                            run.op_ms.append((time.perf_counter() - r0) * 1000)
                        elif run.variant == "fresh":
                            await spare_ready.wait()
                            thread_id = spare.pop()
                            spare_ready = trio.Event()
                            nursery.start_soon(start_spare)
                        first_turn = None
                    completed = await client.run_turn(thread_id, turn.prompt, timeout=TURN_TIMEOUT, **extra)
                    run.turn_ms.append((time.perf_counter() - t0) * 1000)
                    if first_turn is None:
                        first_turn = (completed.get("turn") or {}).get("id")
                    if (completed.get("turn") or {}).get("status") != "completed":
                        run.failed.append(i + 1)
                nursery.cancel_scope.cancel()
        return model.requests


def order(rounds: int) -> list[str]:
    """native first, then each rebuilding variant followed by a native run."""
    seq = ["native"]
    for _ in range(rounds):
        for variant in VARIANTS[1:]:
            seq += [variant, "native"]
    return seq


def bracketed(runs: Sequence[Run]) -> dict[str, list[float]]:
    """Per variant: each run's ms/turn over the mean of its neighbouring native runs."""
    out: dict[str, list[float]] = {}
    for k, run in enumerate(runs):
        if run.variant == "native":
            continue
        around = [r.per_turn for r in (runs[k - 1] if k else None, runs[k + 1] if k + 1 < len(runs) else None) if r is not None and r.variant == "native"]
        if around:
            out.setdefault(run.variant, []).append(run.per_turn / statistics.fmean(around))
    return out


def report(runs: Sequence[Run], at: dict[int, int]) -> str:
    ratios = bracketed(runs)
    rows = [["variant", "runs", "ms/turn", "wall", "range", "rebuild turns ms", "op ms", "failed turns"]]
    native_rebuild_turns = [statistics.fmean(r.turn_ms[t - 1] for t in at) for r in runs if r.variant == "native"]
    for variant in VARIANTS:
        mine = [r for r in runs if r.variant == variant]
        if not mine:
            continue
        rb = [statistics.fmean(r.turn_ms[t - 1] for t in at) for r in mine]
        ops = [x for r in mine for x in r.op_ms]
        wall = ratios.get(variant)
        rows.append(
            [
                variant,
                str(len(mine)),
                f"{statistics.fmean(r.per_turn for r in mine):.1f}",
                f"{statistics.fmean(wall):.2f}x" if wall else "1.00x",
                f"{min(wall):.2f}-{max(wall):.2f}x" if wall else "-",
                f"{statistics.fmean(rb):.1f}",
                f"{statistics.fmean(ops):.1f} ({min(ops):.1f}-{max(ops):.1f})" if ops else "-",
                ",".join(str(t) for r in mine for t in r.failed) or "-",
            ]
        )
    legend = [
        f"{len(runs)} runs of {len(runs[0].turn_ms)} turns, codex alone (no sidecar); rebuild turns (1-based): "
        + ", ".join(f"{t} ({b:,} B of context)" for t, b in at.items()) + ".",
        "wall: ms/turn over the mean of the native runs right before and after (mean over runs; range: min-max).",
        "rebuild turns ms: mean wall of the rebuild turns, the revert included (native: the same turns without one, "
        f"{statistics.fmean(native_rebuild_turns):.1f} ms).",
        "op ms: revert: thread/revert's answer time (on the turn path); fresh: the spare's thread/start (in the background).",
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines + [""] + legend)


@dataclasses.dataclass
class Growth:
    revert_ms: list[float] = dataclasses.field(default_factory=list)
    plain_ms: list[float] = dataclasses.field(default_factory=list)
    """Turns of the plain thread (no revert), in order."""
    after_restart_ms: list[float] = dataclasses.field(default_factory=list)
    """Reverts of the reverted thread in the fresh process (a turn before each)."""
    resume_ms: dict[str, float] = dataclasses.field(default_factory=dict)
    """fresh process: thread/resume of the reverted thread, and of a thread with the same turns and no revert."""
    failed: int = 0


async def growth(result: Growth, reverts: int, root: Path, codex_bin: str, seed: int = DEFAULT_SEED) -> None:
    """One thread: ``reverts`` times a scripted turn then ``thread/revert``
    before it; beside it, a plain thread with as many turns. Then a fresh
    process resumes each."""
    script = build_script(max(2, reverts), seed)
    router = Router(script)
    with CountingFakeModel() as model:
        model.script(*([router] * (8 * len(script) + 16)))
        codex = _Codex(model, root / "growth-home", root, codex_bin)
        params = codex.thread_params
        async with codex.client() as client:
            reverted = await client.start_thread(**params)
            plain = await client.start_thread(**params)
            for i in range(reverts):
                turn = script[i % len(script)]
                for thread_id in (reverted, plain):
                    router.begin(i % len(script))
                    t0 = time.perf_counter()
                    completed = await client.run_turn(thread_id, turn.prompt, timeout=TURN_TIMEOUT)
                    if thread_id == plain:
                        result.plain_ms.append((time.perf_counter() - t0) * 1000)
                    if (completed.get("turn") or {}).get("status") != "completed":
                        result.failed += 1
                    if thread_id == reverted:
                        t0 = time.perf_counter()
                        await client.request("thread/revert", {"threadId": reverted, "beforeTurnId": completed["turn"]["id"]})
                        result.revert_ms.append((time.perf_counter() - t0) * 1000)
                if (i + 1) % 10 == 0:
                    progress(f"growth: {i + 1}/{reverts} reverts, last {result.revert_ms[-1]:.0f} ms")
        async with codex.client() as client:
            for label, thread_id in (("plain", plain), ("reverted", reverted), ("plain again", plain), ("reverted again", reverted)):
                t0 = time.perf_counter()
                await client.request("thread/resume", {"threadId": thread_id, **params, "excludeTurns": True})
                result.resume_ms[label] = (time.perf_counter() - t0) * 1000
                await client.request("thread/unsubscribe", {"threadId": thread_id})
            await client.request("thread/resume", {"threadId": reverted, **params, "excludeTurns": True})
            for i in range(3):  # the revert's cost survives the restart
                router.begin(i % len(script))
                completed = await client.run_turn(reverted, script[i % len(script)].prompt, timeout=TURN_TIMEOUT)
                t0 = time.perf_counter()
                await client.request("thread/revert", {"threadId": reverted, "beforeTurnId": completed["turn"]["id"]})
                result.after_restart_ms.append((time.perf_counter() - t0) * 1000)


def growth_report(result: Growth) -> str:
    ms = result.revert_ms
    lines = ["reverts     revert ms (mean)  min-max"]
    for k in range(0, len(ms), 10):
        chunk = ms[k : k + 10]
        lines.append(f"{k + 1:>3}-{k + len(chunk):<3}     {statistics.fmean(chunk):>14.1f}  {min(chunk):.0f}-{max(chunk):.0f}")
    if len(ms) >= 20:  # two windows of ten that do not overlap
        head, tail = ms[:10], ms[-10:]
        slope = (statistics.fmean(tail) - statistics.fmean(head)) / (len(ms) - 10)
        lines.append(f"growth: {slope:+.1f} ms per earlier revert of the thread (first ten to last ten)")
    if len(result.plain_ms) >= 20:
        lines.append(
            f"plain thread's turns (no revert): first ten {statistics.fmean(result.plain_ms[:10]):.1f} ms, "
            f"last ten {statistics.fmean(result.plain_ms[-10:]):.1f} ms"
        )
    r = result.resume_ms
    if r:
        lines.append(
            "thread/resume in a fresh process (excludeTurns, then unsubscribe; each twice, the first one cold): "
            f"plain thread {r['plain']:.0f} / {r['plain again']:.0f} ms, reverted thread {r['reverted']:.0f} / {r['reverted again']:.0f} ms"
        )
    if result.after_restart_ms:
        lines.append("reverts of the reverted thread in that fresh process: " + ", ".join(f"{x:.0f}" for x in result.after_restart_ms) + " ms")
    lines.append(f"{len(ms)} reverts of one thread, codex alone (no sidecar); each after one scripted turn.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_rebuild", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs per rebuilding variant (default %(default)s)")
    ap.add_argument("--turns", type=int, default=DEFAULT_TURNS, help="scripted turns per session (default %(default)s)")
    ap.add_argument("--at", default=",".join(map(str, DEFAULT_AT)), help="1-based rebuild turns (default %(default)s)")
    ap.add_argument(
        "--context-bytes",
        default=",".join(map(str, DEFAULT_CONTEXT_BYTES)),
        help="context size sent at each rebuild turn, one per --at turn (default %(default)s)",
    )
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED, help="script seed (default %(default)s)")
    ap.add_argument("--codex-bin", help="the real codex (default: $CODEX_SIDECAR_TEST_CODEX_BIN or .tools/)")
    ap.add_argument("--growth", type=int, metavar="N", help="instead: N reverts of one thread, the revert's cost as they accumulate")
    args = ap.parse_args(argv)
    if args.growth is not None:
        if args.growth < 1:
            ap.error("--growth must be at least 1")
        codex = args.codex_bin or find_codex_bin()
        if not codex:
            print("real codex not found: run `make setup` or pass --codex-bin", file=sys.stderr)
            return 2
        result = Growth()
        with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
            root = Path(tmp)
            make_workspace(root / "work")
            (root / "home").mkdir()
            trio.run(growth, result, args.growth, root, codex, args.seed)
        print(growth_report(result))
        return 1 if result.failed else 0
    try:
        turns_at = [int(x) for x in args.at.split(",") if x.strip()]
        sizes = [int(x) for x in args.context_bytes.split(",") if x.strip()]
    except ValueError:
        ap.error("--at and --context-bytes take comma-separated integers")
    if len(turns_at) != len(sizes):
        ap.error(f"--at names {len(turns_at)} turns but --context-bytes gives {len(sizes)} sizes")
    if args.rounds < 1 or args.turns < 2:
        ap.error("--rounds must be at least 1 and --turns at least 2")
    if any(not 2 <= t <= args.turns for t in turns_at) or any(s < 0 for s in sizes):
        ap.error(f"rebuild turns must lie in 2..{args.turns} (a rebuild needs an earlier turn) and sizes be >= 0")
    codex_bin = args.codex_bin or find_codex_bin()
    if not codex_bin:
        print("real codex not found: run `make setup` or pass --codex-bin", file=sys.stderr)
        return 2
    at = dict(zip(turns_at, sizes))
    script = build_script(args.turns, args.seed)
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
        root = Path(tmp)
        make_workspace(root / "work")
        (root / "home").mkdir()
        for index, variant in enumerate(order(args.rounds)):
            run = Run(variant)
            t0 = time.monotonic()
            trio.run(session, run, script, at, root, codex_bin, index)
            progress(f"{variant}: {run.per_turn:.1f} ms/turn ({time.monotonic() - t0:.1f} s)")
            runs.append(run)
    print(report(runs, at))
    return 1 if any(r.failed for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
