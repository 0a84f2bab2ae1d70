"""A thread's session in this process: its records, its transitions and
what its processes learned are :mod:`sidecar.thread`'s (their one owner),
named here too; the trio primitives the lifecycle's jobs wait on are
:class:`ThreadSync`; the params of requests whose answers the lifecycle
reads are :class:`RequestParams`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from ..thread.learned import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_TOKEN_RESERVE,
    MIN_PROMPT_BUDGET_RATIO,
    MIN_PROMPT_BUDGET_TOKENS,
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
    "DEFAULT_TOKEN_RESERVE",
    "MIN_PROMPT_BUDGET_RATIO",
    "MIN_PROMPT_BUDGET_TOKENS",
    "AdditionSent",
    "BootstrapFailed",
    "Bootstrapped",
    "Journal",
    "Learned",
    "LearnedEvent",
    "LearnedMachine",
    "MaintainedOnOpening",
    "RequestParams",
    "Restored",
    "RevertNoise",
    "SessionChanged",
    "ThreadSession",
    "ThreadSync",
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


class ThreadSync:
    """A thread's trio primitives, which its :class:`ThreadSession` holds but
    does not own: ``ready`` (the session is open), the one-turn-at-a-time
    ``slot`` and ``reverts_answered``."""

    def __init__(self) -> None:
        self.ready = trio.Event()
        self.slot = trio.Semaphore(1)
        self.reverts_answered = trio.Event()

    def revert_sent(self) -> None:
        """A client revert is unanswered: turns wait for ``reverts_answered`` again."""
        self.reverts_answered = trio.Event()


def new_session(thread_id: str, session_key: str, path: Path) -> ThreadSession:
    """A thread's state with fresh trio primitives."""
    return ThreadSession(thread_id, session_key, path, ThreadSync())


class RequestParams:
    """The params of client requests whose answers the lifecycle reads
    (thread/start, resume, fork, revert, ...), by client request id."""

    def __init__(self) -> None:
        self._params: dict[Any, dict[str, Any]] = {}

    def remember(self, client_id: Any, params: Any) -> None:
        if isinstance(params, dict):
            self._params[client_id] = params

    def get(self, client_id: Any) -> dict[str, Any] | None:
        return self._params.get(client_id)

    def pop(self, client_id: Any) -> dict[str, Any] | None:
        return self._params.pop(client_id, None)
