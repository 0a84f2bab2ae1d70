"""The router's bookkeeping, sans I/O: requests in flight and gated threads.

* :class:`PendingTable`: client requests Codex has not answered, keyed by
  the id Codex sees; a client id inside the sidecar's own id space travels
  under an alias and comes back as itself.
* :class:`InternalCalls`: the sidecar's own requests, and for a while those
  that timed out but still want their answer.
* :class:`Gates`: threads whose later requests wait behind one a hook holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from protocol import IdSpace, RpcId

from .messages import PendingRequest, RpcError

LATE_CALLS = 64
"""Timed-out internal calls whose late answer is still awaited (oldest dropped)."""


class PendingTable:
    __slots__ = ("ids", "_by_wire")

    def __init__(self, ids: IdSpace) -> None:
        self.ids = ids
        self._by_wire: dict[RpcId, PendingRequest] = {}

    def open(self, client_id: RpcId, method: str) -> PendingRequest:
        """Take a client request in: its wire id (an alias when the client's
        id lies in the sidecar's space) is what goes to Codex."""
        wire_id = self.ids.alias_client_id(client_id) if IdSpace.is_reserved(client_id) else client_id
        pending = PendingRequest(client_id, method, wire_id)
        self._by_wire[wire_id] = pending
        return pending

    def close(self, wire_id: RpcId) -> PendingRequest | None:
        """The request answered under ``wire_id``, forgotten (alias included)."""
        pending = self._by_wire.pop(wire_id, None)
        if pending is not None and pending.wire_id is not pending.client_id:
            self.ids.resolve_alias(pending.wire_id)  # type: ignore[arg-type]
        return pending

    def find(self, client_id: RpcId) -> PendingRequest | None:
        """The pending request with the client's id ``client_id``."""
        if not IdSpace.is_reserved(client_id):
            return self._by_wire.get(client_id)
        for p in self._by_wire.values():
            if p.client_id == client_id and p.wire_id is not p.client_id:
                return p
        return None

    def is_alias(self, wire_id: RpcId) -> bool:
        return self.ids.is_alias(wire_id)

    def take_all(self) -> list[PendingRequest]:
        """Every pending request, forgotten (the child is gone)."""
        out = list(self._by_wire.values())
        for pending in out:
            self.close(pending.wire_id)
        return out

    def methods(self) -> set[str]:
        return {p.method for p in self._by_wire.values()}

    def __len__(self) -> int:
        return len(self._by_wire)

    def __iter__(self) -> Iterator[PendingRequest]:
        return iter(list(self._by_wire.values()))


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


class Gates:
    """Threads gated by holders, and the lines waiting on each, in order."""

    __slots__ = ("_gates",)

    def __init__(self) -> None:
        self._gates: dict[str, tuple[set[Any], list[bytes]]] = {}

    def hold(self, thread_id: str, holder: Any) -> None:
        self._gates.setdefault(thread_id, (set(), []))[0].add(holder)

    def gated(self, thread_id: str) -> bool:
        return thread_id in self._gates

    def park(self, thread_id: str, line: bytes) -> None:
        self._gates[thread_id][1].append(line)

    def release(self, thread_id: str, holder: Any) -> list[bytes]:
        """``holder`` lets go; when it was the last, the thread's waiting lines
        in the order they came (and the thread is no longer gated)."""
        gate = self._gates.get(thread_id)
        if gate is None:
            return []
        gate[0].discard(holder)
        if gate[0]:
            return []
        del self._gates[thread_id]
        return gate[1]

    def release_all(self) -> list[bytes]:
        gates, self._gates = self._gates, {}
        return [line for _holders, lines in gates.values() for line in lines]

    @property
    def waiting(self) -> int:
        """Lines waiting behind a gate."""
        return sum(len(lines) for _holders, lines in self._gates.values())

    def __len__(self) -> int:
        """Gated threads."""
        return len(self._gates)
