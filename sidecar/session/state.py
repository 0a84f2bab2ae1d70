"""A thread's session in this process: its records, its transitions and
what its processes learned are :mod:`sidecar.thread`'s (their one owner),
named here too; :func:`new_session` gives a thread's state the trio
primitives the lifecycle's jobs wait on."""

from __future__ import annotations

from pathlib import Path

import trio

from ..thread.learned import (
    DEFAULT_CONTEXT_WINDOW,
    AdditionSent,
    BootstrapFailed,
    Bootstrapped,
    Journal,
    Learned,
    LearnedEvent,
    MaintainedOnOpening,
    Restored,
    SessionChanged,
    ToolsGiven,
    WindowReported,
    addition_digest,
    replay,
    restore,
)
from ..thread.state import LearnedMachine, RevertNoise, ThreadSession, TurnState, Unfollowed, log_fields, token_budget

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "AdditionSent",
    "BootstrapFailed",
    "Bootstrapped",
    "Journal",
    "Learned",
    "LearnedEvent",
    "LearnedMachine",
    "MaintainedOnOpening",
    "Restored",
    "RevertNoise",
    "SessionChanged",
    "ThreadSession",
    "ToolsGiven",
    "TurnState",
    "Unfollowed",
    "WindowReported",
    "addition_digest",
    "log_fields",
    "new_session",
    "replay",
    "restore",
    "token_budget",
]


def new_session(thread_id: str, session_key: str, path: Path) -> ThreadSession:
    """A thread's state with fresh trio primitives."""
    return ThreadSession(thread_id, session_key, path, trio.Event(), trio.Semaphore(1), trio.Event())

