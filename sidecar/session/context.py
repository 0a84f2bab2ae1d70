"""What every part of the lifecycle works on, handed over as one value.

The lifecycle's jobs (``sidecar.lifecycle``), the rebuild strategies
(``sidecar.rebuild``) and the engine's tools (``sidecar.host``) all relay
through the same proxy, look threads up in the same table, remember client
requests' params in the same place, read the same settings and keep their
files under the same state dir. Those five travel together; passing them one
by one made constructors of ten and twelve parameters.

It lives here, below ``lifecycle/``, ``rebuild/`` and ``host/``, because all
three take it and ``lifecycle/`` imports the other two. It holds only what
(nearly) every one of them uses: a job's own partners (the engine calls, the
rebuilder, another job) stay explicit parameters of that job.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from ..relay import Proxy
from .options import LifecycleOptions
from .state import RequestParams, ThreadSession


class LifecycleContext(msgspec.Struct, frozen=True):
    """Frozen: who shares what is fixed at wiring; the table and the request
    params it points to are the shared, mutable state."""

    proxy: Proxy
    """The relay: what a job sends to Codex or the client through, gates a thread with, spawns tasks on."""
    sessions: dict[str, ThreadSession]
    """The open threads by (client) thread id."""
    requests: RequestParams
    """A client request's params, kept from the request until its response."""
    options: LifecycleOptions
    state_dir: Path
