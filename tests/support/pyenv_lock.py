"""Did the test run leave pyenv's rehash lock behind?

``pyenv rehash`` (run by ``eval "$(pyenv init -)"`` in a login shell, such
as the one codex starts to snapshot the user's shell) takes a lock by
creating ``$PYENV_ROOT/shims/.pyenv-shim`` and removes it when it ends. A
SIGKILL in between leaves it behind, and every later rehash waits 60 s for
it: codex sessions with the real HOME stall and OpenClaw's 60 s deadlines
fail. The suite must leave the machine as it found it: a lock that appeared
during the run and is still there once any rehash in flight had time to
finish is a failure of the run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

Stamp = tuple[int, int] | None
"""(inode, mtime in ns) of the lock, None when there is none."""

SETTLE = 15.0
"""Seconds a lock found at the end may take to go (a rehash in flight holds
it for well under a second)."""


def lock_path(env: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if env is None else env
    root = env.get("PYENV_ROOT") or os.path.join(env.get("HOME", "~"), ".pyenv")
    return Path(os.path.expanduser(root)) / "shims" / ".pyenv-shim"


def stamp(path: Path) -> Stamp:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


def stale_lock(path: Path, before: Stamp, *, settle: float = SETTLE, now: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> bool:
    """True when a lock that was not there before the run (or was another
    one) is still there, unchanged, ``settle`` seconds from now."""
    after = stamp(path)
    if after is None or after == before:
        return False
    deadline = now() + settle
    while now() < deadline:
        sleep(0.2)
        current = stamp(path)
        if current is None or current == before:
            return False
        if current != after:  # a new rehash took it: give that one its time
            after, deadline = current, now() + settle
    return True
