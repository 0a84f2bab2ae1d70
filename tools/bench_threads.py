"""Many-threads memory: does a long-running sidecar hold what it no longer needs?

    python -m tools.bench_threads [--threads 200] [--turns 3] [--configs identity,budget,lossless]
                                  [--keep-open] [--tracemalloc] [--repo DIR]

OpenClaw's gateway keeps one app-server alive for days across many sessions
and threads. This runs ``--threads`` short threads one after another through
one sidecar per configuration (the real codex, the fake model of
``tools.bench_scale``): each thread is started (``thread_unload_delay_secs
= 0``), gets ``--turns`` short turns, and is unsubscribed, so Codex unloads
it and says ``thread/closed`` (``--keep-open``: never unsubscribed, every
thread stays loaded). Configurations: ``identity`` (``bench-identity``:
the mirrored history unchanged), ``budget`` (``transcript-budget``), ``lossless``; they take turns
a thread at a time, so load hits them alike.

Measured at thread ``--mark`` (50) and at the last, with the sidecar idle
(``sidecar/status``: no thread busy, the closed ones released): the
sidecar's RSS, how many thread sessions it still holds, and with
``--tracemalloc`` (the sidecar started under ``tracemalloc``: slower) the
Python allocations that grew in between, by line. ``--repo DIR`` runs the
sidecar's code from another checkout (a before/after pair in one run).
stdout carries the report; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import trio

from engines.budget import TRANSCRIPT_BUDGET_ENGINE_ID
from engines.lossless import LOSSLESS_ENGINE_ID
from tools import bench_scale
from tools.bench_scale import Options, Session, build_script, drive, proc_status_kb
from tools.codex_home import find_codex_bin
from tools.context_engines import IDENTITY_ID, write_dist_info

CONFIGS: dict[str, str] = {"identity": IDENTITY_ID, "budget": TRANSCRIPT_BUDGET_ENGINE_ID, "lossless": LOSSLESS_ENGINE_ID}
UNLOAD = {"thread_unload_delay_secs": 0}
SNAPSHOT_ENV = "BENCH_THREADS_SNAPSHOTS"
"""A folder: the sidecar runs under tracemalloc and writes a snapshot there on SIGUSR1."""

SITECUSTOMIZE = f'''
import os, signal, tracemalloc
_dir = os.environ.get("{SNAPSHOT_ENV}")
if _dir:
    tracemalloc.start(6)
    _n = [0]
    def _dump(signum, frame):
        import gc
        gc.collect()
        _n[0] += 1
        path = os.path.join(_dir, "snap-%d" % _n[0])
        tracemalloc.take_snapshot().dump(path + ".tmp")
        os.rename(path + ".tmp", path)
    signal.signal(signal.SIGUSR1, _dump)
'''


def progress(msg: str) -> None:
    print(f"[bench-threads] {msg}", file=sys.stderr, flush=True)


class ThreadsSession(Session):
    """One sidecar; a new thread every ``--turns`` turns."""

    def __init__(self, name: str, *args: Any, engine: str, repo: str, snapshots: Path | None) -> None:
        self.engine_id, self.repo, self.snapshots = engine, repo, snapshots
        bench_scale.CONFIGS.setdefault(name, engine)  # Session reads its engine there
        super().__init__(name, *args)
        self.result.engine = engine
        self.marks: list[dict[str, Any]] = []

    def env(self, codex_home: Path) -> tuple[list[str], dict[str, str]]:
        argv, env = super().env(codex_home)
        env["PYTHONPATH"] = os.pathsep.join([str(self.site), self.repo])
        if self.snapshots is not None:
            env[SNAPSHOT_ENV] = str(self.snapshots)
        return argv, env

    tools: list[dict[str, Any]] = []

    async def new_thread(self) -> None:
        assert self.client is not None
        extra = {"dynamicTools": self.tools} if self.tools else {}
        self.thread_id = await self.client.start_thread(cwd=str(self.work), config=UNLOAD, **extra)

    async def close_thread(self, keep_open: bool) -> None:
        assert self.client is not None and self.thread_id is not None
        if keep_open:
            return
        tid = self.thread_id
        mark = self.client.mark()
        await self.client.request("thread/unsubscribe", {"threadId": tid})
        await self.client.wait_notification("thread/closed", lambda p: p.get("threadId") == tid, timeout=60, since=mark)

    async def held(self) -> int:
        assert self.client is not None
        status = await self.client.request("sidecar/status")
        return len(((status or {}).get("lifecycle") or {}).get("threads") or {})

    async def mark_now(self, threads: int, keep_open: bool) -> None:
        """Idle, released, then RSS and (with --tracemalloc) a snapshot."""
        assert self.client is not None
        await self.settle()
        for _ in range(200):
            held = await self.held()
            if keep_open or held <= 1:  # the first thread Session.open started stays
                break
            await trio.sleep(0.05)
        pid = self.client.process.pid
        snap = None
        if self.snapshots is not None:
            before = set(self.snapshots.iterdir())
            os.kill(pid, signal.SIGUSR1)
            for _ in range(600):
                new = set(self.snapshots.iterdir()) - before
                done = [p for p in new if not p.name.endswith(".tmp")]
                if done:
                    snap = str(done[0])
                    break
                await trio.sleep(0.1)
        self.marks.append({"threads": threads, "rssKb": proc_status_kb(pid, "VmRSS"), "held": held, "snapshot": snap})


async def run(sessions: list[ThreadsSession], threads: int, turns: int, mark: int, keep_open: bool) -> None:
    async with contextlib.AsyncExitStack() as stack:
        for s in sessions:
            progress(f"{s.result.name}: starting")
            await s.open(stack)
        for t in range(threads):
            for s in sessions:
                await s.new_thread()
                for j in range(turns):
                    await s.turn(t * turns + j)
                await s.close_thread(keep_open)
                s.forget()
                if t + 1 in (mark, threads):
                    await s.mark_now(t + 1, keep_open)
            if (t + 1) % 25 == 0:
                progress(f"thread {t + 1}/{threads}")


def dynamic_tool(n: int) -> dict[str, Any]:
    """A client tool of about 2 KB of JSON, shaped as OpenClaw's are."""
    props = {f"arg{i}": {"type": "string", "description": f"Argument {i} of tool {n}: " + "what it means and when to use it. " * 3} for i in range(8)}
    return {"type": "function", "name": f"tool_{n}", "description": f"Tool {n}. " + "Does one thing for the agent. " * 8, "inputSchema": {"type": "object", "properties": props, "required": ["arg0"]}}


def growth(first: str, last: str, top: int = 12) -> list[str]:
    a = tracemalloc.Snapshot.load(first).filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    b = tracemalloc.Snapshot.load(last).filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    total = sum(s.size for s in b.statistics("filename")) - sum(s.size for s in a.statistics("filename"))
    lines = [f"    traced growth {total / 1024:+.0f} KiB"]
    for stat in b.compare_to(a, "traceback")[:top]:
        where = " > ".join(f"{'/'.join(Path(f.filename).parts[-2:])}:{f.lineno}" for f in stat.traceback)
        lines.append(f"    {stat.size_diff / 1024:+8.0f} KiB {stat.count_diff:+7d} blocks  {where}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_threads", description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=200)
    ap.add_argument("--turns", type=int, default=3, help="turns a thread (default %(default)s)")
    ap.add_argument("--mark", type=int, default=50, help="the thread of the first reading (default %(default)s)")
    ap.add_argument("--configs", default="identity,budget,lossless", help=f"comma-separated, from: {', '.join(CONFIGS)}")
    ap.add_argument("--tools", type=int, default=0, help="dynamic tools in each thread/start, ~2 KB of JSON each (OpenClaw's: ~60, 118 KB)")
    ap.add_argument("--keep-open", action="store_true", help="never unsubscribe: every thread stays loaded")
    ap.add_argument("--tracemalloc", action="store_true", help="run the sidecars under tracemalloc and print what grew")
    ap.add_argument("--repo", default=None, help="run the sidecar's code from this checkout (default: this one)")
    ap.add_argument("--codex-bin")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    if not names or any(n not in CONFIGS for n in names) or not 1 <= args.mark <= args.threads:
        ap.error("bad --configs or --mark")
    codex_bin = args.codex_bin or find_codex_bin()
    if not codex_bin:
        print("real codex not found: pass --codex-bin", file=sys.stderr)
        return 2
    repo = str(Path(args.repo).resolve()) if args.repo else str(Path(__file__).resolve().parents[1])
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
        root = Path(tmp)
        site = root / "site"
        write_dist_info(site, window=True)
        if args.tracemalloc:
            (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        work = root / "work"
        work.mkdir()
        (work / "README.md").write_text("# notes\n")
        script = build_script(args.threads * args.turns, tool_every=0)
        opts = Options(restart=False, turns=len(script))
        ThreadsSession.tools = [dynamic_tool(n) for n in range(args.tools)]
        sessions = []
        for n in names:
            snaps = root / "snapshots" / n if args.tracemalloc else None
            if snaps is not None:
                snaps.mkdir(parents=True)
            sessions.append(ThreadsSession(n, script, root, site, codex_bin, None, opts, engine=CONFIGS[n], repo=repo, snapshots=snaps))
        started = time.monotonic()
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        drive(sessions, lambda: run(sessions, args.threads, args.turns, args.mark, args.keep_open))
        print(
            f"bench-threads: {args.threads} threads x {args.turns} turns, {args.tools} tools, {'kept open' if args.keep_open else 'unsubscribed'}, "
            f"repo {repo}, load {load} -> {' '.join(f'{x:.1f}' for x in os.getloadavg())}, {time.monotonic() - started:.0f} s"
        )
        for s in sessions:
            if s.result.error:
                print(f"  {s.result.name}: ERROR {s.result.error}")
            m = s.marks
            if len(m) < 2:
                continue
            a, b = m[0], m[-1]
            per = (b["rssKb"] - a["rssKb"]) / (b["threads"] - a["threads"])
            print(
                f"  {s.result.name}: RSS {a['rssKb'] / 1024:.1f} MB at thread {a['threads']} -> {b['rssKb'] / 1024:.1f} MB at {b['threads']} "
                f"({per:+.1f} KB a thread); sessions held {a['held']} -> {b['held']}"
            )
            if a["snapshot"] and b["snapshot"]:
                print("\n".join(growth(a["snapshot"], b["snapshot"])))
    return 0 if all(not s.result.error for s in sessions) else 1


if __name__ == "__main__":
    sys.exit(main())
