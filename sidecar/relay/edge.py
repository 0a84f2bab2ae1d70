"""The child's edge: the one optional object that maps thread ids there.

The relay knows nothing of what an edge does (today: moving a client's
thread onto other Codex threads, ``sidecar.history.backing.BackingThreads``); it only
calls these methods at fixed points, on bytes, and forwards what they return.
Every method returns its argument itself when it changes nothing, so the
relay can tell "unchanged" by identity and skip a parse (or an encode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import trio

if TYPE_CHECKING:
    from protocol import Envelope

    from .messages import PendingRequest


class Edge(Protocol):
    maps_to_codex: bool
    """Whether :meth:`to_codex` can change a line (an attribute, read on
    every line to the child: while it is false the relay does not call it)."""

    @property
    def active(self) -> bool:
        """Whether notifications need looking at (an idle edge costs nothing)."""
        ...

    def to_codex(self, line: bytes) -> bytes:
        """A line on its way to Codex: the client's request or the sidecar's."""
        ...

    def request_params(self, params: Any) -> Any:
        """A client request's decoded params on their way to Codex, mapped
        (the argument itself, unmodified, when nothing maps)."""
        ...

    def response(self, line: bytes, method: str | None) -> bytes:
        """A response from Codex to a request of ``method`` (None: not known),
        as its requester (the client or the sidecar) gets it."""
        ...

    def notification(self, line: bytes) -> bytes | None:
        """A notification or server request from Codex as the client gets it,
        or None when the client must not see it."""
        ...

    def sidecar_request(self, call_id: str, method: str) -> None:
        """The sidecar sent a request of its own (before it leaves)."""
        ...

    def sidecar_answered(self, call_id: str) -> list[Any]:
        """Codex answered the sidecar's request ``call_id`` (its ``on_result``
        has run): the held answers that go on now, in order."""
        ...

    def hold(self, method: str, answer: Any) -> float | None:
        """Codex answered a client's request of ``method``: None to go on
        now, or the seconds at most the relay holds ``answer`` (opaque to
        the edge) until :meth:`sidecar_answered` or :meth:`overdue` hands
        it back. Other frames go on meanwhile."""
        ...

    def overdue(self, answer: Any) -> list[Any]:
        """``answer``'s seconds are over: the held answers that go on now."""
        ...

    def release_all(self) -> list[Any]:
        """The child exited: every held answer."""
        ...

    def fragment_to_codex(self, data: bytes) -> bytes:
        """A piece of a line too long to parse, on its way to Codex."""
        ...

    def fragment_to_client(self, data: bytes) -> bytes:
        """The same on its way to the client (never dropped: it cannot be taken back)."""
        ...


class Held:
    """A client's answer the edge holds (opaque to it), and the cancel scope
    of the task that bounds its wait: cancelled when the answer goes on."""

    __slots__ = ("env", "line", "pending", "timer")

    def __init__(self, env: Envelope, line: bytes, pending: PendingRequest) -> None:
        self.env = env
        self.line = line
        self.pending = pending
        self.timer = trio.CancelScope()
