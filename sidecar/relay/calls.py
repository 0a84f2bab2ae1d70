"""The sidecar's own requests to codex, sans I/O: each one's id in the
sidecar's space, its settling, and for a while those that timed out but
still want their answer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocol import IdSpace

from .messages import RpcError

LATE_CALLS = 64
"""Timed-out internal calls whose late answer is still awaited (oldest dropped)."""


class InternalCall:
    """One request the sidecar sent; ``notify`` runs once it is settled."""

    __slots__ = ("id", "method", "on_result", "notify", "result", "error", "settled")

    def __init__(
        self,
        call_id: str,
        method: str,
        on_result: Callable[[Any], None] | None = None,
        notify: Callable[[], Any] | None = None,
    ) -> None:
        self.id = call_id
        self.method = method
        self.on_result = on_result
        """Run as the answer is read, before any later frame is."""
        self.notify = notify
        self.result: Any = None
        self.error: RpcError | None = None
        self.settled = False

    def settle(self, result: Any = None, error: RpcError | None = None) -> None:
        self.result, self.error, self.settled = result, error, True
        if self.notify is not None:
            self.notify()


class InternalCalls:
    __slots__ = ("ids", "_live", "_late")

    def __init__(self, ids: IdSpace) -> None:
        self.ids = ids
        self._live: dict[str, InternalCall] = {}
        self._late: dict[str, InternalCall] = {}
        """Timed-out calls whose answer still runs their ``on_result``."""

    def open(self, method: str, on_result: Callable[[Any], None] | None = None, notify: Callable[[], Any] | None = None) -> InternalCall:
        call = InternalCall(self.ids.new_internal(), method, on_result, notify)
        self._live[call.id] = call
        return call

    def live(self, call_id: str) -> InternalCall | None:
        return self._live.get(call_id)

    def take_late(self, call_id: str) -> InternalCall | None:
        return self._late.pop(call_id, None)

    def end(self, call: InternalCall, timed_out: bool = False) -> None:
        """Its requester stopped waiting; after a timeout a call with an
        ``on_result`` still gets its answer (the last :data:`LATE_CALLS`)."""
        self._live.pop(call.id, None)
        if timed_out and not call.settled and call.on_result is not None:
            self._late[call.id] = call
            while len(self._late) > LATE_CALLS:
                del self._late[next(iter(self._late))]  # never answered: let go of the oldest

    def fail_all(self, error: RpcError) -> None:
        calls, self._live = self._live, {}
        for call in calls.values():
            call.settle(error=error)
