"""The child a sidecar starts before its imports, and what may know of it.

:mod:`sidecar.launch` (the console entry point) starts the child it is sure
a session will run before anything heavy is imported; the session (the CLI,
or :mod:`sidecar.serve`) then takes it (:func:`adopt`) or has it ended
(:func:`discard`). This module holds that child between the two, with what
the entry point, the settings and the CLI share about it: the environment
mark of a child a sidecar started (:data:`ACTIVE_ENV`, :func:`is_self`,
:func:`child_env`) and whether codex's argv is an app-server session
(:func:`serves_app_server`).

Standard library only, and its cheapest modules (``tests/cli/test_launch.py``
checks what the entry point imports, this module included).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

TYPE_CHECKING = False  # typing costs ~3 ms before codex is spawned (sidecar.launch)
if TYPE_CHECKING:
    from typing import Any

ACTIVE_ENV = "CODEX_SIDECAR_ACTIVE"
"""Set in the child's environment, so a sidecar that would spawn itself can tell
(:data:`sidecar.config.ACTIVE_ENV` is this)."""

NOT_A_SESSION = frozenset({"-h", "--help", "-V", "--version", "help", "daemon", "generate-ts", "generate-json-schema", "--print-startup-config"})
"""Words after ``app-server`` (codex 0.169.0's ``app-server --help``) that
print something and exit instead of speaking JSON-RPC on stdio."""


def serves_app_server(codex_args: tuple[str, ...] | list[str]) -> bool:
    """Whether codex's argv starts an app-server session (to relay), rather
    than asking for help or a version, generating bindings, managing the
    daemon, or running another codex command."""
    args = list(codex_args)
    if "--" in args:
        args = args[: args.index("--")]
    if any(a in ("-h", "--help", "-V", "--version") for a in args) or "app-server" not in args:
        return False
    return not any(a in NOT_A_SESSION for a in args[args.index("app-server") + 1 :])


def is_self(path: str) -> bool:
    """True for this program or a console script that launches it."""
    real = os.path.realpath(path)
    if sys.argv and sys.argv[0] and real == os.path.realpath(sys.argv[0]):
        return True
    try:
        with open(real, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!") and (b"sidecar.cli" in head or b"sidecar.launch" in head)


class EarlyChild:
    """A child started before the CLI ran: what runs, with which environment,
    and the signal handlers :func:`~sidecar.child.forward_signals_to` replaced.
    (A plain class: ``dataclasses`` costs ~8 ms of imports before the spawn.)"""

    __slots__ = ("argv", "env", "handlers", "plan", "popen")

    def __init__(self, popen: subprocess.Popen[bytes], argv: list[str], env: dict[str, str], handlers: dict[int, Any], plan: Any = None) -> None:
        self.popen = popen
        self.argv = argv
        self.env = env
        self.handlers = handlers
        self.plan = plan


_early: EarlyChild | None = None


def keep(child: EarlyChild) -> EarlyChild:
    """Hold ``child`` until the session takes it or it is discarded."""
    global _early
    _early = child
    return child


def child_env() -> dict[str, str]:
    """The child's environment: the sidecar's, marked as started by a sidecar."""
    env = dict(os.environ)
    env[ACTIVE_ENV] = str(os.getpid())
    return env


def adopt(argv: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[bytes], dict[int, Any]] | None:
    """The early child and the handlers to restore once it is done, if it
    runs exactly ``argv`` with ``env``; else None, and any early child is
    ended first."""
    global _early
    early = _early
    if early is None:
        return None
    if early.argv == argv and early.env == env:
        _early = None
        return early.popen, early.handlers
    discard()
    return None


EOF_GRACE = 2.0
"""Seconds a discarded child gets to exit on its own after its stdin closes
(the relay's default ``eof_grace``: the settings may be what is wrong)."""
TERM_GRACE = 3.0
"""Then seconds between SIGTERM and SIGKILL (the relay's default ``kill_grace``)."""


def discard() -> None:
    """End the early child the CLI did not take as the relay ends codex when
    its client leaves: stdin closed, then SIGTERM after :data:`EOF_GRACE`,
    SIGKILL after :data:`TERM_GRACE` more; then the signal handlers are put
    back. Codex exits on its own at stdin EOF once started (~1 s): no signal
    cuts short the login shell it may be snapshotting (a pyenv rehash lock
    left behind stalls every later codex; docs/testing.md)."""
    global _early
    early, _early = _early, None
    if early is None:
        return
    popen = early.popen
    try:
        if popen.stdin is not None:
            popen.stdin.close()
        for sig, grace in ((None, EOF_GRACE), (signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, None)):
            if popen.poll() is not None:
                break
            if sig is not None:
                popen.send_signal(sig)
            try:
                popen.wait(grace)
            except subprocess.TimeoutExpired:
                continue
        if popen.stdout is not None:
            popen.stdout.close()
    finally:
        for signum, handler in early.handlers.items():
            signal.signal(signum, handler)
