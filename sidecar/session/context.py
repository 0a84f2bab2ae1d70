"""What every part of the lifecycle works on, handed over as one value.

The lifecycle's jobs (``sidecar.lifecycle``), the rebuild strategies
(``sidecar.rebuild``) and the engine's tools (``sidecar.host``) all relay
through the same proxy, look threads up in the same table, read the same
settings and keep their files under the same state dir. Those four travel together; passing them one
by one made constructors of ten and twelve parameters.

It lives here, below ``lifecycle/``, ``rebuild/`` and ``host/``, because all
three take it and ``lifecycle/`` imports the other two. It holds only what
(nearly) every one of them uses: a job's own partners (the engine calls, the
rebuilder, another job) stay explicit parameters of that job.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import msgspec

from .options import LifecycleOptions
from .state import ThreadSession


class Routing(Protocol):
    """What the jobs ask of the relay's router (``sidecar.relay.Router``):
    send, forward or answer a line, gate a thread. Named here, on the floor
    that does no I/O, so that ``session/`` does not import the relay."""

    @property
    def hooks(self) -> Any: ...
    @property
    def pending(self) -> Any: ...
    def gate(self, thread_id: str, holder: Any) -> None: ...
    def ungate(self, thread_id: str, holder: Any) -> None: ...
    def forward_client_request(self, msg: Any) -> bool: ...
    def answer_client_request(self, client_id: Any, line: bytes) -> bool: ...
    def send_to_child(self, line: bytes, direction: str = ..., *, raw: bool = False) -> bool: ...
    def send_to_client(self, line: bytes, direction: str = ...) -> bool: ...


class Relay(Protocol):
    """What the jobs ask of the relay's shell (``sidecar.relay.Proxy``): its
    router, tasks, and the sidecar's own requests to Codex."""

    @property
    def router(self) -> Routing: ...
    @property
    def running(self) -> bool: ...
    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None: ...
    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        raw: bool = False,
        on_result: Callable[[Any], None] | None = None,
    ) -> Any: ...


class LifecycleContext(msgspec.Struct, frozen=True):
    """Frozen: who shares what is fixed at wiring; the thread table it
    points to is the shared, mutable state (a request's own state rides on
    the pending request: ``Message.note``)."""

    proxy: Relay
    """The relay: what a job sends to Codex or the client through, gates a thread with, spawns tasks on."""
    sessions: dict[str, ThreadSession]
    """The open threads by (client) thread id."""
    options: LifecycleOptions
    state_dir: Path
