"""The relay's settings: what the shell and the router are told at start."""

from __future__ import annotations

import msgspec


class ProxyOptions(msgspec.Struct):
    max_line: int = 64 * 1024 * 1024
    eof_grace: float = 2.0
    """Seconds the child gets to exit on its own after the client hangs up."""
    kill_grace: float = 3.0
    """Seconds between SIGTERM and SIGKILL when the child lingers."""
    high_water: int = 1024 * 1024
    forward_signals: bool = True
    busy_poll: float = 300e-6
    """Seconds a reader keeps polling its pipe for an answer it expects (a
    response, or the client's next request) before it sleeps in epoll;
    0 = sleep at once. See :func:`receiver`."""
    engine_reads: tuple[str, ...] | None = None
    """When the sidecar speaks for an engine, the notifications its
    lifecycle reads (``sidecar.rows.notifications_read(METHODS)``): it declares
    them to codex with the experimental API, and keeps the client's
    connection as the client negotiated it (:mod:`sidecar.relay.negotiation`).
    None: no engine, the client's negotiation passes as it is."""
