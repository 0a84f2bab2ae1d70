"""Replay a recorded session: a fake app-server and a causal client.

A recording (``--record``) lists every frame with its wire. Seen from the
app-server, frames on ``client>codex`` and ``sidecar>codex`` are inputs and
frames on ``codex>client`` and ``codex>sidecar`` are outputs. The fake
app-server (``python -m tools.replay FIXTURE``) walks the recording: it writes
each output as recorded and, where the recording shows an input, reads one
line from stdin first. The recording's order is causal (an input recorded
before an output was sent before that output existed), so this reproduces
the session without the codex binary and without timing.

``replay_plan`` gives the client's side of the same walk, so a test can
drive the sidecar with the recorded client frames, answering server requests
exactly when the recording did, and compare what comes out.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from sidecar.record import RecordEntry, read_recording

INPUTS = {"client>codex", "sidecar>codex"}
OUTPUTS = {"codex>client", "codex>sidecar"}


@dataclass(frozen=True)
class Step:
    """One frame of the client's walk: send it, or expect it."""

    send: bool
    line: bytes
    control: bool = False  # to or from the sidecar itself (sidecar/... methods)


def load(path: str | Path) -> list[RecordEntry]:
    return [e for e in read_recording(path) if e.line() is not None]


def replay_plan(path: str | Path) -> list[Step]:
    """The client's view: frames it sent and frames it received, in order."""
    plan = []
    for e in load(path):
        line = e.line()
        assert line is not None
        if e.dir == "client>codex":
            plan.append(Step(True, line))
        elif e.dir == "codex>client":
            plan.append(Step(False, line))
        elif e.dir == "client>sidecar":
            plan.append(Step(True, line, control=True))
        elif e.dir == "sidecar>client":
            plan.append(Step(False, line, control=True))
    return plan


def serve(path: str | Path, strict: bool = True) -> int:
    """Act as the app-server of the recording on stdin/stdout."""
    out = sys.stdout.buffer
    inp = sys.stdin.buffer
    for e in load(path):
        line = e.line()
        assert line is not None
        if e.dir in OUTPUTS:
            out.write(line + b"\n")
            out.flush()
        elif e.dir in INPUTS:
            got = inp.readline()
            if not got:
                return 0  # the client hung up early: nothing more to say
            if strict and not _same_request(got.rstrip(b"\n"), line):
                print(f"replay: input differs from the recording at seq {e.seq}", file=sys.stderr)
                return 2
    # Recording over: behave like an idle app-server until the client hangs up.
    while inp.readline():
        pass
    return 0


def _same_request(got: bytes, recorded: bytes) -> bool:
    """Same frame, allowing internal ids to differ (they are the sidecar's)."""
    if got == recorded:
        return True
    try:
        a, b = json.loads(got), json.loads(recorded)
    except ValueError:
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        a.pop("id", None)
        b.pop("id", None)
        return a == b
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fixture")
    ap.add_argument("--lenient", action="store_true", help="do not check inputs against the recording")
    args = ap.parse_args()
    sys.exit(serve(args.fixture, strict=not args.lenient))


if __name__ == "__main__":
    main()
