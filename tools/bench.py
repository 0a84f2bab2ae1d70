"""Relay benchmark: the sidecar against a direct connection, in one run.

    python -m tools.bench [--json FILE] [--strict]      (what `make bench` runs)

Every figure is measured twice, on the same machine and in the same run:
*direct* (the client talks to the child itself) and *sidecar* (client ->
``python -m sidecar proxy -- CHILD`` -> the same child). Direct and sidecar
samples are interleaved, so a noisy neighbour hits both alike, and each row
gives the ratio sidecar/direct next to the issue's target:

* round-trip latency of 1 KB requests against ``tools/echo_child.py`` (p50 and
  p99 of several thousand round trips after a warm-up); the target is on the
  latency the sidecar *adds* at p50. A second sidecar with ``--busy-poll-us 0``
  runs in the same interleaved loop, with the sidecars' CPU time per round
  trip, so the row shows what the default busy-poll window buys and costs.
  The same again with the client and both
  process chains pinned to one CPU (informational): that leaves out the cost
  of waking a process on the other CPU, which the sidecar's two extra hops
  pay and which is large on virtual machines, and so shows the relay's own work;
* forwarding throughput of 1 KB and of 1 MB frames through ``cat``, seen by
  the client (each frame crosses the sidecar twice: to cat and back). The
  frames are notifications, which the sidecar does not track;
* growth of the sidecar's resident memory (VmRSS) over 1,000,000 1 KB frames
  through ``cat``, after a warm-up.

The client must not be what is measured: it uses plain pipes, ``os.write``
from one thread and ``readinto`` a reused buffer plus a newline count in
another, with 1 MB pipe buffers on its own side.

``--sidecar-src DIR`` measures the sidecar of another source tree (a copy
with a proposed change) against the same baseline; ``--json FILE`` keeps
every figure, including per-round rates, RSS readings and the sidecar's CPU
time per round trip and per frame (steadier than wall-clock on a busy host).

stdout carries the result table only; progress goes to stderr. The building
blocks (``Peer``, ``round_trips``, ``stream``, the frame makers) are also what
``tests/test_bench_smoke.py`` uses to check that frames come back intact.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gc
import io
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ECHO_CHILD = os.path.join(REPO, "tools", "echo_child.py")

KB = 1024
MB = 1024 * 1024

TARGET_ADDED_P50_US = 150.0
TARGET_FRAMES_1K = 50_000.0
TARGET_MBPS_1M = 200.0  # MB/s, with MB = 10**6 bytes
TARGET_RSS_GROWTH_MB = 20.0  # MiB

_F_SETPIPE_SZ = 1031  # Linux fcntl: resize a pipe's buffer
_READ_CHUNK = 1 << 20


def progress(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ frames

_NOTE_HEAD = b'{"method":"bench/x","params":{'
_TAIL = b'"}}\n'


def notification(size: int, seq: int | None = None) -> bytes:
    """A ``bench/x`` notification of exactly ``size`` bytes, newline included.

    With ``seq`` the params carry it, so frames differ and order can be checked.
    """
    head = _NOTE_HEAD + (b'"seq":%d,' % seq if seq is not None else b"") + b'"pad":"'
    pad = size - len(head) - len(_TAIL)
    if pad < 0:
        raise ValueError(f"frame size {size} is too small")
    return head + b"x" * pad + _TAIL


def echo_request(rpc_id: int, size: int) -> tuple[bytes, bytes]:
    """A ``bench/echo`` request of ``size`` bytes and the exact answer expected."""
    head = b'{"id":%d,"method":"bench/echo","params":{"pad":"' % rpc_id
    pad = size - len(head) - len(_TAIL)
    if pad < 0:
        raise ValueError(f"frame size {size} is too small")
    padding = b"x" * pad
    return head + padding + _TAIL, b'{"id":%d,"result":{"pad":"' % rpc_id + padding + b'"}}\n'


def blocks_of(frame: bytes, frames: int, per_block: int) -> Iterator[bytes]:
    """``frames`` copies of ``frame`` as big writes of ``per_block`` frames."""
    per_block = max(1, min(per_block, frames))
    full, rest = divmod(frames, per_block)
    block = frame * per_block
    yield from itertools.repeat(block, full)
    if rest:
        yield frame * rest


def per_block_for(frame_size: int) -> int:
    """Frames per write: about 256 KB a write, at least one frame."""
    return max(1, (256 * KB) // frame_size)


# -------------------------------------------------------------- processes


def bench_env(src: str = REPO) -> dict[str, str]:
    """The environment for children: no user config or CODEX_SIDECAR_* settings
    (a recording or debug logging would be measured instead of the relay), and
    ``src`` first on the import path: the tree whose ``sidecar`` and
    ``protocol`` packages are measured (``--sidecar-src`` to try a change)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_SIDECAR_")}
    env["XDG_CONFIG_HOME"] = os.path.join(tempfile.gettempdir(), "codex-sidecar-bench-noconfig")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def sidecar_argv(child: Sequence[str], flags: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "sidecar", "--log-level", "warning", *flags, "proxy", "--", *child]


BUSY_POLL_OFF = ("--busy-poll-us", "0")


def sidecar_peer(child: Sequence[str], src: str = REPO, flags: Sequence[str] = ()) -> Peer:
    """The sidecar from source tree ``src`` (with ``flags``), relaying for ``child``."""
    return Peer(sidecar_argv(child, flags), env=bench_env(src), cwd=src)


def echo_child_argv() -> list[str]:
    return [sys.executable, ECHO_CHILD]


def cat_argv() -> list[str]:
    return ["cat"]


def _set_pipe_size(fd: int, size: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, _F_SETPIPE_SZ, size)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak) of a process, in KiB."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
    return out


class Peer:
    """A child process on raw pipes: the far end of a direct or proxied connection."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str = REPO,
        pipe_size: int = MB,
    ) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env if env is not None else bench_env(),
            cwd=cwd,  # `python -m` imports from the working directory first
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd = self.proc.stdin.fileno()
        self.rfd = self.proc.stdout.fileno()
        _set_pipe_size(self.wfd, pipe_size)
        _set_pipe_size(self.rfd, pipe_size)
        self._reader = io.FileIO(self.rfd, "rb", closefd=False)
        self._buf = bytearray(_READ_CHUNK)
        self._view = memoryview(self._buf)
        self._pending = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu(self) -> float:
        return cpu_seconds(self.pid)

    def rss(self) -> dict[str, int]:
        return rss_kib(self.pid)

    def write(self, data: bytes) -> None:
        _write_all(self.wfd, data)

    def read_line(self) -> bytes:
        """The next line, newline included (EOFError if the peer hangs up)."""
        pending = self._pending
        while True:
            nl = pending.find(b"\n")
            if nl >= 0:
                self._pending = pending[nl + 1 :]
                return pending[: nl + 1]
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                raise EOFError(f"{self.argv[0]} closed its output")
            pending += chunk

    def readinto(self) -> int:
        """Read what is there into the reused buffer; its length (0 at EOF)."""
        return self._reader.readinto(self._view) or 0

    def close(self, timeout: float = 15.0) -> int | None:
        """Close stdin, drain stdout to EOF, wait; kill if it lingers."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and self.readinto():
                pass
        except OSError:
            pass
        try:
            return self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            progress(f"{self.argv[0]} (pid {self.pid}) did not exit; killing it")
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()  # type: ignore[union-attr]

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------- measurements


class FrameMismatch(AssertionError):
    pass


def round_trips(peer: Peer, requests: Sequence[tuple[bytes, bytes]]) -> list[int]:
    """Send each request, wait for its answer; nanoseconds per round trip.

    Every answer is compared with the expected bytes (after timing).
    """
    times = []
    answers = []
    clock = time.perf_counter_ns
    write = peer.write
    read_line = peer.read_line
    for req, _ in requests:
        t0 = clock()
        write(req)
        line = read_line()
        times.append(clock() - t0)
        answers.append(line)
    for i, ((_, want), got) in enumerate(zip(requests, answers)):
        if got != want:
            raise FrameMismatch(f"round trip {i}: got {got[:80]!r}..., want {want[:80]!r}...")
    return times


def interleaved_round_trips(
    peers: Sequence[Peer], requests: Sequence[tuple[bytes, bytes]], block: int = 1
) -> list[list[int]]:
    """``round_trips`` on several peers in turn, ``block`` requests at a time
    on each (the starting peer alternates), so they share whatever the
    machine is doing. Blocks longer than one request keep a peer that polls
    after traffic (the sidecar's busy-poll) from spending its window during
    the other peers' round trips, where it would take a CPU from them."""
    times: list[list[int]] = [[] for _ in peers]
    order = list(range(len(peers)))
    for k, start in enumerate(range(0, len(requests), block)):
        chunk = requests[start : start + block]
        for i in order if k % 2 == 0 else order[::-1]:
            times[i].extend(round_trips(peers[i], chunk))
    return times


@dataclass
class StreamResult:
    frames: int
    bytes: int
    seconds: float
    data: bytes | None = None

    @property
    def frames_per_s(self) -> float:
        return self.frames / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6


def stream(peer: Peer, blocks: Iterable[bytes], frames: int, nbytes: int, *, keep: bool = False) -> StreamResult:
    """Write ``blocks`` (holding ``frames`` frames, ``nbytes`` bytes) from one
    thread while this one reads and counts newlines until all came back.

    ``keep`` also returns the bytes received, to check them. Raises
    ``FrameMismatch`` when the byte count differs from what was sent.
    """
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for block in blocks:
                _write_all(peer.wfd, block)
        except BaseException as exc:  # reported by the reader
            errors.append(exc)

    kept: list[bytes] = []
    buf = peer._buf
    readinto = peer.readinto
    count = got = 0
    thread = threading.Thread(target=writer, name="bench-writer", daemon=True)
    t0 = time.perf_counter()
    thread.start()
    while count < frames:
        n = readinto()
        if not n:
            break
        count += buf.count(b"\n", 0, n)
        got += n
        if keep:
            kept.append(bytes(buf[:n]))
    seconds = time.perf_counter() - t0
    thread.join(10.0)
    if errors:
        rc = peer.proc.poll()
        if rc is not None:
            raise RuntimeError(f"{peer.argv[:4]} exited with status {rc} mid-stream") from errors[0]
        raise errors[0]
    if count != frames or got != nbytes:
        raise FrameMismatch(f"sent {frames} frames / {nbytes} bytes, got back {count} frames / {got} bytes")
    return StreamResult(count, got, seconds, b"".join(kept) if keep else None)


def stream_frames(peer: Peer, frame: bytes, frames: int) -> StreamResult:
    """``frames`` copies of ``frame`` through ``peer`` (throughput mode)."""
    return stream(peer, blocks_of(frame, frames, per_block_for(len(frame))), frames, frames * len(frame))


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    k = max(0, min(len(sorted_values) - 1, math.ceil(p / 100.0 * len(sorted_values)) - 1))
    return sorted_values[k]


# ------------------------------------------------------------------ phases


@dataclass
class Config:
    rtt_warmup: int = 500
    rtt_samples: int = 5000
    rtt_block: int = 100
    frame_1k: int = KB
    tp_1k_frames: int = 200_000  # per round; the sidecar's rounds are the memory run
    tp_1k_rounds: int = 5
    warmup_1k_frames: int = 200_000  # enough to reach the outboxes' high-water plateau
    frame_1m: int = MB
    tp_1m_frames: int = 64  # per round
    tp_1m_rounds: int = 3
    warmup_1m_frames: int = 8
    sidecar_src: str = REPO


@contextlib.contextmanager
def pinned(cpu: int | None) -> Iterator[None]:
    """Run this process, and the children it starts meanwhile, on one CPU."""
    if cpu is None:
        yield
        return
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def measure_latency(cfg: Config, cpu: int | None = None) -> dict:
    """Round trips through the echo child: direct, through the sidecar as it
    comes (busy-poll on), and through a sidecar with ``--busy-poll-us 0``,
    in blocks of ``rtt_block`` requests on each in turn.

    With ``cpu``, the client and every process chain share that one CPU: the
    figure is then the relay's own work, without the cost of waking a process
    on the other CPU (large on virtual machines) that the sidecar's two extra
    hops otherwise add. (The sidecar turns busy-poll off by itself there.)
    """
    where = "all CPUs" if cpu is None else f"CPU {cpu} only"
    progress(
        f"latency ({where}): {cfg.rtt_warmup} warm-up + {cfg.rtt_samples} round trips of "
        f"{cfg.frame_1k} B, direct / sidecar / sidecar without busy-poll interleaved"
    )
    echo = echo_child_argv()
    with (
        pinned(cpu),
        Peer(echo) as direct,
        sidecar_peer(echo, cfg.sidecar_src) as proxied,
        sidecar_peer(echo, cfg.sidecar_src, BUSY_POLL_OFF) as no_poll,
    ):
        peers = [direct, proxied, no_poll]
        warm = [echo_request(i, cfg.frame_1k) for i in range(1, cfg.rtt_warmup + 1)]
        interleaved_round_trips(peers, warm, cfg.rtt_block)
        base = cfg.rtt_warmup + 1
        reqs = [echo_request(i, cfg.frame_1k) for i in range(base, base + cfg.rtt_samples)]
        gc.collect()
        gc.disable()
        cpu0 = [proxied.cpu(), no_poll.cpu()]
        try:
            d, s, s0 = interleaved_round_trips(peers, reqs, cfg.rtt_block)
        finally:
            gc.enable()
        cpu_used = [proxied.cpu() - cpu0[0], no_poll.cpu() - cpu0[1]]
    out: dict = {
        "cpus": "all" if cpu is None else [cpu],
        "samples": len(d),
        "frameBytes": cfg.frame_1k,
        "sidecar_cpu_per_round_trip_us": cpu_used[0] / len(s) * 1e6,
        "no_busy_poll_cpu_per_round_trip_us": cpu_used[1] / len(s0) * 1e6,
    }
    d_us = sorted(t / 1000 for t in d)
    for name, samples in (("sidecar", s), ("no_busy_poll", s0)):
        us = sorted(t / 1000 for t in samples)
        for p in (50, 90, 99):
            out[f"direct_p{p}_us"] = percentile(d_us, p)
            out[f"{name}_p{p}_us"] = percentile(us, p)
            added = "added" if name == "sidecar" else "no_busy_poll_added"
            out[f"{added}_p{p}_us"] = out[f"{name}_p{p}_us"] - out[f"direct_p{p}_us"]
    out["paired_added_p50_us"] = percentile(sorted((b - a) / 1000 for a, b in zip(d, s)), 50)
    return out


def measure_1k_and_memory(cfg: Config) -> dict:
    frame = notification(cfg.frame_1k)
    measured = cfg.tp_1k_frames * cfg.tp_1k_rounds
    progress(
        f"1 KB through cat: {cfg.warmup_1k_frames} warm-up frames, then {cfg.tp_1k_rounds} rounds of "
        f"{cfg.tp_1k_frames} frames each way, direct/sidecar interleaved ({measured} frames through the sidecar)"
    )
    with Peer(cat_argv()) as direct, sidecar_peer(cat_argv(), cfg.sidecar_src) as proxied:
        stream_frames(direct, frame, cfg.warmup_1k_frames)
        stream_frames(proxied, frame, cfg.warmup_1k_frames)
        time.sleep(0.2)
        rss_before = proxied.rss()
        rss_rounds = []
        d_rates, s_rates = [], []
        cpu0 = proxied.cpu()
        for r in range(cfg.tp_1k_rounds):
            d_rates.append(stream_frames(direct, frame, cfg.tp_1k_frames).frames_per_s)
            s_rates.append(stream_frames(proxied, frame, cfg.tp_1k_frames).frames_per_s)
            rss_rounds.append(proxied.rss()["VmRSS"])
            progress(
                f"  round {r + 1}: direct {d_rates[-1]:,.0f} frames/s, sidecar {s_rates[-1]:,.0f} frames/s, "
                f"sidecar RSS {rss_rounds[-1] / 1024:.1f} MiB"
            )
        sidecar_cpu = proxied.cpu() - cpu0
        time.sleep(0.2)
        rss_after = proxied.rss()
    growth = (rss_after["VmRSS"] - rss_before["VmRSS"]) / 1024
    return {
        "frameBytes": cfg.frame_1k,
        "framesPerRound": cfg.tp_1k_frames,
        "direct_frames_per_s": statistics.median(d_rates),
        "sidecar_frames_per_s": statistics.median(s_rates),
        "direct_rounds": d_rates,
        "sidecar_rounds": s_rates,
        "sidecar_cpu_per_frame_us": sidecar_cpu / measured * 1e6,
        "memory": {
            "warmupFrames": cfg.warmup_1k_frames,
            "rss_per_round_kib": rss_rounds,
            "framesAfterWarmup": measured,
            "rss_after_warmup_kib": rss_before["VmRSS"],
            "rss_after_kib": rss_after["VmRSS"],
            "peak_rss_kib": rss_after.get("VmHWM"),
            "growth_mib": growth,
        },
    }


def measure_1m(cfg: Config) -> dict:
    frame = notification(cfg.frame_1m)
    progress(
        f"1 MB through cat: {cfg.warmup_1m_frames} warm-up frames, then {cfg.tp_1m_rounds} rounds of "
        f"{cfg.tp_1m_frames} frames each way, direct/sidecar interleaved"
    )
    with Peer(cat_argv()) as direct, sidecar_peer(cat_argv(), cfg.sidecar_src) as proxied:
        stream_frames(direct, frame, cfg.warmup_1m_frames)
        stream_frames(proxied, frame, cfg.warmup_1m_frames)
        d_rates, s_rates = [], []
        cpu0 = proxied.cpu()
        for r in range(cfg.tp_1m_rounds):
            d_rates.append(stream_frames(direct, frame, cfg.tp_1m_frames).mb_per_s)
            s_rates.append(stream_frames(proxied, frame, cfg.tp_1m_frames).mb_per_s)
            progress(f"  round {r + 1}: direct {d_rates[-1]:,.0f} MB/s, sidecar {s_rates[-1]:,.0f} MB/s")
        sidecar_cpu = proxied.cpu() - cpu0
    return {
        "frameBytes": cfg.frame_1m,
        "framesPerRound": cfg.tp_1m_frames,
        "direct_mb_per_s": statistics.median(d_rates),
        "sidecar_mb_per_s": statistics.median(s_rates),
        "direct_rounds": d_rates,
        "sidecar_rounds": s_rates,
        "sidecar_cpu_per_frame_us": sidecar_cpu / (cfg.tp_1m_frames * cfg.tp_1m_rounds) * 1e6,
    }


# ------------------------------------------------------------------- table


@dataclass
class Row:
    metric: str
    direct: float | None
    sidecar: float | None
    target: str
    passed: bool | None
    note: str = ""
    fmt: str = "{:,.1f}"

    @property
    def ratio(self) -> float | None:
        if self.direct and self.sidecar is not None:
            return self.sidecar / self.direct
        return None

    def cells(self) -> list[str]:
        def num(v: float | None) -> str:
            return "-" if v is None else self.fmt.format(v)

        result = {True: "PASS", False: "FAIL", None: "-"}[self.passed]
        if self.note:
            result = f"{result} ({self.note})" if self.passed is not None else f"({self.note})"
        ratio = self.ratio
        return [self.metric, num(self.direct), num(self.sidecar), "-" if ratio is None else f"{ratio:.2f}", self.target, result]

    def as_dict(self) -> dict:
        return {
            "metric": self.metric,
            "direct": self.direct,
            "sidecar": self.sidecar,
            "ratio": self.ratio,
            "target": self.target,
            "pass": self.passed,
            "note": self.note,
        }


def build_rows(lat: dict, lat1: dict | None, tp1k: dict, tp1m: dict) -> list[Row]:
    mem = tp1k["memory"]
    one_cpu = []
    if lat1 is not None:
        one_cpu = [
            Row(
                f"RTT p{p}, 1 KB, 1 CPU (µs)",
                lat1[f"direct_p{p}_us"],
                lat1[f"sidecar_p{p}_us"],
                "-",
                None,
                f"+{lat1[f'added_p{p}_us']:.1f} µs",
            )
            for p in (50, 99)
        ]
    return [
        Row(
            "RTT p50, 1 KB (µs)",
            lat["direct_p50_us"],
            lat["sidecar_p50_us"],
            f"added <= {TARGET_ADDED_P50_US:.0f} µs",
            lat["added_p50_us"] <= TARGET_ADDED_P50_US,
            f"+{lat['added_p50_us']:.1f} µs",
        ),
        Row(
            "RTT p99, 1 KB (µs)",
            lat["direct_p99_us"],
            lat["sidecar_p99_us"],
            "-",
            None,
            f"+{lat['added_p99_us']:.1f} µs",
        ),
        Row(
            "RTT p50, 1 KB, busy-poll off (µs)",
            lat["direct_p50_us"],
            lat["no_busy_poll_p50_us"],
            "-",
            None,
            f"+{lat['no_busy_poll_added_p50_us']:.1f} µs with --busy-poll-us 0",
        ),
        Row(
            "sidecar CPU per round trip (µs)",
            None,
            lat["sidecar_cpu_per_round_trip_us"],
            "-",
            None,
            f"{lat['no_busy_poll_cpu_per_round_trip_us']:.0f} µs with busy-poll off",
        ),
        *one_cpu,
        Row(
            "throughput 1 KB (frames/s)",
            tp1k["direct_frames_per_s"],
            tp1k["sidecar_frames_per_s"],
            f">= {TARGET_FRAMES_1K:,.0f}",
            tp1k["sidecar_frames_per_s"] >= TARGET_FRAMES_1K,
            fmt="{:,.0f}",
        ),
        Row(
            "throughput 1 MB (MB/s)",
            tp1m["direct_mb_per_s"],
            tp1m["sidecar_mb_per_s"],
            f">= {TARGET_MBPS_1M:,.0f}",
            tp1m["sidecar_mb_per_s"] >= TARGET_MBPS_1M,
            fmt="{:,.0f}",
        ),
        Row(
            f"RSS growth, {mem['framesAfterWarmup'] / 1e6:g}M x 1 KB (MiB)",
            None,
            mem["growth_mib"],
            f"< {TARGET_RSS_GROWTH_MB:.0f} MiB",
            mem["growth_mib"] < TARGET_RSS_GROWTH_MB,
            f"{mem['rss_after_warmup_kib'] / 1024:.1f} -> {mem['rss_after_kib'] / 1024:.1f} MiB, "
            f"peak {mem['peak_rss_kib'] / 1024:.0f}",
        ),
    ]


def format_table(rows: Sequence[Row]) -> str:
    header = ["metric", "direct", "sidecar", "ratio", "target", "result"]
    body = [r.cells() for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    right = {1, 2, 3}

    def fmt(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    lines = [fmt(header), "  ".join("-" * w for w in widths)]
    lines += [fmt(c) for c in body]
    return "\n".join(lines)


# -------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="FILE", help="also write every figure (and the raw rounds) to FILE")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--rtt-samples", type=int, default=Config.rtt_samples, help="measured round trips (default %(default)s)")
    ap.add_argument(
        "--mem-frames",
        type=int,
        default=Config.tp_1k_frames * Config.tp_1k_rounds,
        help="1 KB frames through the sidecar after warm-up, for throughput and memory (default %(default)s)",
    )
    ap.add_argument(
        "--no-one-cpu",
        action="store_true",
        help="skip the informational latency rows with everything pinned to one CPU",
    )
    ap.add_argument(
        "--sidecar-src",
        metavar="DIR",
        default=REPO,
        help="source tree whose sidecar/ and protocol/ are measured, to try a change (default: this repo)",
    )
    args = ap.parse_args(argv)
    cfg = Config(rtt_samples=args.rtt_samples, sidecar_src=os.path.abspath(args.sidecar_src))
    cfg.tp_1k_frames = max(1, args.mem_frames // cfg.tp_1k_rounds)

    started = time.monotonic()
    lat = measure_latency(cfg)
    lat1 = None if args.no_one_cpu else measure_latency(cfg, cpu=min(os.sched_getaffinity(0)))
    tp1k = measure_1k_and_memory(cfg)
    tp1m = measure_1m(cfg)
    elapsed = time.monotonic() - started
    progress(f"done in {elapsed:.1f} s")

    rows = build_rows(lat, lat1, tp1k, tp1m)
    print(format_table(rows), flush=True)
    if args.json:
        report = {
            "rows": [r.as_dict() for r in rows],
            "latency": lat,
            "latency_one_cpu": lat1,
            "sidecar_src": cfg.sidecar_src,
            "throughput_1k": tp1k,
            "throughput_1m": tp1m,
            "seconds": elapsed,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
            "notes": "MB/s uses MB = 10**6 bytes; throughput is end to end (each frame crosses the sidecar twice)",
        }
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    if args.strict and not all(r.passed is not False for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
