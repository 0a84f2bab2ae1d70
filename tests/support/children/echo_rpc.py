"""Test child: echoes every line; answers each request after echoing it.

Writes every byte it received to $ECHO_RPC_LOG (if set), so a test can check
what reached the child byte for byte. Answers to ids under the sidecar's own
prefix carry the id it saw, so a test can see aliasing at work.
"""
import json
import os
import sys

log = open(os.environ["ECHO_RPC_LOG"], "ab", buffering=0) if os.environ.get("ECHO_RPC_LOG") else None
out = sys.stdout.buffer
quiet = os.environ.get("ECHO_RPC_QUIET") == "1"  # answer requests without echoing them
for line in sys.stdin.buffer:
    if log:
        log.write(line)
    try:
        msg = json.loads(line)
    except ValueError:
        msg = None
    if not (quiet and isinstance(msg, dict) and "id" in msg and "method" in msg):
        out.write(line if line.endswith(b"\n") else line + b"\n")
    if isinstance(msg, dict) and "id" in msg and "method" in msg:
        result = {"method": msg["method"], "sawId": msg["id"]}
        if msg["method"] == "initialize":
            result["userAgent"] = "echo_rpc/0.169.0 (Linux; test)"
        out.write(json.dumps({"id": msg["id"], "result": result}).encode() + b"\n")
    out.flush()
