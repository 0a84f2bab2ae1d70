"""Months of use: one lossless session grown to thousands of turns, in process.

    python -m tools.bench_lossless_long [--turns 5000] [--backend sqlite|postgres|both]
                                        [--sessions N] [--json FILE]   (what `make bench-lossless-long` runs)

The engine is driven directly, as the sidecar drives it around every turn
(``assemble`` before the turn, ``after_turn`` with the whole transcript
after it, ``maintain`` in the background), with :class:`engines.testkit.FakeHost`
as the host: its summary model answers at once with the head of each section
it is asked to summarise. No codex and no sidecar process run: 5,000 turns
through the real codex would take hours on this machine, and what grows with
a session's age is the engine's own work (its store, its indexes, the
snapshot it diffs, the summary DAG), which this measures alone.

Each turn is about 1,000 tokens (a prompt of ~150 words, a reply of ~250,
every third turn a shell call whose output is ~400 words), so 5,000 turns
hold about five million tokens of history. Words come from a 2,000-word
vocabulary (so common words match thousands of messages) plus one planted
fact every 50 turns (rare words). ``--sessions N``: the turns go to N sessions
of one agent in one store in turn (turn n to session n mod N), as a user
keeps many conversations; the searches are the first session's.

Reported, per backend:

* the engine's time per turn (``assemble`` + ``after_turn``, wall and CPU
  (the process's and, on PostgreSQL, its connection's server backend's),
  median over windows of turns) early (turns 100-199) and late (the last
  100), and their ratio (the aim: at most 1.5); ``maintain``'s time
  likewise, apart (the sidecar runs it after the turn, off the client's path);
* ``lcm_grep`` (the engine's ``call_tool``, as the model calls it) at the end:
  each query's median of 5 runs (after a warm-up run), p50/p95/max over
  the queries, wall and CPU, of every kind (a word in every message, a common
  word, a planted fact, any-word, regex, ``since``, ``scope: agent``,
  ``sort: newest``); the aim: p95 <= 100 ms;
* the 1-minute load average over the turns, when each timed window began,
  and during the searches (wall time on a shared machine follows it; CPU
  time much less);
* the store's size (the SQLite file with its WAL, or ``pg_database_size``)
  and the process's peak RSS (``ru_maxrss``: the engine and the bench's own
  transcript; the PostgreSQL server's own memory is not in it).

PostgreSQL runs on a throwaway server (``tests/engines/lossless/pgserver.py``,
the programs from ``$CODEX_SIDECAR_TEST_PG_BIN`` as ``make postgres``
installs them). stdout carries the report only; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import trio

from engines import (
    AfterTurnParams,
    AgentMessage,
    AssembleParams,
    AssistantMessage,
    MaintainParams,
    TextBlock,
    ToolCallBlock,
    ToolResultMessage,
    UserMessage,
)
from engines.api import CompleteParams, ToolCallParams, encode_openclaw
from engines.lossless import LosslessEngine
from engines.lossless.messages import content_identity
from engines.testkit import FakeHost

SESSION = "bench-long"
SESSION_KEY = "agent:main:bench-long"


def session_of(k: int) -> tuple[str, str]:
    """Session ``k``'s id and key (one agent, ``main``)."""
    sid = SESSION if k == 0 else f"{SESSION}-{k}"
    return sid, f"agent:main:{sid}"
T0 = 1_780_000_000_000
TURN_MS = 15 * 60_000  # a turn every quarter of an hour: 5,000 turns ~ 52 days
EARLY = (100, 200)
WINDOW = 100
GREP_RUNS = 5
CONFIG = {"summary_max_calls_per_hour": 0, "redact_secrets": True}


def progress(msg: str) -> None:
    print(f"[bench-lossless-long] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the conversation


def vocabulary(rng: random.Random, n: int = 2_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    out: set[str] = set()
    while len(out) < n:
        out.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 9))))
    return sorted(out)


def fact(n: int) -> tuple[str, str]:
    """The fact planted at turn ``n`` (a multiple of 50) and a word of it to search."""
    key = f"zq{n:05d}marker"
    return f"Remember: the deploy token for stage {n} is kept in vault {key}.", key


def turn_messages(n: int, rng: random.Random, vocab: list[str]) -> list[AgentMessage]:
    def text(words: int) -> str:
        # "status" is in every message: a query that matches the whole session.
        return "status " + " ".join(rng.choice(vocab) for _ in range(words))

    ts = T0 + n * TURN_MS
    prompt = f"turn {n}: " + text(150)
    if n % 50 == 0:
        prompt += " " + fact(n)[0]
    out: list[AgentMessage] = [UserMessage(content=prompt, timestamp=ts)]
    if n % 3 == 0:
        call = f"call_{n}"
        out.append(AssistantMessage(content=[ToolCallBlock(id=call, name="exec_command", arguments={"cmd": f"cat notes/{n}.log"})], timestamp=ts + 1_000))
        out.append(ToolResultMessage(tool_call_id=call, tool_name="exec_command", content=[TextBlock(text=text(400))], is_error=False, timestamp=ts + 2_000))
    out.append(AssistantMessage(content=[TextBlock(text=text(250))], timestamp=ts + 30_000))
    return out


def fake_summary(params: CompleteParams) -> str:
    """The head of each excerpt the engine asks to summarise (one section
    per ``### EXCERPT k:`` when batched), like the other benches' fake model."""
    parts = re.split(r"^### EXCERPT (\d+):.*$", params.prompt, flags=re.M)
    if len(parts) == 1:
        return " ".join(params.prompt.split()[8:80])
    return "\n".join(f"### SUMMARY {k}\n" + " ".join(body.split()[:70]) for k, body in zip(parts[1::2], parts[2::2], strict=True))


# ---------------------------------------------------------------- queries


def grep_queries(turns: int, rng: random.Random, vocab: list[str]) -> list[dict[str, Any]]:
    facts = [fact(n)[1] for n in range(50, turns + 1, 50)]
    picks = rng.sample(facts, min(6, len(facts))) if facts else []
    day = 86_400_000
    end = T0 + turns * TURN_MS
    since = time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime((end - 7 * day) / 1000))
    qs: list[dict[str, Any]] = [
        {"query": "status"},  # every message
        {"query": "status", "sort": "newest"},
        {"query": "status", "scope": "agent"},
        {"query": "status", "since": since},
        {"query": "deploy token vault"},  # every 50th turn
    ]
    qs += [{"query": rng.choice(vocab)} for _ in range(6)]  # common words
    qs += [{"query": f"{rng.choice(vocab)} {rng.choice(vocab)} {rng.choice(vocab)}"} for _ in range(4)]  # all words, then any
    qs += [{"query": k} for k in picks]  # rare: one message each
    qs += [{"query": k, "scope": "agent"} for k in picks[:2]]
    qs += [
        {"query": r"zq\d{5}marker", "regex": True},
        {"query": r"stage \d+ is kept", "regex": True},
        {"query": r"nomatch\d{9}", "regex": True},  # no hit: the scan's bound decides
        {"query": r"vault zq0", "regex": True, "since": since},
    ]
    return qs


# ---------------------------------------------------------------- figures


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))]


def store_bytes(engine: LosslessEngine, url: str | None, state_dir: str) -> int:
    if url is None:
        return sum(p.stat().st_size for p in Path(state_dir).rglob("*") if p.is_file() and "lossless" in p.name)
    store = engine.store
    with store._lock:  # noqa: SLF001 (the bench reads the size on the store's own connection)
        row = store.backend.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0])


class ServerCpu:
    """CPU seconds of the PostgreSQL server process that runs the engine's
    statements (its connection's backend, from /proc): with the engine
    process's own, the work a turn or a search costs whatever the machine's
    load makes of wall time. The server's other processes (autovacuum after
    the run's writes, the checkpointer) are left out: they ran at random
    moments of the timed windows and made a search's CPU 22 or 65 ms from
    run to run."""

    def __init__(self, engine: LosslessEngine | None) -> None:
        self.engine = engine
        self.tick = os.sysconf("SC_CLK_TCK")

    def seconds(self) -> float:
        if self.engine is None:
            return 0.0
        pid = self.engine.store.backend.conn.info.backend_pid  # read each time: a dropped connection is opened anew
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / self.tick


def yardstick(sample: list[AgentMessage]) -> tuple[float, float]:
    """Wall and CPU seconds of a fixed piece of the engine's own kind of work
    (identities and encodings of the same messages, every time), run after
    each turn of the two timed windows: how fast the machine was then. On 2
    shared cores another job on the sibling core slows every instruction,
    CPU time included, so a turn ratio is read against this one."""
    c0, t0 = time.process_time(), time.perf_counter()
    for m in sample * 3:  # ~0.5 ms
        content_identity(m)
        encode_openclaw(m)
    return time.perf_counter() - t0, time.process_time() - c0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---------------------------------------------------------------- one run


async def run_backend(turns: int, seed: int, url: str | None, label: str, stride: int = 1, sessions: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    vocab = vocabulary(rng)
    state = tempfile.mkdtemp(prefix="bench-long-")
    host = FakeHost(state)
    host.answer_with(fake_summary)
    config: dict[str, Any] = dict(CONFIG)
    if url is not None:
        config["database_url"] = url
    engine = LosslessEngine(config)
    await engine.bind(host)
    server = ServerCpu(engine if url is not None else None)
    histories: list[list[AgentMessage]] = [[] for _ in range(sessions)]
    per_turn: list[float] = []
    cpu_turn: list[float] = []
    maintain: list[float] = []
    sample = [m for k in range(1, 7) for m in turn_messages(k, random.Random(k), vocab)]
    ruler: dict[str, list[tuple[float, float]]] = {"early": [], "late": []}
    tokens = 0
    started = time.monotonic()
    loads: list[float] = []  # the 1-minute load average, every 100 turns and during the searches
    for n in range(1, turns + 1):
        new = turn_messages(n, rng, vocab)
        history = histories[(n - 1) % sessions]
        sid, key = session_of((n - 1) % sessions)
        if EARLY[1] < n <= turns - WINDOW and n % stride:
            history.extend(new)  # a filler turn: reaches the engine with the next one (--fill-stride)
            tokens += sum(len(str(m)) for m in new) // 4
            continue
        if n % WINDOW == 1:
            loads.append(os.getloadavg()[0])
        s0 = server.seconds()
        tokens += sum(len(str(m)) for m in new) // 4
        # The sidecar's copy of its transcript (the mirror hands out a new
        # list each turn) is the host's work, not the engine's: made before the clock starts.
        asked = AssembleParams(session_id=sid, session_key=key, messages=list(history), prompt=str(getattr(new[0], "content", "")))
        c0 = time.process_time()
        t0 = time.perf_counter()
        await engine.assemble(asked)
        t1 = time.perf_counter()
        history.extend(new)
        await engine.after_turn(
            AfterTurnParams(session_id=sid, session_key=key, session_file="", messages=history, pre_prompt_message_count=len(history) - len(new))
        )
        t2 = time.perf_counter()
        cpu_turn.append(time.process_time() - c0 + server.seconds() - s0)
        await engine.maintain(MaintainParams(session_id=sid, session_key=key, session_file="", reason="turn"))
        t3 = time.perf_counter()
        per_turn.append((t1 - t0) + (t2 - t1))
        maintain.append(t3 - t2)
        if EARLY[0] <= n < EARLY[1] or n > turns - WINDOW:
            ruler["early" if n < EARLY[1] else "late"].append(yardstick(sample))
        if n % 250 == 0 or (stride > 1 and n % (250 * stride) == 0):
            progress(
                f"{label}: turn {n}/{turns}, {sum(map(len, histories))} messages, last {WINDOW} turns {statistics.median(per_turn[-WINDOW:]) * 1000:.1f} ms/turn "
                f"({statistics.median(cpu_turn[-WINDOW:]) * 1000:.1f} ms CPU), {time.monotonic() - started:.0f} s"
            )
    grep_ms: list[float] = []
    grep_cpu_ms: list[float] = []
    kinds: dict[str, list[float]] = {}
    cpu_kinds: dict[str, list[float]] = {}
    turn_loads = list(loads)
    qrng = random.Random(seed + 1)
    queries = grep_queries(turns, qrng, vocab)
    # Each query 1 + GREP_RUNS times (the first warms the caches); a query's
    # time is the median of its runs, so one scheduler stall on a loaded
    # machine does not make a slow query; p95 is over the queries.
    for i, args in enumerate(queries):
        walls: list[float] = []
        cpus: list[float] = []
        for rep in range(1 + GREP_RUNS):
            c0, s0 = time.process_time(), server.seconds()
            t0 = time.perf_counter()
            result = await engine.call_tool(ToolCallParams(session_id=SESSION, session_key=SESSION_KEY, call_id=f"g{rep}-{i}", name="lcm_grep", arguments=args))
            if rep:
                walls.append((time.perf_counter() - t0) * 1000)
                cpus.append((time.process_time() - c0 + server.seconds() - s0) * 1000)
            if result.is_error:
                raise RuntimeError(f"lcm_grep {args}: {result.text}")
        loads.append(os.getloadavg()[0])
        grep_ms.append(statistics.median(walls))
        grep_cpu_ms.append(statistics.median(cpus))
        kind = "regex" if args.get("regex") else ("agent" if args.get("scope") else "text")
        kinds.setdefault(kind, []).append(grep_ms[-1])
        cpu_kinds.setdefault(kind, []).append(grep_cpu_ms[-1])
    status = engine.status(SESSION)
    size = store_bytes(engine, url, state)
    await engine.dispose()
    host.close()
    shutil.rmtree(state, ignore_errors=True)
    early = per_turn[EARLY[0] - 1 : EARLY[1] - 1]
    late = per_turn[-WINDOW:]
    figures: dict[str, Any] = {
        "backend": label,
        "turns": turns,
        "fill_stride": stride,
        "sessions": sessions,
        "messages": sum(map(len, histories)),
        "history_tokens_approx": tokens,
        "turn_ms_early": statistics.median(early) * 1000,
        "turn_ms_late": statistics.median(late) * 1000,
        "turn_ratio": statistics.median(late) / statistics.median(early),
        "turn_ms_late_p95": pct(late, 95) * 1000,
        "turn_cpu_ms_early": statistics.median(cpu_turn[EARLY[0] - 1 : EARLY[1] - 1]) * 1000,
        "turn_cpu_ms_late": statistics.median(cpu_turn[-WINDOW:]) * 1000,
        "turn_cpu_ratio": statistics.median(cpu_turn[-WINDOW:]) / statistics.median(cpu_turn[EARLY[0] - 1 : EARLY[1] - 1]),
        # The machine's own speed, late against early (1.0: as fast; 1.3: 30% slower then).
        "machine_ratio_wall": statistics.median(w for w, _ in ruler["late"]) / statistics.median(w for w, _ in ruler["early"]),
        "machine_ratio_cpu": statistics.median(c for _, c in ruler["late"]) / statistics.median(c for _, c in ruler["early"]),
        "maintain_ms_early": statistics.median(maintain[: len(early)]) * 1000,
        "maintain_ms_late": statistics.median(maintain[-WINDOW:]) * 1000,
        "grep_queries": len(grep_ms),
        "grep_ms_p50": pct(grep_ms, 50),
        "grep_ms_p95": pct(grep_ms, 95),
        "grep_ms_max": max(grep_ms),
        "grep_cpu_ms_p50": pct(grep_cpu_ms, 50),
        "grep_cpu_ms_p95": pct(grep_cpu_ms, 95),
        "grep_by_query": [{"args": q, "ms": w, "cpu_ms": c} for q, w, c in zip(queries, grep_ms, grep_cpu_ms, strict=True)],
        "grep_ms_p95_by_kind": {k: pct(v, 95) for k, v in kinds.items()},
        "grep_cpu_ms_p95_by_kind": {k: pct(v, 95) for k, v in cpu_kinds.items()},
        "load_turns": [min(turn_loads), statistics.median(turn_loads), max(turn_loads)],
        "load_early_late": [turn_loads[EARLY[0] // WINDOW], turn_loads[-1]],  # when each timed window began
        "load_grep": [min(loads[len(turn_loads) :]), max(loads[len(turn_loads) :])],
        "store_mb": size / 2**20,
        "peak_rss_mb": peak_rss_mb(),
        "summaries": status.get("summaries"),
        "summary_calls": len(host.calls),
        "wall_s": time.monotonic() - started,
    }
    progress(f"{label} done: {json.dumps(figures)}")
    return figures


def postgres_url() -> Generator[str, None, None]:
    from tests.engines.lossless.pgserver import PgServer, find_pg_bin

    bindir, _ = find_pg_bin()
    if bindir is None:
        raise SystemExit("PostgreSQL is not installed: make postgres, and set CODEX_SIDECAR_TEST_PG_BIN (the Makefile's target does)")
    server = PgServer(bindir)
    try:
        server.start()
        _, url = server.new_database()
        yield url
    finally:
        server.stop()


def report(results: list[dict[str, Any]]) -> str:
    lines = []
    head = f"{'backend':<9} {'sess':>4} {'turns':>6} {'msgs':>7} {'~tokens':>9} {'turn ms 100-199':>16} {'last 100':>9} {'ratio':>6} {'maint ms':>9} {'grep p50':>9} {'p95':>6} {'max':>6} {'store MB':>9} {'peak RSS MB':>12}"
    lines.append(head)
    for r in results:
        lines.append(
            f"{r['backend']:<9} {r.get('sessions', 1):>4} {r['turns']:>6} {r['messages']:>7} {r['history_tokens_approx']:>9} {r['turn_ms_early']:>16.1f} {r['turn_ms_late']:>9.1f} "
            f"{r['turn_ratio']:>6.2f} {r['maintain_ms_late']:>9.1f} {r['grep_ms_p50']:>9.1f} {r['grep_ms_p95']:>6.1f} {r['grep_ms_max']:>6.1f} {r['store_mb']:>9.1f} {r['peak_rss_mb']:>12.0f}"
        )
    for r in results:
        by_kind = ", ".join(f"{k} {v:.1f} ({r['grep_cpu_ms_p95_by_kind'][k]:.1f})" for k, v in sorted(r["grep_ms_p95_by_kind"].items()))
        ok_turn = "ok" if r["turn_ratio"] <= 1.5 else "OVER 1.5x"
        ok_grep = "ok" if r["grep_ms_p95"] <= 100 else "OVER 100 ms"
        lt, lg = r["load_turns"], r["load_grep"]
        lines.append(
            f"{r['backend']}: time per turn late/early {r['turn_ratio']:.2f}x wall ({ok_turn}), {r['turn_cpu_ratio']:.2f}x CPU "
            f"({r['turn_cpu_ms_early']:.1f} -> {r['turn_cpu_ms_late']:.1f} ms: the engine process's CPU, and its PostgreSQL backend's); "
            f"load average during the turns {lt[0]:.1f}-{lt[2]:.1f} (median {lt[1]:.1f}; {r['load_early_late'][0]:.1f} at turn 100, {r['load_early_late'][1]:.1f} at the last 100)"
        )
        lines.append(
            f"{r['backend']}: the machine itself, by a fixed yardstick run after each timed turn: {r['machine_ratio_wall']:.2f}x wall, "
            f"{r['machine_ratio_cpu']:.2f}x CPU late against early; the turn ratios read against it: "
            f"{r['turn_ratio'] / r['machine_ratio_wall']:.2f}x wall, {r['turn_cpu_ratio'] / r['machine_ratio_cpu']:.2f}x CPU"
        )
        lines.append(
            f"{r['backend']}: lcm_grep p95 {r['grep_ms_p95']:.1f} ms wall ({ok_grep}), {r['grep_cpu_ms_p95']:.1f} ms CPU "
            f"(p50 {r['grep_ms_p50']:.1f} wall, {r['grep_cpu_ms_p50']:.1f} CPU; p95 by kind, wall (CPU): {by_kind}); "
            f"load average during the searches {lg[0]:.1f}-{lg[1]:.1f}; {r['summary_calls']} summary calls, {r['wall_s']:.0f} s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_lossless_long", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=5_000, help="turns of the session (default %(default)s; at least 200)")
    ap.add_argument("--backend", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--seed", type=int, default=35)
    ap.add_argument("--json", metavar="FILE", help="also write every figure to FILE")
    ap.add_argument(
        "--sessions",
        type=int,
        default=1,
        metavar="N",
        help="hand the turns to N sessions of one agent in one store, in turn (default %(default)s); --turns counts them all",
    )
    ap.add_argument(
        "--fill-stride",
        type=int,
        default=1,
        metavar="K",
        help="between turn 200 and the last 100 turns, hand the engine K turns at a time (one assemble/after_turn/maintain); "
        "the timed windows are turn by turn either way (default %(default)s: every turn)",
    )
    args = ap.parse_args(argv)
    if args.turns < 200:
        ap.error("--turns must be at least 200 (the early window is turns 100-199)")
    if args.sessions < 1:
        ap.error("--sessions must be at least 1")
    results: list[dict[str, Any]] = []
    if args.backend in ("sqlite", "both"):
        results.append(trio.run(run_backend, args.turns, args.seed, None, "sqlite", args.fill_stride, args.sessions))
    if args.backend in ("postgres", "both"):
        gen = postgres_url()
        url = next(gen)
        try:
            results.append(trio.run(run_backend, args.turns, args.seed, url, "postgres", args.fill_stride, args.sessions))
        finally:
            gen.close()
    load = os.getloadavg()
    meta: dict[str, Any] = {"python": sys.version.split()[0], "cpus": os.cpu_count(), "load": load}
    print(report(results))
    print(f"(machine: {meta['cpus']} CPUs, load {load[0]:.1f}; in-process engine, FakeHost summary model)")
    if args.json:
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
