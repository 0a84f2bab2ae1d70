"""What hooks see and return: messages, decisions, pending requests, errors.

Plain values, no I/O: the router hands these to hooks and the lifecycle
builds on them.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol import CHILD_EXITED, OUTCOME_UNKNOWN, Envelope, RpcId, decode


class _Handled:
    __slots__ = ()

    def __repr__(self) -> str:
        return "HANDLED"


HANDLED = _Handled()
"""Hook decision: the hook took the message; the relay must not forward it."""

Decision = None | bytes | _Handled
"""A hook returns None (forward unchanged), new bytes (forward these), or HANDLED."""


_UNDECODED: Any = object()


@dataclass(slots=True)
class Message:
    """One parsed frame: its routing envelope and its exact bytes.

    ``params()`` decodes the params once, however many hooks read them, and
    hands every caller the same object: hooks read it and never modify it
    (a change goes out as new bytes, built from a copy).
    """

    env: Envelope
    line: bytes
    _params: Any = field(default=_UNDECODED, repr=False, compare=False)

    @property
    def id(self) -> RpcId:
        return self.env.id  # type: ignore[return-value]

    @property
    def method(self) -> str:
        return self.env.method  # type: ignore[return-value]

    def params(self) -> Any:
        if self._params is _UNDECODED:
            self._params = decode(self.env.params) if self.env.params else None
        return self._params

    def params_if_read(self) -> Any:
        """The params a hook already decoded, or None: never decodes."""
        return None if self._params is _UNDECODED else self._params

    def result(self) -> Any:
        return decode(self.env.result) if self.env.result else None

    def error(self) -> Any:
        return decode(self.env.error) if self.env.error else None


@dataclass(slots=True)
class PendingRequest:
    """A client request the sidecar has taken in and not yet seen answered."""

    client_id: RpcId
    method: str
    wire_id: RpcId
    """The id Codex sees: the client's, or an alias when the client's lies
    in the sidecar's own id space."""
    forwarded: bool = False
    """Handed to codex: if codex dies now, whether it ran is unknown."""
    params: Any = None
    """The client's params as its request hooks read them (None when no hook
    read them: the router never decodes them for this)."""

    @property
    def thread_id(self) -> str | None:
        """The client's ``params.threadId``, when the hooks read the params."""
        thread_id = self.params.get("threadId") if isinstance(self.params, dict) else None
        return thread_id if isinstance(thread_id, str) else None


class RpcError(Exception):
    """An error response to a request the sidecar itself sent, or one a
    ``sidecar/...`` control method raises to answer with."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


ClientRequestHook = Callable[[Message], Decision]
ServerMessageHook = Callable[[Message], Decision]
ResponseHook = Callable[[Message, PendingRequest], Decision]


@dataclass
class Hooks:
    """Interception points, by method name. Hooks run in order; the first
    HANDLED stops the chain, a returned ``bytes`` replaces the message for the
    hooks after it and for the wire."""

    client_requests: dict[str, list[ClientRequestHook]] = field(default_factory=dict)
    responses: dict[str, list[ResponseHook]] = field(default_factory=dict)
    server_notifications: dict[str, list[ServerMessageHook]] = field(default_factory=dict)
    server_requests: dict[str, list[ServerMessageHook]] = field(default_factory=dict)

    def on_client_request(self, method: str, hook: ClientRequestHook) -> None:
        self.client_requests.setdefault(method, []).append(hook)

    def on_response(self, method: str, hook: ResponseHook) -> None:
        """Responses (results and errors) to client requests of ``method``."""
        self.responses.setdefault(method, []).append(hook)

    def on_server_notification(self, method: str, hook: ServerMessageHook) -> None:
        self.server_notifications.setdefault(method, []).append(hook)

    def on_server_request(self, method: str, hook: ServerMessageHook) -> None:
        self.server_requests.setdefault(method, []).append(hook)


def exit_text(rc: int | None) -> str:
    if rc is None:
        return "codex app-server exited before answering"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"codex app-server was killed by {name} before answering"
    return f"codex app-server exited with status {rc} before answering"


def dead_child_error(pending: PendingRequest, rc: int | None) -> tuple[int, str, dict[str, Any]]:
    """Code, message and data for a request codex will never answer.

    -32001 tells Codex's and OpenClaw's clients "rejected before it was
    enqueued, safe to retry": true only of a request the sidecar never handed
    to codex. One codex had may have run, so it gets -32603 with
    ``outcome: "unknown"``, which no client retries on its own
    (docs/errors.md).
    """
    if pending.forwarded:
        text = exit_text(rc) + "; the request was delivered and may have taken effect"
        return OUTCOME_UNKNOWN, text, {"method": pending.method, "outcome": "unknown", "reason": "appServerExited"}
    text = exit_text(rc) + "; the request was not delivered"
    return CHILD_EXITED, text, {"method": pending.method, "outcome": "notDelivered", "reason": "appServerExited"}
