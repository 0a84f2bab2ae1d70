"""Stopping codex and passing it the sidecar's signals: the child's side of
the shell's tasks (I/O, trio).

Codex stops the way a client stops it: its stdin closes. One that ignores
that gets SIGTERM after ``eof_grace`` seconds, then SIGKILL after
``kill_grace`` more. The signals a supervisor sends the sidecar
(:data:`~sidecar.child.FORWARDED_SIGNALS`) go on to codex while it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from ..child import FORWARDED_SIGNALS, Child

log = logging.getLogger("codex_sidecar.proxy")


async def stop_child(process: Child, close_stdin: Callable[[], None], eof_grace: float, kill_grace: float) -> None:
    """Close the child's stdin, then insist."""
    close_stdin()
    with trio.move_on_after(eof_grace):
        await process.wait()
        return
    if process.returncode is None:
        log.warning("child ignored stdin EOF; sending SIGTERM")
        process.terminate()
    with trio.move_on_after(kill_grace):
        await process.wait()
        return
    if process.returncode is None:
        log.warning("child ignored SIGTERM; sending SIGKILL")
        process.kill()


async def forward_signals(process: Child) -> None:
    """Until cancelled: each signal of :data:`FORWARDED_SIGNALS` the sidecar
    gets goes to the child while it runs."""
    with trio.open_signal_receiver(*FORWARDED_SIGNALS) as signals:
        async for signum in signals:
            if process.returncode is None:
                log.info("forwarding signal", extra={"fields": {"signal": signum}})
                try:
                    process.send_signal(signum)
                except ProcessLookupError:
                    pass
