"""The client held at start-up, sans I/O.

While the sidecar still imports its lifecycle and loads the engine, the
relay passes codex's start-up handshake (a first ``initialize``) and holds
every other client line, whole or in pieces, in order, until the release.
The shell asks :attr:`ClientHold.parked` (a plain attribute, so a steady
relay never calls in here) and parks a line while it is not None.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import trio

from protocol import InvalidMessage, parse

HELD_BYTES = 1 << 20
"""At most this much of the client's output is held while the lifecycle loads
(plus one read): past it the relay stops reading the client until the release,
so a client that writes at once cannot grow the sidecar's memory."""


def is_initialize(line: bytes) -> bool:
    """Whether ``line`` is an ``initialize`` request (what passes while held)."""
    if b'"initialize"' not in line:
        return False
    try:
        env = parse(line)
    except InvalidMessage:
        return False
    return env.method == "initialize" and env.id is not msgspec.UNSET


class ClientHold:
    """What is held, how much of it, and who waits for the release."""

    __slots__ = ("parked", "parked_bytes", "released", "_on_held")

    def __init__(self) -> None:
        self.parked: list[tuple[bool, Any]] | None = None
        """Client lines (True) and pieces (False) held until :meth:`release` (None: not holding)."""
        self.parked_bytes = 0
        self.released = trio.Event()
        """Set while nothing is held back (and at the release)."""
        self.released.set()
        self._on_held: Callable[[], None] | None = None

    def start(self, on_held: Callable[[], None] | None = None) -> None:
        """Hold from now on; ``on_held`` is called once, when the first line
        is held or the client ends its output while held."""
        self.parked = []
        self.parked_bytes = 0
        self.released = trio.Event()
        self._on_held = on_held

    @property
    def full(self) -> bool:
        """Holding past :data:`HELD_BYTES`: read no more of the client."""
        return self.parked is not None and self.parked_bytes >= HELD_BYTES

    def park(self, whole: bool, item: Any, size: int) -> None:
        assert self.parked is not None
        self.parked.append((whole, item))
        self.parked_bytes += size
        self.note_held()

    def note_held(self) -> None:
        on_held, self._on_held = self._on_held, None
        if on_held is not None:
            on_held()

    def release(self) -> list[tuple[bool, Any]]:
        """Stop holding; what was held, in order."""
        parked, self.parked = self.parked, None
        self.released.set()
        return parked or []
