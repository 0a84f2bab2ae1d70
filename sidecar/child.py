"""The app-server child process.

Spawned with ``subprocess.Popen`` from the thread trio runs on, the main
thread, and not through ``trio.lowlevel.open_process``: Linux ties
``PR_SET_PDEATHSIG`` to the *thread* that forked, and trio forks from a
worker thread that exits after 10 idle seconds, which would SIGTERM codex
ten seconds into every session. The main thread lives as long as the
sidecar, so the death signal means what it should: "the sidecar is gone".
Exit is awaited on a pidfd, so no thread waits and nothing polls.

:func:`start_process` needs no trio: the CLI starts codex before it imports
the rest of the sidecar and loads the engine, so that codex's own start-up
(~0.2 s) runs meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess

TYPE_CHECKING = False  # typing costs ~3 ms before codex is spawned (sidecar.launch)
if TYPE_CHECKING:
    from typing import Any

    import trio

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals the sidecar passes on to codex (and does not die of itself)."""


def forward_signals_to(popen: subprocess.Popen[bytes]) -> dict[int, Any]:
    """Until the relay's own receiver takes over: pass :data:`FORWARDED_SIGNALS`
    straight on to ``popen`` (a signal between codex's start and the relay's
    would otherwise kill the sidecar, and codex only by its death signal).
    Returns the handlers it replaced."""

    def forward(signum: int, _frame: Any) -> None:
        if popen.poll() is None:
            try:
                popen.send_signal(signum)
            except ProcessLookupError:
                pass

    return {signum: signal.signal(signum, forward) for signum in FORWARDED_SIGNALS}


def start_process(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` with piped stdin/stdout and inherited stderr, from the
    calling thread (the main thread: see the module's docstring).

    Raises ``FileNotFoundError``/``PermissionError`` as Popen does.
    """
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=None,
        env=env,
        close_fds=True,
        preexec_fn=_die_with_parent,
    )


class Child:
    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        import trio

        self._popen = popen
        self.pid = popen.pid
        assert popen.stdin is not None and popen.stdout is not None
        self.stdin = trio.lowlevel.FdStream(os.dup(popen.stdin.fileno()))
        self.stdout = trio.lowlevel.FdStream(os.dup(popen.stdout.fileno()))
        popen.stdin.close()
        popen.stdout.close()
        self._pidfd = os.pidfd_open(popen.pid)
        self._exited: trio.Event | None = None

    @classmethod
    def spawn(cls, argv: list[str], env: dict[str, str] | None = None) -> Child:
        """:func:`start_process`, wrapped."""
        return cls(start_process(argv, env))

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def wait(self) -> int:
        """The exit status; any number of tasks may wait (one watches the pidfd)."""
        import trio

        while self._popen.poll() is None:
            if self._exited is not None:
                await self._exited.wait()  # another task watches; re-check after
                continue
            self._exited = trio.Event()
            try:
                await trio.lowlevel.wait_readable(self._pidfd)
            finally:
                exited, self._exited = self._exited, None
                exited.set()
        return self._popen.returncode

    def send_signal(self, signum: int) -> None:
        if self._popen.poll() is None:
            self._popen.send_signal(signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        try:
            os.close(self._pidfd)
        except OSError:
            pass


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM me if the sidecar dies (e.g. SIGKILL)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass
