"""The main job, end to end: the sidecar in front of a real codex app-server.

``make demo`` runs this. It starts the fake model on loopback, launches
``codex-sidecar app-server --listen stdio://`` exactly the way OpenClaw would
(the sidecar spawns the real codex as its child), runs a short scripted
conversation, and prints each turn's reply, what the model received (message
roles and sizes, read from the fake model's request bodies) and the sidecar's
``sidecar/status``. No account, no network beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import trio

from tools.client import AppServerClient
from tools.codex_home import find_codex_bin, make_codex_home
from tools.fake_model import FakeModel, ShellCall, Text

CONVERSATION = [
    ("Hi! In one sentence: what is a sidecar process?", [Text("A helper process that runs beside a main one and extends it without changing it.")]),
    ("Run `echo hello from codex` and tell me what it printed.", [ShellCall("echo hello from codex"), Text("It printed: hello from codex.")]),
    ("Summarise our conversation in five words.", [Text("Sidecar explained, command echoed.")]),
]


def describe_input(request: dict) -> list[str]:
    rows = []
    for item in request.get("input") or []:
        kind = item.get("type", "message")
        if kind == "message":
            size = sum(len(p.get("text", "")) for p in item.get("content") or [] if isinstance(p, dict))
            rows.append(f"{item.get('role', '?') + ' message':>20} {size:>6} chars")
        else:
            rows.append(f"{kind:>20} {len(json.dumps(item)):>6} bytes")
    return rows


async def run(codex_bin: str) -> int:
    work = Path(tempfile.mkdtemp(prefix="codex-sidecar-demo-"))
    record = work / "recording.jsonl"
    with FakeModel() as model:
        home = make_codex_home(work / "codex-home", model.base_url)
        env = dict(os.environ, CODEX_HOME=str(home), CODEX_SIDECAR_CODEX_BIN=codex_bin, CODEX_SIDECAR_RECORD=str(record))
        sidecar = [sys.executable, "-m", "sidecar", "app-server", "--listen", "stdio://"]
        print(f"$ CODEX_SIDECAR_CODEX_BIN={codex_bin} codex-sidecar app-server --listen stdio://")
        async with AppServerClient.spawn(sidecar, env=env, cwd=str(work)) as client:
            info = await client.initialize()
            print(f"initialize -> userAgent {info['userAgent']!r} (passed through untouched)\n")
            thread_id = await client.start_thread(cwd=str(work))
            for n, (prompt, replies) in enumerate(CONVERSATION, 1):
                before = len(model.requests)
                model.script(*replies)
                done = await client.run_turn(thread_id, prompt, timeout=120)
                turn = done["turn"]
                texts = [
                    n["params"]["item"].get("text", "")
                    for n in client.notifications
                    if n.get("method") == "item/completed"
                    and n["params"].get("turnId") == turn["id"]
                    and n["params"]["item"].get("type") == "agentMessage"
                ]
                print(f"── turn {n} ({turn['status']}) ─────────────────────────────")
                print(f"user:      {prompt}")
                for t in texts:
                    print(f"assistant: {t}")
                for i, req in enumerate(model.requests[before:], 1):
                    print(f"  model request {i}: {len(req.get('input') or [])} input items")
                    for row in describe_input(req):
                        print(f"    {row}")
                print()
            status = await client.request("sidecar/status")
            print("sidecar/status:")
            print(json.dumps(status, indent=2))
        print(f"\nrecording of every frame: {record}")
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codex-bin", default=find_codex_bin())
    args = ap.parse_args()
    if not args.codex_bin:
        sys.exit("codex binary not found: run `make setup` or pass --codex-bin")
    sys.exit(trio.run(run, os.path.abspath(args.codex_bin)))


if __name__ == "__main__":
    main()
