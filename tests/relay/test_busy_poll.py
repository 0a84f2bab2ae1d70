"""Busy-poll: after forwarding what the other side will answer, the relay
polls for the answer for a short window, then sleeps.

The window trades CPU for latency (``make bench`` measures both); what must
hold whatever the machine: the sidecar polls only within the window, sleeps
when idle, reports the window it really uses, and never polls on one CPU,
where it would take the CPU the answering process needs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sidecar.relay.pipes import effective_busy_poll
from tests.support.harness import ROOT as REPO
from tools.bench import bench_env, cpu_seconds, echo_child_argv

TICK = 1 / os.sysconf("SC_CLK_TCK")
MULTI_CPU = len(os.sched_getaffinity(0)) > 1
ROUND_TRIPS = 8


class Sidecar:
    def __init__(self, *flags: str, cpus: set[int] | None = None, env: dict[str, str] | None = None) -> None:
        argv = [sys.executable, "-m", "sidecar", "--log-level", "warning", *flags, "proxy", "--", *echo_child_argv()]
        preexec = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**bench_env(), **(env or {})}, cwd=REPO, preexec_fn=preexec
        )
        self._n = 0

    def call(self, method: str, params: object = None) -> dict:
        self._n += 1
        msg = {"id": self._n, "method": method, **({} if params is None else {"params": params})}
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert reply["id"] == self._n, reply
        return reply

    def status(self) -> dict:
        return self.call("sidecar/status")["result"]

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    def close(self) -> None:
        assert self.proc.stdin
        self.proc.stdin.close()
        self.proc.wait(15)
        assert self.proc.stdout
        self.proc.stdout.close()


def test_window_is_off_on_one_cpu_and_when_asked(monkeypatch):
    assert effective_busy_poll(0.0) == 0.0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert effective_busy_poll(300e-6) == 0.0
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert effective_busy_poll(300e-6) == 300e-6


def test_status_reports_the_window_in_use_from_flag_env_and_default():
    runs = {
        "default": Sidecar(),
        "flag": Sidecar("--busy-poll-us", "1234"),
        "env": Sidecar(env={"CODEX_SIDECAR_BUSY_POLL_US": "0"}),
        "one cpu": Sidecar("--busy-poll-us", "1234", cpus={min(os.sched_getaffinity(0))}),
    }
    try:
        got = {name: s.status()["busyPollMicroseconds"] for name, s in runs.items()}
    finally:
        for s in runs.values():
            s.close()
    assert got == {"default": 300 if MULTI_CPU else 0, "flag": 1234 if MULTI_CPU else 0, "env": 0, "one cpu": 0}


@pytest.mark.skipif(not MULTI_CPU, reason="busy-poll is off on a single CPU")
def test_it_polls_within_the_window_only_and_sleeps_when_idle():
    """A 100 ms window shows up as CPU time right after a round trip, and
    nowhere else: not without a window, not once the window is over."""
    polling, sleeping = Sidecar("--busy-poll-us", "100000"), Sidecar("--busy-poll-us", "0")
    try:
        for s in (polling, sleeping):
            assert s.call("bench/echo", {"x": 1})["result"] == {"x": 1}
        time.sleep(1.0)  # startup and the first window are over
        after: dict[str, float] = {}
        idle: dict[str, float] = {}
        for name, s in (("polling", polling), ("sleeping", sleeping)):
            c0 = s.cpu()
            for x in range(ROUND_TRIPS):  # each round trip opens a window
                s.call("bench/echo", {"x": x})
                time.sleep(0.15)
            time.sleep(0.3)
            c1 = s.cpu()
            time.sleep(1.0)
            after[name], idle[name] = c1 - c0, s.cpu() - c1
    finally:
        polling.close()
        sleeping.close()
    # ~0.8 s of polling wanted after the round trips (eight 100 ms windows);
    # without a window, and after it, round trips or idle cost ~no CPU. A
    # loaded machine gives the poller a share of its windows, never nothing:
    # eight windows, so that even a 1/20 share of a CPU is several clock
    # ticks, and compared with the sleeping run, not with the clock.
    assert after["polling"] >= after["sleeping"] + 2 * TICK, after
    assert after["sleeping"] <= 0.02 + TICK, after
    assert idle["polling"] <= 0.02 + TICK and idle["sleeping"] <= 0.02 + TICK, idle


@pytest.mark.skipif(not MULTI_CPU, reason="busy-poll is off on a single CPU")
def test_notifications_do_not_start_a_window():
    """A stream of notifications (what codex sends during a turn) expects no
    answer: the sidecar must not poll after it and take CPU from codex."""
    polling, sleeping = Sidecar("--busy-poll-us", "100000"), Sidecar("--busy-poll-us", "0")
    spent: dict[str, float] = {}
    try:
        for s in (polling, sleeping):
            s.call("bench/echo", {"x": 1})
        time.sleep(1.0)
        for name, s in (("polling", polling), ("sleeping", sleeping)):
            assert s.proc.stdin
            c0 = s.cpu()
            for i in range(5):  # five bursts, each of which would start a 100 ms window
                s.proc.stdin.write(b'{"method":"bench/note","params":{"i":%d}}\n' % i)
                s.proc.stdin.flush()
                time.sleep(0.12)
            spent[name] = s.cpu() - c0
            assert s.call("bench/echo", {"x": 2})["result"] == {"x": 2}  # still relaying
    finally:
        polling.close()
        sleeping.close()
    # Five windows of polling would be ~0.5 s of CPU on a quiet machine.
    # Relaying the notifications costs the same with or without a window, so
    # the sidecar that has one is compared with the one that has none (the
    # cost of relaying swings with the machine's load; the difference does not).
    assert spent["polling"] <= spent["sleeping"] + 0.1, spent
