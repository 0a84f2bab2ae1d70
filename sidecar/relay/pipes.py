"""Reading the pipes: a receive without per-read checkpoints, optional busy
polling while an answer is expected, and bigger pipe buffers.

The relay's hot path on the wire side; no routing decisions here.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Awaitable, Callable

import trio

READ_SIZE = 1 << 20
PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031


def effective_busy_poll(requested: float) -> float:
    """The busy-poll window actually used: none on a single CPU.

    Polling only pays when the peer that will answer runs on another CPU; on
    one CPU the poller would take the very CPU the peer needs.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return requested if requested > 0 and cpus > 1 else 0.0


class Activity:
    """When a reader was last told to expect data (``time.perf_counter``)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0.0

    def mark(self) -> None:
        self.last = time.perf_counter()


def receiver(
    stream: trio.abc.ReceiveStream, busy_poll: float = 0.0, activity: Activity | None = None
) -> Callable[[], Awaitable[bytes]]:
    """``stream.receive_some`` without its checkpoint before every read.

    For an fd-backed stream: read at once, park on the fd only when it has
    nothing, and yield to other tasks every few reads that did not park.

    With ``busy_poll`` > 0, a reader that finds its pipe empty within that
    many seconds of ``activity.last`` (marked when the router forwards
    something the other side will answer: a request, a server request, or a
    response the client may follow with its next request) keeps polling,
    yielding to every other task and to processes waiting for the CPU
    between polls, instead of parking. On a virtual machine waking a parked
    process costs tens of microseconds a hop and the sidecar adds two hops to
    every round trip; a quick answer is then picked up without a wake-up.
    Notifications (a turn's stream of events) never start a window, so
    polling does not take CPU from codex while it works, and an idle sidecar
    sleeps; the price is at most one window of CPU per request.
    """

    async def receive_some() -> bytes:
        return bytes(await stream.receive_some(READ_SIZE))

    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return receive_some
    fd = fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        # Regular files and ttys: epoll cannot wait on a file, and a short
        # read does not mean "drained"; the stream's own method is right.
        return receive_some
    unparked = 0
    drained = False
    act = activity if activity is not None else Activity()
    clock = time.perf_counter

    async def receive() -> bytes:
        nonlocal unparked, drained
        while True:
            if drained:
                # A short read from a pipe took all there was: don't ask again
                # just to hear EAGAIN, wait for more (or poll, in the window).
                drained = False
                if not (busy_poll and clock() - act.last < busy_poll):
                    unparked = 0
                    await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                if busy_poll and clock() - act.last < busy_poll:
                    # Let a process waiting for this CPU (the peer that will
                    # write to us, when CPUs are scarce) run first.
                    os.sched_yield()
                    await trio.lowlevel.checkpoint()
                    continue
                unparked = 0
                await trio.lowlevel.wait_readable(fd)
                continue
            drained = 0 < len(data) < READ_SIZE
            unparked += 1
            if unparked >= 8:
                unparked = 0
                await trio.lowlevel.checkpoint()
            return data

    return receive


def grow_pipe(stream: object) -> None:
    """Ask for a PIPE_SIZE buffer (Linux; capped by /proc/sys/fs/pipe-max-size)."""
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return
    try:
        import fcntl

        fcntl.fcntl(fileno(), _F_SETPIPE_SZ, PIPE_SIZE)
    except (OSError, ValueError, ImportError):
        pass  # not a pipe, or not Linux
