#!/usr/bin/env python3
"""fake_codex.py behind a relay that forces one interleaving: a client's
thread/read reaching Codex right after the sidecar's rebuild revert, with
both answers arriving in one pipe read (as a busy pipe delivers them).

* the first client thread/read (numeric id) is held until a thread/revert
  has gone by, then forwarded right after it;
* Codex's output from the revert's response to the read's response is
  written in one write.
"""
import json
import os
import subprocess
import sys
import threading

FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_codex.py")
child = subprocess.Popen([sys.executable, FAKE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
out = sys.stdout.buffer
lock = threading.Lock()
state = {"revert_id": None, "read_id": None, "held_read": None, "buffer": None}


def pump_out():
    for line in child.stdout:
        try:
            msg = json.loads(line)
        except ValueError:
            msg = {}
        with lock:
            if "method" not in msg and msg.get("id") is not None and msg.get("id") == state["revert_id"]:
                state["buffer"] = [line]
                continue
            if state["buffer"] is not None:
                state["buffer"].append(line)
                if "method" not in msg and msg.get("id") == state["read_id"]:
                    out.write(b"".join(state["buffer"]))
                    out.flush()
                    state["buffer"] = None
                continue
        out.write(line)
        out.flush()
    out.flush()


pump = threading.Thread(target=pump_out, daemon=True)
pump.start()
for line in sys.stdin.buffer:
    try:
        msg = json.loads(line)
    except ValueError:
        msg = {}
    with lock:
        if msg.get("method") == "thread/read" and isinstance(msg.get("id"), int) and state["revert_id"] is None:
            state["held_read"] = line
            state["read_id"] = msg["id"]
            continue
        if msg.get("method") == "thread/revert":
            state["revert_id"] = msg.get("id")
            child.stdin.write(line)
            if state["held_read"] is not None:
                child.stdin.write(state["held_read"])
                state["held_read"] = None
            continue
    child.stdin.write(line)
child.stdin.close()
pump.join()
