"""Scale benchmark: does a turn cost the same at turn 600 as at turn 10?

    python -m tools.bench_scale [--turns 600] [--configs native,identity,window,budget]
                                [--home real|empty] [--json FILE] [--keep DIR]
                                [--py-spy DIR]
                                (what `make bench-scale` runs)

``--turns`` short turns, back to back, on ONE thread, through the real codex
and the fake model (``tools.fake_model``), in four configurations open side
by side in one run:

* ``native``: the client talks to codex itself (no sidecar);
* ``identity``: the sidecar with ``bench-identity`` (assembles the mirrored
  history unchanged: it never drops anything, so never rebuilds);
* ``window``: the sidecar with ``bench-window`` (the newest ``--window``
  messages, 40 by default: it drops old content every turn, so the sidecar
  rebuilds whenever the dropped part exceeds its stale slack);
* ``budget``: the sidecar with the built-in ``transcript-budget`` at the
  sidecar's default token budget (it counts the transcript with the o200k
  tokenizer every turn; issue 34's late-turn check, 1.3x native);
* ``lossless`` (only when ``--configs`` names it): the sidecar with the
  built-in ``lossless`` engine, its store in the run's state dir, at its
  defaults but for ``tools.bench_lossless``'s summary model and no hourly
  summary cap (:func:`tools.lossless_table.engine_table`); the fake model
  answers its summary calls as ``make bench-lossless`` does
  (:class:`tools.fake_model.Rules`). A hand-over also waits for its
  background summary calls to be answered. Issue 35's late-turn check:
  1.5x native.

The sidecar runs its defaults (projection ``delta``, ``rebuild = "fresh"``).
Codex runs with the machine's real ``HOME`` (``--home real``, the default):
it snapshots the user's login shell at every session start, and the fresh
rebuild starts a Codex session per rebuild, so the user's dotfiles are part
of what a rebuild costs. ``CODEX_HOME`` is always a temporary folder (config
pointing at the fake model; no account).

The configurations take turns in blocks (``--block`` turns back to back,
10 by default; the order rotates every block), so the machine's noise hits
all of them alike and 9 turns in 10 follow one of the same thread at once,
as a client's next turn would. At a hand-over the session that stops is let
settle (the sidecar reports the thread idle, then 0.1 s), so its background
work does not land in another configuration's timed turns.

Measured, all from the run itself:

* turn time: ``turn/start`` sent -> ``turn/completed`` received, as the
  client sees it; medians of the first and the last ``--edge`` turns (30),
  and the late medians over native's late median (same run, same blocks);
* where a turn's time goes: ``turn/start`` -> the turn's first model request
  (codex and the sidecar before the model), the model's part, the last
  model response -> ``turn/completed``; the sidecar's hold of ``turn/start``
  (its inspect log's ``holdMs``); CPU per turn of the sidecar process and of
  codex (``/proc``, per block);
* memory: the sidecar's peak RSS (``VmHWM``) and codex's RSS (``VmRSS`` of
  the codex binary) every ``--sample-every`` turns and at the end;
* the state dir: every file's size every ``--sample-every`` turns (50), so
  bytes per turn are shown per window, by folder (``sessions`` mirror,
  ``turns`` archive, ``inspect`` log, ``backing`` map);
* rebuilds: ``sidecar/status`` ``lifecycle`` ``rebuilds``;
* Codex session starts (``--session-starts`` each, 0 = skip): ``thread/start``
  to its answer, and what the session's login-shell snapshot costs (the
  time until its file appears under ``CODEX_HOME/shell_snapshots``, and
  codex's CPU including its reaped children), with the real HOME and with an
  empty one, on a codex of their own.

``--py-spy DIR`` also samples each sidecar with py-spy during its first and
its last ``--edge`` turns and prints the top functions (py-spy must be on
PATH or beside the Python running this).

stdout carries the report only; progress goes to stderr. No figure is
assumed: everything printed is read from this run's processes and files.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from engines.budget import TRANSCRIPT_BUDGET_ENGINE_ID
from engines.lossless import LOSSLESS_ENGINE_ID
from tools.bench_context import Router, Turn, process_cpu, reported_rebuilds
from tools.client import AppServerClient, RpcError, ServerGone
from tools.codex_home import codex_env, find_codex_bin, make_codex_home
from tools.context_engines import DIST_NAME, IDENTITY_ID, WINDOW_ID, write_dist_info
from tools.fake_model import FakeModel, Rules, request_prompt
from tools.lossless_table import engine_table

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIGS: dict[str, str | None] = {
    "native": None,
    "identity": IDENTITY_ID,
    "window": WINDOW_ID,
    "budget": TRANSCRIPT_BUDGET_ENGINE_ID,
    "lossless": LOSSLESS_ENGINE_ID,
}
"""Configuration name -> the sidecar's engine id (None: codex alone)."""
DEFAULT_CONFIGS = ("native", "identity", "window", "budget")
"""What runs without ``--configs`` (``make bench-scale``)."""

DEFAULT_TURNS = 600
DEFAULT_EDGE = 30
DEFAULT_BLOCK = 10
DEFAULT_SAMPLE_EVERY = 50
DEFAULT_WINDOW = 40
DEFAULT_TOOL_EVERY = 10
DEFAULT_SEED = 17
SETTLE_SECONDS = 0.1
TURN_TIMEOUT = 120.0

TARGET_IDENTITY = 1.10
TARGET_WINDOW = 2.0
TARGET_BUDGET = 1.3
TARGET_LOSSLESS = 1.5
"""Issue 35's bound on the engine's growth from turn 100 to turn 5,000."""
AIM_WINDOW = 1.2
TARGET_PEAK_RSS_MB = 100.0
CONSTANT_BYTES = 1.25
"""State-dir bytes per turn count as constant when the last window's are
at most this times an early window's."""


def progress(msg: str) -> None:
    print(f"[bench-scale] {msg}", file=sys.stderr, flush=True)


# ======================================================================
# The script: short turns, a shell command every --tool-every turns

_SUBJECTS = ["the retry budget", "the cache key", "the release note", "the log format", "the pool size",
             "the test fixture", "the config default", "the API limit", "the job queue", "the migration"]
_ASKS = ["Note {n}: remember that {s} is {v}.", "Step {n}: set {s} to {v} and confirm.",
         "Item {n}: {s} should be {v}. OK?", "Turn {n}: what did we say about {s}? It is {v} now."]
_REPLIES = ["Noted: {s} is {v} (item {n}).", "Done. {s} is now {v}; I will keep it in mind for the next steps.",
            "Confirmed, {s} = {v}. Nothing else changes.", "Understood: item {n} sets {s} to {v}. That is consistent with the earlier notes."]


def build_script(turns: int = DEFAULT_TURNS, seed: int = DEFAULT_SEED, tool_every: int = DEFAULT_TOOL_EVERY) -> list[Turn]:
    """``turns`` short deterministic turns (a prompt and a one- or
    two-sentence reply, under 200 characters each); every ``tool_every``-th
    turn (0 = none) first runs ``echo`` through Codex's shell tool."""
    rng = random.Random(seed)
    script = []
    for i in range(turns):
        n, s, v = i + 1, rng.choice(_SUBJECTS), rng.randint(2, 999)
        prompt = rng.choice(_ASKS).format(n=n, s=s, v=v)
        reply = rng.choice(_REPLIES).format(n=n, s=s, v=v)
        command = f"echo item-{n}" if tool_every and i % tool_every == tool_every // 2 else None
        script.append(Turn(prompt, reply, command))
    return script


def lossless_table() -> str:
    """The ``lossless`` configuration's ``[engines.lossless]`` table:
    ``make bench-lossless``'s (its summary model, no hourly cap), the
    engine's defaults otherwise."""
    return engine_table()[0]


# ======================================================================
# The fake model, keeping timings instead of bodies


@dataclasses.dataclass
class ModelRequest:
    turn: int
    kind: str
    items: int  # input items of the request
    arrived: float  # perf_counter when its HTTP request line was read
    done: float | None = None  # perf_counter when its response was written


class ScaleRouter(Router):
    """:class:`Router`, and a summary prompt (the ``lossless`` engine's
    ``host.complete`` calls) answered as :class:`tools.fake_model.Rules`
    answers it (the head of each block), as no turn's request (turn -1,
    kind ``summary``)."""

    _rules = Rules()

    def __call__(self, body: dict) -> Any:
        kind, step = self._rules.decide(body) if Rules.SUMMARISE.match(request_prompt(body)[0]) else (None, None)
        if kind != "summary":
            return super().__call__(body)
        with self._lock:
            self.request_turns.append(-1)
            self.kinds.append("summary")
        return step


class ScaleModel(FakeModel):
    """:class:`FakeModel` answering with a :class:`Router` and keeping, per
    request, its turn, its size in items and its times, not its body (600
    turns of native bodies would be hundreds of MB in this process)."""

    def __init__(self, router: Router) -> None:
        super().__init__()
        self.router = router
        self.log: list[ModelRequest] = []
        self._by_index: dict[int, ModelRequest] = {}
        self._local = threading.local()

    def _note_http(self, method: str, path: str) -> None:
        self._local.arrived = time.perf_counter()
        super()._note_http(method, path)

    def _take(self, body: dict) -> tuple[int, Any]:
        arrived = getattr(self._local, "arrived", time.perf_counter())
        with self._lock:
            index = next(self._counter)
            self._in_flight += 1
            self._lock.notify_all()
        with self._lock:  # one request at a time through the router, so its last turn and kind are this request's
            step = self.router(body)
            record = ModelRequest(self.router.request_turns[-1], self.router.kinds[-1], len(body.get("input") or []), arrived)
        with self._lock:
            self.log.append(record)
            self._by_index[index] = record
        return index, step

    def _done(self, index: int) -> None:
        with self._lock:
            record = self._by_index.pop(index, None)
            if record is not None:
                record.done = time.perf_counter()
        super()._done(index)


# ======================================================================
# /proc readings


def proc_status_kb(pid: int, field: str) -> int | None:
    """``VmRSS``, ``VmHWM``, ... of ``pid`` in KiB (None: gone, or no /proc)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{p}/task"):
                with contextlib.suppress(OSError, ValueError):
                    with open(f"/proc/{p}/task/{task}/children") as f:
                        kids = [int(x) for x in f.read().split()]
                    out += kids
                    todo += kids
    return out


def codex_pid(root: int) -> int | None:
    """The codex binary below ``root`` (itself included): the process whose
    executable is named ``codex`` (the npm launcher is node), even if the
    file was replaced or deleted since it started."""
    for pid in [root, *descendants(root)]:
        with contextlib.suppress(OSError):
            if os.path.basename(os.readlink(f"/proc/{pid}/exe")).removesuffix(" (deleted)") == "codex":
                return pid
    return None


def dir_sizes(root: Path) -> dict[str, int]:
    """Every file under ``root``: relative path -> bytes."""
    out: dict[str, int] = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            with contextlib.suppress(OSError):
                out[str(path.relative_to(root))] = path.stat().st_size
    return out


def by_folder(files: dict[str, int]) -> dict[str, int]:
    """Bytes per top-level folder (``sessions``, ``turns``, ``inspect``, ``backing``, ...)."""
    out: dict[str, int] = {}
    for rel, size in files.items():
        top = rel.split(os.sep, 1)[0] if os.sep in rel else "."
        out[top] = out.get(top, 0) + size
    return out


# ======================================================================
# One configuration's session


@dataclasses.dataclass
class Sample:
    turn: int  # turns done when sampled
    files: dict[str, int]  # state dir: relative path -> bytes ({} natively)
    sidecar_rss_kb: int | None
    sidecar_hwm_kb: int | None
    codex_rss_kb: int | None
    codex_home_bytes: int | None = None  # CODEX_HOME: Codex's own rollouts, logs and state databases
    rollouts: int | None = None  # rollout files under CODEX_HOME/sessions (a Codex thread each)

    @property
    def state_bytes(self) -> int:
        return sum(self.files.values())


@dataclasses.dataclass
class ConfigResult:
    name: str
    engine: str | None
    walls: list[float] = dataclasses.field(default_factory=list)
    pre: list[float | None] = dataclasses.field(default_factory=list)  # turn/start -> first model request
    model: list[float | None] = dataclasses.field(default_factory=list)  # first request -> last response written
    post: list[float | None] = dataclasses.field(default_factory=list)  # last response -> turn/completed
    items: list[int | None] = dataclasses.field(default_factory=list)  # input items of the turn's last request
    cpu_blocks: list[tuple[int, int, float, float]] = dataclasses.field(default_factory=list)  # (first turn, turns, sidecar s, codex s)
    samples: list[Sample] = dataclasses.field(default_factory=list)
    hold_ms: list[float | None] = dataclasses.field(default_factory=list)
    rebuilt: list[bool] = dataclasses.field(default_factory=list)
    rebuilds: int | None = None
    backing: dict | None = None
    sidecar_hwm_kb: int | None = None
    codex_rss_end_kb: int | None = None
    requests: int = 0
    compactions: int = 0
    failed_turns: list[int] = dataclasses.field(default_factory=list)
    error: str | None = None
    startup: float | None = None
    profiles: dict[str, str] = dataclasses.field(default_factory=dict)  # "early"/"late" -> py-spy raw file
    restart: dict[str, float | None] = dataclasses.field(default_factory=dict)  # after the run: a new process resumes the thread

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.walls)


class Session:
    """One configuration: its own fake model, CODEX_HOME, state dir and
    app-server (the sidecar, or codex itself), one thread, driven a turn at
    a time so the configurations can take turns."""

    def __init__(self, name: str, script: Sequence[Turn], root: Path, site: Path, codex_bin: str, home: Path | None, opts: "Options") -> None:
        self.result = ConfigResult(name, CONFIGS[name])
        self.script, self.site, self.codex_bin, self.home = script, site, codex_bin, home
        self.window, self.settings = opts.window, opts.settings
        self.dir = root / "runs" / name
        self.dir.mkdir(parents=True)
        self.state = self.dir / "state"
        self.work = root / "work"
        self.router = ScaleRouter(script)
        self.model: ScaleModel | None = None
        self.client: AppServerClient | None = None
        self.thread_id: str | None = None
        self._cpu: tuple[float, float] | None = None

    @property
    def sidecar(self) -> bool:
        return self.result.engine is not None

    def env(self, codex_home: Path) -> tuple[list[str], dict[str, str]]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
        base["XDG_CONFIG_HOME"] = str(self.dir / "xdg-config")  # no user config for codex-sidecar
        if self.home is not None:
            base["HOME"] = str(self.home)
        if not self.sidecar:
            return [self.codex_bin, "app-server", "--listen", "stdio://"], codex_env(codex_home, base)
        config = self.dir / "sidecar.toml"
        config.write_text(f"[engines.{json.dumps(WINDOW_ID)}]\nwindow = {self.window}\n" + (lossless_table() if self.result.engine == LOSSLESS_ENGINE_ID else ""))
        base.update(
            {
                "CODEX_SIDECAR_CODEX_BIN": self.codex_bin,
                "CODEX_SIDECAR_ENGINE": str(self.result.engine),
                "CODEX_SIDECAR_ENGINE_ALLOWLIST": DIST_NAME,
                "CODEX_SIDECAR_STATE_DIR": str(self.state),
                "CODEX_SIDECAR_CONFIG": str(config),
                "CODEX_SIDECAR_LOG_LEVEL": "warning",
                "CODEX_SIDECAR_PROJECTION_MODE": "delta",
                **{f"CODEX_SIDECAR_{k.upper()}": v for k, v in self.settings.items()},
                "PYTHONPATH": os.pathsep.join([str(self.site), REPO] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])),
            }
        )
        return [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"], codex_env(codex_home, base)

    async def open(self, stack: contextlib.AsyncExitStack) -> None:
        self.model = stack.enter_context(ScaleModel(self.router))
        codex_home = make_codex_home(self.dir / "codex-home", self.model.base_url)
        argv, env = self.env(codex_home)
        spawned = time.perf_counter()
        self.client = client = await stack.enter_async_context(
            AppServerClient.spawn(argv, env=env, cwd=str(self.work), request_timeout=TURN_TIMEOUT)
        )
        await client.initialize(experimental=True, name="codex_sidecar_bench", title="codex-sidecar scale bench")
        if self.sidecar:
            status = await client.request("sidecar/status")
            lc = status.get("lifecycle") if isinstance(status, dict) else None
            seen = ((lc or {}).get("engine") or {}).get("id") if isinstance(lc, dict) else None
            if seen != self.result.engine:
                raise RpcError(0, f"the sidecar did not load engine {self.result.engine!r} (lifecycle engine: {seen!r})")
        self.thread_id = await client.start_thread(cwd=str(self.work))
        self.result.startup = time.perf_counter() - spawned

    async def turn(self, i: int) -> None:
        client, result = self.client, self.result
        assert client is not None and self.thread_id is not None and self.model is not None
        self.router.begin(i)
        first_request = len(self.model.log)
        mark = client.mark()
        t0 = time.perf_counter()
        answer = await client.request(
            "turn/start", {"threadId": self.thread_id, "input": [{"type": "text", "text": self.script[i].prompt, "text_elements": []}]}
        )
        turn_id = answer["turn"]["id"]
        done = await client.wait_notification(
            "turn/completed",
            lambda p: p.get("threadId") == self.thread_id and (p.get("turn") or {}).get("id") == turn_id,
            timeout=TURN_TIMEOUT,
            since=mark,
        )
        t1 = time.perf_counter()
        result.walls.append(t1 - t0)
        if (done.get("turn") or {}).get("status") != "completed":
            result.failed_turns.append(i + 1)
        mine = [r for r in self.model.log[first_request:] if r.turn == i]
        if mine and mine[-1].done is not None:
            result.pre.append(mine[0].arrived - t0)
            result.model.append(mine[-1].done - mine[0].arrived)
            result.post.append(t1 - mine[-1].done)
            result.items.append(mine[-1].items)
        else:
            result.pre.append(None)
            result.model.append(None)
            result.post.append(None)
            result.items.append(None)

    def forget(self) -> None:
        """Drop what the client kept of past frames (nobody waits now): the
        client's own memory and scans stay flat over the run."""
        if self.client is not None:
            self.client.received.clear()
            self.client.sent.clear()
            self.client.notifications.clear()

    async def settle(self) -> None:
        """Up to 5 s (60 s while the engine's summary calls run) until the
        sidecar has finalised the last turn and every completion call its
        host started has been answered by the fake model."""
        if not self.sidecar or self.client is None or self.model is None:
            return
        for tick in range(600):
            status = await self.client.request("sidecar/status")
            lc = (status or {}).get("lifecycle") or {}
            busy = ((lc.get("threads") or {}).get(self.thread_id) or {}).get("busy")
            calls = (lc.get("host") or {}).get("completions") or {}
            started = int(calls.get("calls") or 0) - int(calls.get("failed") or 0)
            answered = sum(1 for r in list(self.model.log) if r.kind == "summary" and r.done is not None)
            if answered >= started and self.model.in_flight == 0 and (not busy or tick >= 50):
                return
            await trio.sleep(0.1)

    def cpu_mark(self) -> None:
        assert self.client is not None
        self._cpu = process_cpu(self.client.process.pid)

    def cpu_block(self, first: int, turns: int) -> None:
        assert self.client is not None
        after = process_cpu(self.client.process.pid)
        if self._cpu is None or after is None:
            return
        own, below = after[0] - self._cpu[0], after[1] - self._cpu[1]
        sidecar, codex = (own, below) if self.sidecar else (0.0, own + below)
        self.result.cpu_blocks.append((first, turns, sidecar, codex))

    def sample(self, turns_done: int) -> None:
        assert self.client is not None
        pid = self.client.process.pid
        codex = codex_pid(pid)
        home = dir_sizes(self.dir / "codex-home")
        self.result.samples.append(
            Sample(
                turn=turns_done,
                files=dir_sizes(self.state) if self.sidecar and self.state.exists() else {},
                sidecar_rss_kb=proc_status_kb(pid, "VmRSS") if self.sidecar else None,
                sidecar_hwm_kb=proc_status_kb(pid, "VmHWM") if self.sidecar else None,
                codex_rss_kb=None if codex is None else proc_status_kb(codex, "VmRSS"),
                codex_home_bytes=sum(home.values()),
                rollouts=sum(1 for k in home if k.startswith("sessions" + os.sep) and k.endswith(".jsonl")),
            )
        )

    async def close(self) -> None:
        """The end-of-run readings: status, peak RSS, the inspect log."""
        result, client = self.result, self.client
        assert client is not None
        pid = client.process.pid
        codex = codex_pid(pid)
        result.codex_rss_end_kb = None if codex is None else proc_status_kb(codex, "VmRSS")
        if self.model is not None:
            result.requests = len(self.model.log)
            result.compactions = sum(1 for r in self.model.log if r.kind == "compaction")
        if not self.sidecar:
            return
        await self.settle()
        status = await client.request("sidecar/status")
        lc = (status or {}).get("lifecycle") or {}
        result.rebuilds = reported_rebuilds(lc, self.thread_id)
        result.backing = lc.get("backingThreads") if isinstance(lc.get("backingThreads"), dict) else None
        result.sidecar_hwm_kb = proc_status_kb(pid, "VmHWM")
        result.hold_ms, result.rebuilt = read_inspect(self.state / "inspect")


async def restart(session: Session) -> None:
    """After the run: a new app-server process (the sidecar on the same
    state dir, or codex alone) on the same CODEX_HOME resumes the thread and
    runs one more turn, as OpenClaw does for every ``--local`` turn (it
    kills the process tree after each). Times: spawn -> ``initialize``
    answered, ``thread/resume`` -> its answer, and the turn."""
    result = session.result
    if session.thread_id is None or not result.ok:
        return
    turn = len(session.script) - 1
    with ScaleModel(session.router) as model:
        codex_home = make_codex_home(session.dir / "codex-home", model.base_url)  # the new model's port; the rest is kept
        argv, env = session.env(codex_home)
        t0 = time.perf_counter()
        async with AppServerClient.spawn(argv, env=env, cwd=str(session.work), request_timeout=TURN_TIMEOUT) as client:
            await client.initialize(experimental=True, name="codex_sidecar_bench", title="codex-sidecar scale bench")
            t1 = time.perf_counter()
            await client.request("thread/resume", {"threadId": session.thread_id})
            t2 = time.perf_counter()
            session.router.begin(turn)
            done = await client.run_turn(session.thread_id, session.script[turn].prompt, timeout=TURN_TIMEOUT)
            t3 = time.perf_counter()
            ok = (done.get("turn") or {}).get("status") == "completed"
            (session.dir / "restart-stderr.log").write_bytes(bytes(client.stderr_bytes))
    result.restart = {"initializeMs": (t1 - t0) * 1000, "resumeMs": (t2 - t1) * 1000, "turnMs": (t3 - t2) * 1000 if ok else None}


async def restart_all(sessions: Sequence[Session]) -> None:
    for s in sessions:
        try:
            await restart(s)
        except (ServerGone, RpcError, TimeoutError, OSError) as exc:
            s.result.restart = {"error": f"{type(exc).__name__}: {exc}"}  # type: ignore[dict-item]


def read_inspect(folder: Path) -> tuple[list[float | None], list[bool]]:
    """Per turn, in order, from the thread's inspect log (the file with the
    most turn records): ``holdMs`` and whether the turn rebuilt."""
    best: list[dict] = []
    for path in folder.glob("*.jsonl") if folder.exists() else []:
        records = []
        for line in path.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict) and "turnId" in record:
                    records.append(record)
        if len(records) > len(best):
            best = records
    holds = [r.get("holdMs") if isinstance(r.get("holdMs"), (int, float)) else None for r in best]
    return holds, [bool(r.get("rebuilt")) for r in best]


# ======================================================================
# Running the configurations side by side


class PySpy:
    """py-spy recording one process (raw collapsed stacks), stopped with SIGINT."""

    def __init__(self, exe: str, pid: int, out: Path) -> None:
        self.out = out
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--rate", "250", "--format", "raw", "--nonblocking", "--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def find_py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def block_schedule(configs: int, turns: int, block: int) -> list[tuple[int, int, int]]:
    """``(config, first turn, turns)`` in the order they run: blocks of
    ``block`` turns, the configurations' order rotating every block
    (A B C, B C A, C A B, ...) so none always follows the same one."""
    out = []
    for k, first in enumerate(range(0, turns, block)):
        for j in range(configs):
            out.append(((j + k) % configs, first, min(block, turns - first)))
    return out


@dataclasses.dataclass
class Options:
    turns: int = DEFAULT_TURNS
    edge: int = DEFAULT_EDGE
    block: int = DEFAULT_BLOCK
    sample_every: int = DEFAULT_SAMPLE_EVERY
    window: int = DEFAULT_WINDOW
    py_spy: Path | None = None
    settings: dict[str, str] = dataclasses.field(default_factory=dict)
    """Sidecar settings for both sidecar configurations (``--sidecar-setting``)."""
    restart: bool = True


async def run_sessions(sessions: Sequence[Session], opts: Options) -> None:
    spy_exe = find_py_spy() if opts.py_spy else None
    if opts.py_spy and spy_exe is None:
        progress("py-spy not found: no profiles (pip install py-spy)")
    spies: dict[str, PySpy] = {}
    edge = edge_of(opts.turns, opts.edge)
    async with contextlib.AsyncExitStack() as stack:
        for s in sessions:
            progress(f"{s.result.name}: starting")
            await s.open(stack)
            s.sample(0)
        last: Session | None = None
        next_sample = {s.result.name: opts.sample_every for s in sessions}
        try:
            for index, first, count in block_schedule(len(sessions), opts.turns, opts.block):
                s = sessions[index]
                if last is not None and last is not s:
                    await last.settle()
                    await trio.sleep(SETTLE_SECONDS)
                s.forget()
                name = s.result.name
                phase = "early" if first < edge else "late" if first + count > opts.turns - edge else None
                if spy_exe and s.sidecar and phase and f"{name}/{phase}" not in spies:
                    out = opts.py_spy / f"{name}-{phase}.txt"
                    spies[f"{name}/{phase}"] = PySpy(spy_exe, s.client.process.pid, out)
                    s.result.profiles[phase] = str(out)
                    await trio.sleep(0.3)  # py-spy attaches
                s.cpu_mark()
                for i in range(first, first + count):
                    await s.turn(i)
                s.cpu_block(first, count)
                done = first + count
                if f"{name}/early" in spies and done >= edge:
                    spies.pop(f"{name}/early").stop()
                if done >= next_sample[name] or done == opts.turns:
                    await s.settle()
                    s.sample(done)
                    next_sample[name] = (done // opts.sample_every + 1) * opts.sample_every
                if done == opts.turns or done % 100 == 0:
                    progress(f"  {name}: turn {done}/{opts.turns}, last {s.result.walls[-1] * 1000:.0f} ms")
                last = s
        finally:
            for spy in spies.values():
                spy.stop()
        for s in sessions:
            await s.close()


def run_configs(names: Sequence[str], script: Sequence[Turn], root: Path, codex_bin: str, home: Path | None, opts: Options) -> list[ConfigResult]:
    """Run the configurations side by side (see the module doc) under ``root``."""
    site = root / "site"
    write_dist_info(site, window=True)
    work = root / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "README.md").write_text("# notes\n\nA scratch folder for the scale benchmark.\n")
    sessions = [Session(n, script, root, site, codex_bin, home, opts) for n in names]

    async def everything() -> None:
        await run_sessions(sessions, opts)
        if opts.restart:
            progress("restart: a new process resumes each thread for one more turn")
            await restart_all(sessions)

    drive(sessions, everything)
    return [s.result for s in sessions]


def drive(sessions: Sequence[Any], main: Any) -> None:
    """``trio.run(main)``; a failure is every session's error (with its
    stderr's last lines), each session's stderr goes to its folder, and
    turns that did not complete are named in its error."""
    try:
        trio.run(main)
    except (ServerGone, RpcError, TimeoutError, OSError) as exc:
        for s in sessions:
            s.result.error = s.result.error or f"{type(exc).__name__}: {exc}"
            if s.client is not None:
                tail = " | ".join(s.client.stderr_text.strip().splitlines()[-3:])[-300:]
                if tail:
                    s.result.error += f" [stderr: {tail}]"
    finally:
        for s in sessions:
            if s.client is not None:
                (s.dir / "stderr.log").write_bytes(bytes(s.client.stderr_bytes))
    for s in sessions:
        if s.result.failed_turns:
            s.result.error = (s.result.error + "; " if s.result.error else "") + f"turns not completed: {s.result.failed_turns[:10]}"


# ======================================================================
# Codex session starts: real HOME against an empty one


@dataclasses.dataclass
class StartResult:
    home: str
    answer_ms: list[float] = dataclasses.field(default_factory=list)  # thread/start -> its answer
    snapshot_ms: list[float | None] = dataclasses.field(default_factory=list)  # thread/start -> snapshot file in place
    cpu_ms: list[float] = dataclasses.field(default_factory=list)  # codex tree CPU over the start and its snapshot
    error: str | None = None


async def _measure_starts(result: StartResult, codex_bin: str, root: Path, home: Path | None, starts: int) -> None:
    with FakeModel() as model:
        codex_home = make_codex_home(root / f"starts-{result.home}", model.base_url)
        base = dict(os.environ)
        if home is not None:
            base["HOME"] = str(home)
        async with AppServerClient.spawn([codex_bin, "app-server", "--listen", "stdio://"], env=codex_env(codex_home, base), cwd=str(root / "work")) as client:
            await client.initialize(experimental=True, name="codex_sidecar_bench", title="codex-sidecar scale bench")
            await trio.sleep(1.0)  # start-up work done
            snapshots = codex_home / "shell_snapshots"
            for _ in range(starts):
                before = set(os.listdir(snapshots)) if snapshots.is_dir() else set()
                cpu0 = process_cpu(client.process.pid)
                t0 = time.perf_counter()
                await client.request("thread/start", {"cwd": str(root / "work")})
                result.answer_ms.append((time.perf_counter() - t0) * 1000)
                seen = None
                while time.perf_counter() - t0 < 5.0:
                    now = set(os.listdir(snapshots)) if snapshots.is_dir() else set()
                    if seen is None and any(".tmp" not in name for name in now - before):
                        seen = (time.perf_counter() - t0) * 1000
                        break
                    await trio.sleep(0.005)
                await trio.sleep(0.3)  # the snapshot's shell exits and is reaped
                cpu1 = process_cpu(client.process.pid)
                result.snapshot_ms.append(seen)
                if cpu0 and cpu1:
                    result.cpu_ms.append((cpu1[0] + cpu1[1] - cpu0[0] - cpu0[1]) * 1000)


async def _legacy_rss(out: dict[str, int | None], codex_bin: str, root: Path, home: Path | None) -> None:
    folder = root / "legacy"
    with FakeModel() as model:
        codex_home = make_codex_home(folder / "codex-home", model.base_url)
        base = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
        base.update({"XDG_CONFIG_HOME": str(folder / "xdg-config"), "CODEX_SIDECAR_CODEX_BIN": codex_bin, "CODEX_SIDECAR_ENGINE": "legacy",
                     "CODEX_SIDECAR_STATE_DIR": str(folder / "state"), "CODEX_SIDECAR_LOG_LEVEL": "warning"})
        if home is not None:
            base["HOME"] = str(home)
        argv = [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"]
        async with AppServerClient.spawn(argv, env=codex_env(codex_home, base), cwd=str(root / "work")) as client:
            await client.initialize(experimental=True, name="codex_sidecar_bench", title="codex-sidecar scale bench")
            await client.start_thread(cwd=str(root / "work"))
            await trio.sleep(0.5)
            out["VmRSS"] = proc_status_kb(client.process.pid, "VmRSS")
            out["VmHWM"] = proc_status_kb(client.process.pid, "VmHWM")


def measure_legacy_rss(codex_bin: str, root: Path, home: Path | None) -> dict[str, int | None]:
    """The sidecar's own memory, no engine loaded (``legacy``), once a
    thread is started: what the bench engines' share of the peak is measured
    against (they load the o200k tokenizer)."""
    out: dict[str, int | None] = {"VmRSS": None, "VmHWM": None}
    with contextlib.suppress(ServerGone, RpcError, TimeoutError, OSError):
        trio.run(_legacy_rss, out, codex_bin, root, home)
    return out


def measure_session_starts(codex_bin: str, root: Path, real_home: Path | None, empty_home: Path, starts: int) -> list[StartResult]:
    """``starts`` thread/starts with the real HOME, then as many with an
    empty one, each HOME on a codex of its own (one after the other)."""
    out = []
    for label, home in (("real", real_home), ("empty", empty_home)):
        result = StartResult(label)
        try:
            trio.run(_measure_starts, result, codex_bin, root, home, starts)
        except (ServerGone, RpcError, TimeoutError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        out.append(result)
    return out


# ======================================================================
# Figures


def edge_of(turns: int, edge: int) -> int:
    """Turns in the early and in the late median: ``edge``, at most half the run."""
    return max(1, min(edge, turns // 2))


def median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def early_late(values: Sequence[float | None], edge: int) -> tuple[float | None, float | None]:
    return median(values[:edge]), median(values[-edge:] if values else [])


def cpu_per_turn(blocks: Sequence[tuple[int, int, float, float]], lo: int, hi: int) -> tuple[float | None, float | None]:
    """Mean (sidecar, codex) CPU seconds a turn over the blocks within turns [lo, hi)."""
    inside = [b for b in blocks if b[0] >= lo and b[0] + b[1] <= hi] or [b for b in blocks if b[0] < hi and b[0] + b[1] > lo]
    turns = sum(b[1] for b in inside)
    if not turns:
        return None, None
    return sum(b[2] for b in inside) / turns, sum(b[3] for b in inside) / turns


def bytes_per_turn(samples: Sequence[Sample]) -> list[tuple[int, int, float, dict[str, float]]]:
    """Per sampling window: (from turn, to turn, state bytes a turn, bytes a turn by folder)."""
    out = []
    for a, b in zip(samples, samples[1:]):
        turns = b.turn - a.turn
        if turns <= 0:
            continue
        fa, fb = by_folder(a.files), by_folder(b.files)
        folders = {k: (fb.get(k, 0) - fa.get(k, 0)) / turns for k in sorted(set(fa) | set(fb))}
        out.append((a.turn, b.turn, (b.state_bytes - a.state_bytes) / turns, folders))
    return out


def constancy(windows: Sequence[tuple[int, int, float, dict[str, float]]]) -> float | None:
    """The last window's bytes a turn over the second window's (the first
    holds the thread's set-up), or the first's when there are only two."""
    if len(windows) < 2:
        return None
    base = windows[1][2] if len(windows) > 2 else windows[0][2]
    return windows[-1][2] / base if base > 0 else None


def growing_files(samples: Sequence[Sample], top: int = 6) -> list[tuple[str, int, int, float]]:
    """The files that grew most between the second sample and the last:
    (path, bytes at the second sample, bytes at the last, bytes a turn)."""
    if len(samples) < 2:
        return []
    a, b = samples[1] if len(samples) > 2 else samples[0], samples[-1]
    turns = max(1, b.turn - a.turn)
    rows = [(path, a.files.get(path, 0), size, (size - a.files.get(path, 0)) / turns) for path, size in b.files.items()]
    rows.sort(key=lambda r: -r[3])
    return rows[:top]


@dataclasses.dataclass
class Check:
    name: str
    target: str
    passed: bool | None  # None: not measured
    detail: str


def checks_for(result: ConfigResult, native: ConfigResult | None, edge: int) -> list[Check]:
    out: list[Check] = []
    if result.engine is None or not result.ok:
        return out
    late = early_late(result.walls, edge)[1]
    native_late = early_late(native.walls, edge)[1] if native is not None and native.ok else None
    ratio = late / native_late if late and native_late else None
    limit = {"identity": TARGET_IDENTITY, "budget": TARGET_BUDGET, "lossless": TARGET_LOSSLESS}.get(result.name, TARGET_WINDOW)
    aim = f" (aim {AIM_WINDOW:.1f}x)" if result.name == "window" else ""
    out.append(Check("late", f"late <= {limit:.1f}x native{aim}", None if ratio is None else ratio <= limit, "-" if ratio is None else f"{ratio:.2f}x"))
    hwm = max([s.sidecar_hwm_kb or 0 for s in result.samples] + [result.sidecar_hwm_kb or 0]) / 1024
    out.append(Check("rss", f"sidecar peak < {TARGET_PEAK_RSS_MB:.0f} MB", hwm < TARGET_PEAK_RSS_MB if hwm else None, f"{hwm:.0f} MB"))
    flat = constancy(bytes_per_turn(result.samples))
    out.append(Check("state", f"bytes/turn last <= {CONSTANT_BYTES:.2f}x early", None if flat is None else flat <= CONSTANT_BYTES, "-" if flat is None else f"{flat:.2f}x"))
    return out


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.1f}"


def _mb(kb: int | None) -> str:
    return "-" if not kb else f"{kb / 1024:.0f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> list[str]:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) if i < left else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [fmt(header), "  ".join("-" * w for w in widths), *[fmt(r) for r in rows]]


def report(results: Sequence[ConfigResult], starts: Sequence[StartResult], opts: Options, meta: dict[str, Any]) -> dict[str, Any]:
    """Every figure of the run, as data (``--json``) and as text (``text``)."""
    edge = edge_of(opts.turns, opts.edge)
    native = next((r for r in results if r.engine is None and r.ok), None)
    native_late = early_late(native.walls, edge)[1] if native else None
    lines: list[str] = []
    rows, configs = [], {}
    for r in results:
        early, late = early_late(r.walls, edge)
        windows = bytes_per_turn(r.samples)
        hwm = max([s.sidecar_hwm_kb or 0 for s in r.samples] + [r.sidecar_hwm_kb or 0]) or None
        checks = checks_for(r, native, edge)
        c = {
            "engine": r.engine,
            "ok": r.ok,
            "error": r.error,
            "turns": len(r.walls),
            "earlyMs": None if early is None else early * 1000,
            "lateMs": None if late is None else late * 1000,
            "lateOverEarly": late / early if early and late else None,
            "lateOverNativeLate": late / native_late if late and native_late else None,
            "rebuilds": r.rebuilds,
            "backingThreads": r.backing,
            "sidecarPeakRssKb": hwm if r.engine else None,
            "codexRssEndKb": r.codex_rss_end_kb,
            "modelRequests": r.requests,
            "compactions": r.compactions,
            "startupSeconds": r.startup,
            "stateBytesPerTurn": [{"from": a, "to": b, "bytesPerTurn": v, "byFolder": f} for a, b, v, f in windows],
            "stateBytesConstancy": constancy(windows),
            "growingFiles": [{"path": p, "before": x, "after": y, "bytesPerTurn": v} for p, x, y, v in growing_files(r.samples)],
            "samples": [dataclasses.asdict(s) | {"stateBytes": s.state_bytes} for s in r.samples],
            "turnWallSeconds": r.walls,
            "preModelSeconds": r.pre,
            "modelSeconds": r.model,
            "postModelSeconds": r.post,
            "lastRequestItems": r.items,
            "holdMs": r.hold_ms,
            "rebuiltTurns": [i + 1 for i, x in enumerate(r.rebuilt) if x],
            "cpuBlocks": [{"firstTurn": a, "turns": n, "sidecarSeconds": s, "codexSeconds": x} for a, n, s, x in r.cpu_blocks],
            "checks": [dataclasses.asdict(ch) for ch in checks],
            "profiles": r.profiles,
            "restart": r.restart,
        }
        configs[r.name] = c
        result_cell = ", ".join(f"{ch.name} {'-' if ch.passed is None else 'PASS' if ch.passed else 'FAIL'} ({ch.detail})" for ch in checks) or "-"
        if r.error:
            result_cell = f"ERROR: {r.error}"[:200]
        first_window = windows[1][2] if len(windows) > 2 else windows[0][2] if windows else None
        rows.append(
            [
                r.name,
                str(len(r.walls)),
                _ms(early),
                _ms(late),
                "-" if c["lateOverEarly"] is None else f"{c['lateOverEarly']:.2f}x",
                "-" if c["lateOverNativeLate"] is None else f"{c['lateOverNativeLate']:.2f}x",
                "-" if r.engine is None else str(r.rebuilds if r.rebuilds is not None else "n/a"),
                "-" if r.engine is None else _mb(hwm),
                _mb(r.codex_rss_end_kb),
                "-" if r.engine is None or first_window is None else f"{first_window:,.0f}",
                "-" if r.engine is None or not windows else f"{windows[-1][2]:,.0f}",
                " / ".join(ch.target for ch in checks) or "-",
                result_cell,
            ]
        )
    lines += _table(
        ["config", "turns", f"first {edge} ms", f"last {edge} ms", "late/early", "late/native", "rebuilds", "sidecar peak MB", "codex RSS MB", "state B/turn early", "late", "target", "result"],
        rows,
    )
    lines.append("")
    lines.append(
        f"ms: median client-observed turn time (turn/start sent -> turn/completed received) of the first and the last {edge} turns; "
        "late/native: the late median over native's late median, same run. sidecar peak: VmHWM; codex RSS: VmRSS of the codex binary at the end. "
        f"state B/turn: state-dir bytes a turn in the {'second' if any(len(bytes_per_turn(r.samples)) > 2 for r in results) else 'first'} and the last "
        f"{opts.sample_every}-turn window."
    )

    # Where a turn's time goes.
    split_rows = []
    for r in results:
        if not r.ok:
            continue
        se, ce = cpu_per_turn(r.cpu_blocks, 0, edge)
        sl, cl = cpu_per_turn(r.cpu_blocks, len(r.walls) - edge, len(r.walls))
        pe, pl = early_late(r.pre, edge)
        me, ml = early_late(r.model, edge)
        oe, ol = early_late(r.post, edge)
        he, hl = early_late([None if h is None else h / 1000 for h in r.hold_ms], edge) if r.hold_ms else (None, None)
        ie, il = early_late([float(x) if x is not None else None for x in r.items], edge)
        split_rows.append(
            [r.name, f"{_ms(pe)} -> {_ms(pl)}", f"{_ms(me)} -> {_ms(ml)}", f"{_ms(oe)} -> {_ms(ol)}", f"{_ms(he)} -> {_ms(hl)}",
             f"{_ms(se)} -> {_ms(sl)}" if r.engine else "-", f"{_ms(ce)} -> {_ms(cl)}",
             f"{ie or 0:.0f} -> {il or 0:.0f}"]
        )
        configs[r.name]["split"] = {"preModelMs": [_f(pe), _f(pl)], "modelMs": [_f(me), _f(ml)], "postModelMs": [_f(oe), _f(ol)],
                                    "holdMs": [_f(he), _f(hl)], "sidecarCpuMsPerTurn": [_f(se), _f(sl)], "codexCpuMsPerTurn": [_f(ce), _f(cl)]}
        if r.rebuilt and any(r.rebuilt):
            walls = r.walls[: len(r.rebuilt)]
            rb = [w for w, x in zip(walls, r.rebuilt) if x]
            nrb = [w for w, x in zip(walls, r.rebuilt) if not x]
            half = len(walls) // 2
            configs[r.name]["rebuildTurns"] = {
                "count": len(rb),
                "medianMs": _f(median(rb)),
                "otherMedianMs": _f(median(nrb)),
                "firstHalf": {"rebuildMs": _f(median([w for w, x in zip(walls[:half], r.rebuilt[:half]) if x])), "otherMs": _f(median([w for w, x in zip(walls[:half], r.rebuilt[:half]) if not x]))},
                "secondHalf": {"rebuildMs": _f(median([w for w, x in zip(walls[half:], r.rebuilt[half:]) if x])), "otherMs": _f(median([w for w, x in zip(walls[half:], r.rebuilt[half:]) if not x]))},
            }
    lines += ["", f"Where a turn's time goes (medians, first {edge} -> last {edge} turns; ms):"]
    lines += _table(["config", "before model", "model", "after model", "sidecar hold", "sidecar CPU/turn", "codex CPU/turn", "input items"], split_rows)
    lines.append(
        "before model: turn/start sent -> the turn's first model request read by the fake model; model: -> its last response written; "
        "after model: -> turn/completed received. sidecar hold: inspect holdMs. CPU: /proc user+system per turn over the blocks "
        "(10 ms ticks), codex = the codex tree (with the shells it ran). input items: items of the turn's last model request."
    )
    for r in results:
        rt = configs[r.name].get("rebuildTurns")
        if rt:
            lines.append(
                f"{r.name}: {rt['count']} rebuild turns, median {_fmt(rt['medianMs'])} ms (other turns {_fmt(rt['otherMedianMs'])} ms); "
                f"first half {_fmt(rt['firstHalf']['rebuildMs'])} / {_fmt(rt['firstHalf']['otherMs'])} ms, "
                f"second half {_fmt(rt['secondHalf']['rebuildMs'])} / {_fmt(rt['secondHalf']['otherMs'])} ms (rebuild / other)."
            )

    # A restart at the end.
    if any(r.restart for r in results):
        native_restart = next((r.restart for r in results if r.engine is None and r.restart), {})
        rrows = []
        for r in results:
            rs = r.restart or {}
            if "error" in rs:
                rrows.append([r.name, "-", "-", "-", "-", f"ERROR: {rs['error']}"[:120]])
                continue
            resume, turn = rs.get("resumeMs"), rs.get("turnMs")
            nat = (native_restart.get("resumeMs") or 0) + (native_restart.get("turnMs") or 0)
            total = (resume or 0) + (turn or 0)
            rrows.append([r.name, _fmt(rs.get("initializeMs")), _fmt(resume), _fmt(turn), f"{total / nat:.2f}x" if nat and turn else "-", ""])
        lines += ["", f"Restart after turn {opts.turns} (a new process on the same state: OpenClaw's --local pattern, one process a turn):"]
        lines += _table(["config", "initialize ms", "thread/resume ms", "next turn ms", "resume+turn vs native", ""], rrows)

    # The state dir.
    for r in results:
        if r.engine is None or not r.samples:
            continue
        lines += ["", f"{r.name}: state dir, sampled every {opts.sample_every} turns (bytes; per folder: total, and bytes a turn since the previous sample)"]
        folders = sorted({k for s in r.samples for k in by_folder(s.files)})
        srows = []
        prev: Sample | None = None
        for s in r.samples:
            f = by_folder(s.files)
            pf = by_folder(prev.files) if prev else {}
            turns = s.turn - prev.turn if prev else 0
            cells = [str(s.turn), f"{s.state_bytes:,}", f"{(s.state_bytes - prev.state_bytes) / turns:,.0f}" if prev and turns else "-"]
            cells += [f"{f.get(k, 0):,} ({(f.get(k, 0) - pf.get(k, 0)) / turns:,.0f})" if prev and turns else f"{f.get(k, 0):,}" for k in folders]
            cells += [str(len(s.files)), _mb(s.sidecar_rss_kb), _mb(s.codex_rss_kb), _mb(None if s.codex_home_bytes is None else s.codex_home_bytes // 1024), str(s.rollouts)]
            srows.append(cells)
            prev = s
        lines += _table(["turn", "total", "B/turn", *folders, "files", "sidecar RSS MB", "codex RSS MB", "CODEX_HOME MB", "rollouts"], srows)
        grow = growing_files(r.samples)
        if grow:
            lines.append("grows most: " + "; ".join(f"{p} {x:,} -> {y:,} B ({v:,.0f} B/turn)" for p, x, y, v in grow[:4]))
    legacy = meta.get("legacySidecarKb") or {}
    if legacy.get("VmHWM"):
        starts_at = {r.name: r.samples[0].sidecar_rss_kb for r in results if r.engine and r.samples}
        lines.append(
            f"sidecar memory: with no engine (legacy) {_mb(legacy['VmHWM'])} MB peak after thread/start; with the bench engines at turn 0: "
            + ", ".join(f"{k} {_mb(v)} MB" for k, v in starts_at.items())
            + " (the difference is the engine's: they load the o200k tokenizer)."
        )
    native_samples = [r for r in results if r.engine is None and r.samples]
    for r in native_samples:
        lines.append(f"{r.name}: codex RSS MB / CODEX_HOME MB at " + ", ".join(
            f"turn {s.turn}: {_mb(s.codex_rss_kb)} / {_mb(None if s.codex_home_bytes is None else s.codex_home_bytes // 1024)}" for s in r.samples))

    # Session starts.
    start_data = []
    if starts:
        lines += ["", "Codex session start (thread/start on a codex of its own; medians):"]
        srows = []
        for st in starts:
            srows.append(
                [st.home, str(len(st.answer_ms)), _fmt(median(st.answer_ms)), _fmt(median(st.snapshot_ms)), _fmt(median(st.cpu_ms)),
                 f"ERROR: {st.error}" if st.error else ""]
            )
            start_data.append(dataclasses.asdict(st))
        lines += _table(["HOME", "starts", "answer ms", "shell snapshot ms", "codex CPU ms", ""], srows)
        lines.append(
            "answer: thread/start -> its answer; shell snapshot: thread/start -> the session's snapshot file in CODEX_HOME/shell_snapshots "
            "(Codex runs the user's login shell in the background); codex CPU: the codex tree's CPU over the start and the snapshot."
        )
    lines += ["", f"{opts.turns} turns a configuration on one thread each, blocks of {opts.block} turns rotating between configurations; "
              f"home: {meta.get('home')}; sidecar settings: {', '.join(f'{k}={v}' for k, v in opts.settings.items()) or 'defaults'}; load average at start {meta.get('loadStart')}, at end {meta.get('loadEnd')}; {meta.get('seconds', 0):.0f} s."]
    return {"configs": configs, "sessionStarts": start_data, "edge": edge, "options": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(opts).items()},
            **meta, "text": "\n".join(lines)}


def _f(v: float | None) -> float | None:
    return None if v is None else round(v * 1000, 3)


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


# ======================================================================
# py-spy summaries


def summarize_raw(text: str, top: int = 12) -> tuple[int, list[tuple[str, int]], list[tuple[str, int]]]:
    """py-spy ``raw`` (collapsed) stacks: total samples, the top frames by
    own samples and by samples including callees (a frame counted once per
    stack)."""
    total, own, incl = 0, {}, {}
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.strip() for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for frame in set(frames):
            incl[frame] = incl.get(frame, 0) + n
    by = lambda d: sorted(d.items(), key=lambda kv: -kv[1])[:top]  # noqa: E731
    return total, by(own), by(incl)


_ROOT_FRAMES = ("click/", "runpy", "sidecar/cli.py", "sidecar/__main__", "trio/_core/_run.py", "<module>", "outcome/")
"""Frames every sample has (the process's entry, the event loop): left out of the inclusive list."""


def profile_text(results: Sequence[ConfigResult]) -> str:
    lines = []
    for r in results:
        for phase, path in r.profiles.items():
            p = Path(path)
            if not p.exists():
                continue
            total, own, incl = summarize_raw(p.read_text(errors="replace"), top=60)
            if not total:
                continue
            turns = min(len(r.walls), DEFAULT_EDGE) or 1
            lines.append(f"{r.name} {phase} turns: {total} py-spy samples (250/s, active only; ~{total * 4 / turns:.1f} ms a turn) -> {p}")
            lines += [f"  own  {n * 4 / turns:5.2f} ms/turn  {f}" for f, n in own[:8]]
            inner = [(f, n) for f, n in incl if not any(x in f for x in _ROOT_FRAMES)]
            lines += [f"  incl {n * 4 / turns:5.2f} ms/turn  {f}" for f, n in inner[:10]]
    return "\n".join(lines)


# ======================================================================
# main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench_scale", description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=DEFAULT_TURNS, help="turns a configuration (default %(default)s)")
    ap.add_argument("--configs", default=",".join(DEFAULT_CONFIGS), help=f"comma-separated, from: {', '.join(CONFIGS)} (default %(default)s)")
    ap.add_argument("--edge", type=int, default=DEFAULT_EDGE, help="turns in the early and the late medians (default %(default)s)")
    ap.add_argument("--block", type=int, default=DEFAULT_BLOCK, help="turns a configuration runs back to back before the next takes over (default %(default)s)")
    ap.add_argument("--sample-every", type=int, default=DEFAULT_SAMPLE_EVERY, help="turns between state-dir and RSS samples (default %(default)s)")
    ap.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="messages the sliding window keeps (default %(default)s)")
    ap.add_argument("--tool-every", type=int, default=DEFAULT_TOOL_EVERY, help="a shell tool call every N turns, 0 = none (default %(default)s)")
    ap.add_argument("--home", choices=["real", "empty"], default="real", help="codex's HOME: the machine's (its login shell is snapshotted at every Codex session start) or an empty folder (default %(default)s)")
    ap.add_argument("--session-starts", type=int, default=6, help="thread/starts timed per HOME (real, empty) before the run; 0 = skip (default %(default)s)")
    ap.add_argument(
        "--sidecar-setting",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a setting for both sidecars (as CODEX_SIDECAR_<NAME>), e.g. stale_slack=0 to rebuild on every drop; repeatable",
    )
    ap.add_argument("--no-restart", action="store_true", help="skip the restart at the end (a new process resumes each thread for one more turn)")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--codex-bin", help="the real codex (default: $CODEX_SIDECAR_TEST_CODEX_BIN or .tools/)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure (per turn) to FILE")
    ap.add_argument("--keep", metavar="DIR", help="run in DIR (empty or new) and keep every state dir, CODEX_HOME and stderr log")
    ap.add_argument("--py-spy", metavar="DIR", help="profile each sidecar with py-spy during its first and last --edge turns; raw stacks go to DIR")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    bad = [n for n in names if n not in CONFIGS]
    if bad or not names or len(set(names)) != len(names):
        ap.error(f"--configs: expected distinct names from {', '.join(CONFIGS)}")
    for flag in ("turns", "edge", "block", "sample_every", "window"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1")
    if args.tool_every < 0 or args.session_starts < 0:
        ap.error("--tool-every and --session-starts must be >= 0")
    settings: dict[str, str] = {}
    for item in args.sidecar_setting:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            ap.error(f"--sidecar-setting {item!r}: expected NAME=VALUE")
        settings[key.strip()] = value
    codex_bin = args.codex_bin or find_codex_bin()
    if not codex_bin:
        print("real codex not found: run `make setup` or pass --codex-bin", file=sys.stderr)
        return 2
    opts = Options(settings=settings, restart=not args.no_restart, turns=args.turns, edge=args.edge, block=args.block, sample_every=args.sample_every, window=args.window,
                   py_spy=Path(args.py_spy).resolve() if args.py_spy else None)
    if opts.py_spy:
        opts.py_spy.mkdir(parents=True, exist_ok=True)
    script = build_script(args.turns, args.seed, args.tool_every)
    started = time.monotonic()
    load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
    with contextlib.ExitStack() as stack:
        if args.keep:
            root = Path(args.keep).resolve()
            root.mkdir(parents=True, exist_ok=True)
            if any(root.iterdir()):
                ap.error(f"--keep {root}: folder must be empty")
        else:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-scale-")))
        empty_home = root / "empty-home"
        empty_home.mkdir()
        home = None if args.home == "real" else empty_home
        (root / "work").mkdir()
        starts: list[StartResult] = []
        if args.session_starts:
            progress(f"session starts: {args.session_starts} per HOME")
            starts = measure_session_starts(codex_bin, root, None, empty_home, args.session_starts)
        progress(f"{args.turns} turns x {', '.join(names)}; home {args.home} ({os.environ.get('HOME') if home is None else home}); load {load_start}")
        legacy = measure_legacy_rss(codex_bin, root, home) if any(CONFIGS[n] for n in names) else {}
        results = run_configs(names, script, root, codex_bin, home, opts)
        meta = {
            "legacySidecarKb": legacy,
            "home": f"{args.home} ({os.environ.get('HOME') if home is None else 'empty folder'})",
            "loadStart": load_start,
            "loadEnd": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "seconds": time.monotonic() - started,
            "toolEvery": args.tool_every,
            "seed": args.seed,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        }
        data = report(results, starts, opts, meta)
    print(data["text"], flush=True)
    spy = profile_text(results)
    if spy:
        print("\nPy-spy (sidecar process):\n" + spy, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
