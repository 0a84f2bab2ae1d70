#!/usr/bin/env python3
"""Answers every request with a result of BIG_ANSWER_BYTES (default 3000)
bytes, echoing its id. With BIG_ANSWER_SPLIT=1 each answer is written in two
halves, BIG_ANSWER_PAUSE seconds apart (default 0.5): a line still open while
the relay has other things to say."""
import json
import os
import sys
import time

size = int(os.environ.get("BIG_ANSWER_BYTES", "3000"))
split = os.environ.get("BIG_ANSWER_SPLIT") == "1"
pause = float(os.environ.get("BIG_ANSWER_PAUSE", "0.5"))
for line in sys.stdin.buffer:
    msg = json.loads(line)
    if "id" not in msg or "method" not in msg:
        continue
    resp = json.dumps({"id": msg["id"], "result": {"blob": "x" * size}}).encode() + b"\n"
    if split:
        os.write(1, resp[: len(resp) // 2])
        time.sleep(pause)
        os.write(1, resp[len(resp) // 2 :])
    else:
        os.write(1, resp)
