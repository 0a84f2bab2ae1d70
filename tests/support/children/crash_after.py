"""Test child: reads N lines, then dies (exit status or a signal), unanswered."""
import os
import signal
import sys

n = int(sys.argv[1])
how = sys.argv[2]  # "exit:STATUS" or "signal:NAME"
for _ in range(n):
    if not sys.stdin.buffer.readline():
        break
sys.stdout.buffer.write(b'{"method":"child/lastWords","params":{}}\n')
sys.stdout.buffer.flush()
kind, _, arg = how.partition(":")
if kind == "signal":
    os.kill(os.getpid(), getattr(signal, arg))
sys.exit(int(arg))
