"""Test child: ignores stdin EOF; on SIGTERM records it and exits, unless told to ignore it too.

Once its handlers are in it says so on stdout, and in the file ``$STUBBORN_READY`` names if set."""
import os
import signal
import sys
import time

mark = sys.argv[1]
ignore_term = len(sys.argv) > 2 and sys.argv[2] == "ignore-term"
exit_code = int(sys.argv[3]) if len(sys.argv) > 3 else None


def on_term(signum, frame):
    with open(mark, "a") as f:
        f.write(f"signal {signum}\n")
    if not ignore_term:
        if exit_code is not None:
            os._exit(exit_code)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, on_term)
if os.environ.get("STUBBORN_READY"):  # a file for a test that cannot read the child's stdout
    open(os.environ["STUBBORN_READY"], "w").close()
sys.stdout.buffer.write(b'{"method":"child/ready","params":{}}\n')
sys.stdout.buffer.flush()
while True:
    sys.stdin.buffer.read()  # returns at EOF; keep running regardless
    time.sleep(0.05)
