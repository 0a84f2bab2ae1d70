"""The relay's pipes, set up: how much one read takes, how big a pipe's
buffer is asked to be, and whether readers busy-poll at all.

The reader itself (:func:`sidecar.relay.shell.receiver`) stays in the
shell, and the marks it polls by (:class:`~sidecar.relay.router.Activity`:
when each side will answer) are the router's, which decides it: every line
the relay reads goes through them (see docs/architecture.md's walk); what is
decided once, when the relay starts, is here.
"""

from __future__ import annotations

import os

READ_SIZE = 1 << 20
"""The most one read of a pipe takes."""
PIPE_SIZE = 1 << 20
"""The buffer asked for each pipe (:func:`grow_pipe`)."""
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
