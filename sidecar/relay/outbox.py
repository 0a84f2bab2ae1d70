"""One writer per output stream, fed without awaiting.

Readers and hooks put bytes here synchronously (so a rewrite decided while
parsing a chunk keeps its place in the stream); a single writer task drains
everything queued in one ``send_all``. That batching is what lets a Python
relay move tens of thousands of frames a second. Memory is bounded by a high
water mark that readers wait on before they read more: the slow side pushes
back on the fast one instead of the sidecar buffering without limit.
"""

from __future__ import annotations

import logging
import os

import trio

log = logging.getLogger("codex_sidecar.outbox")

_IOV_MAX = 1024


class Outbox:
    __slots__ = (
        "name",
        "high_water",
        "_parts",
        "_size",
        "_data_ready",
        "_below_high_water",
        "_closed",
        "_broken",
        "finished",
        "_fd",
        "_held",
        "_writing",
        "_raw_open",
        "_deferred",
    )

    def __init__(self, name: str, high_water: int = 8 * 1024 * 1024) -> None:
        self.name = name
        self.high_water = high_water
        self._parts: list[bytes] = []
        self._size = 0
        self._data_ready = trio.Event()
        self._below_high_water = trio.Event()
        self._below_high_water.set()
        self._closed = False
        self._broken = False
        self.finished = trio.Event()
        """Set when the writer has stopped (drained and closed, or broken)."""
        self._fd: int | None = None
        self._held = False
        self._writing = False
        self._raw_open = False
        """An oversized line is being streamed through in pieces."""
        self._deferred: list[bytes] = []
        """Frames put while a raw line is open: they follow its end."""

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def broken(self) -> bool:
        """The stream refused a write: the peer has gone."""
        return self._broken

    @property
    def queued(self) -> int:
        return self._size

    def put(self, data: bytes) -> bool:
        """Queue raw bytes; False when they can no longer be delivered."""
        if self._closed or self._broken:
            return False
        if self._raw_open:
            self._deferred.append(data)
            return True
        self._queue(data)
        return True

    def put_line(self, line: bytes) -> bool:
        """Queue one frame; the newline is added here, not copied into ``line``."""
        if self._closed or self._broken:
            return False
        if self._raw_open:
            self._deferred += (line, b"\n")
            return True
        self._parts += (line, b"\n")  # the hot path: inlined _queue
        self._size += len(line) + 1
        if not self._held:
            self._data_ready.set()
        if self._size > self.high_water and self._below_high_water.is_set():
            self._below_high_water = trio.Event()
        return True

    def put_raw(self, data: bytes, end: bool) -> bool:
        """Queue a piece of a line too long to parse (``end``: its last piece,
        newline included). Until that piece, other frames wait behind the
        line instead of landing inside it."""
        if self._closed or self._broken:
            return False
        self._queue(data)
        self._raw_open = not end
        if end:
            self._release()
        return True

    def end_raw(self, terminator: bytes = b"") -> None:
        """The stream ended inside a raw line: end it with ``terminator`` and
        let the frames that waited behind it go."""
        if self._raw_open:
            self._raw_open = False
            if terminator and not (self._closed or self._broken):
                self._queue(terminator)
            self._release()

    def _release(self) -> None:
        if self._deferred:
            deferred, self._deferred = self._deferred, []
            if not (self._closed or self._broken):
                self._queue(*deferred)

    def _queue(self, *parts: bytes) -> None:
        self._parts.extend(parts)
        self._size += sum(len(p) for p in parts)
        if not self._held:
            self._data_ready.set()
        if self._size > self.high_water and self._below_high_water.is_set():
            self._below_high_water = trio.Event()

    def hold(self) -> None:
        """Batch the puts that follow until ``flush`` (a reader's chunk)."""
        self._held = True

    def flush(self) -> None:
        """End a batch: write what is queued straight to the fd if the pipe
        takes it (no task switch); whatever is left goes to the writer task."""
        self._held = False
        if not self._parts:
            return
        if self._fd is not None and not self._writing and not self._closed:
            parts = self._parts
            size = self._size
            try:
                # writev: a 1 MB frame and its newline go out without a join copy.
                n = os.writev(self._fd, parts) if len(parts) <= _IOV_MAX else os.write(self._fd, b"".join(parts))
            except OSError:
                n = 0  # full (EAGAIN) or broken: the writer task deals with it
            if n == size:
                self._parts = []
                self._size = 0
                if not self._below_high_water.is_set():
                    self._below_high_water.set()
                return
            if n:
                data = b"".join(parts)
                self._parts = [data[n:]]
                self._size = size - n
        self._data_ready.set()

    async def wait_writable(self) -> None:
        """Wait while more than ``high_water`` bytes are queued."""
        while not self._below_high_water.is_set():
            await self._below_high_water.wait()

    def close(self) -> None:
        """No more puts; the writer drains what is queued, then closes the stream."""
        self._closed = True
        self._data_ready.set()

    async def run_writer(self, stream: trio.abc.SendStream) -> None:
        """Drain into ``stream`` until closed. A broken stream ends quietly."""
        fileno = getattr(stream, "fileno", None)
        if fileno is not None:
            try:
                self._fd = fileno()
            except Exception:
                self._fd = None
        try:
            while True:
                # Check the state, not an event: a close() that arrives while a
                # write is in flight must still end the loop once drained.
                if not self._parts:
                    if self._closed:
                        break
                    self._data_ready = trio.Event()
                    await self._data_ready.wait()
                    continue
                parts = self._parts
                self._parts = []
                self._size = 0
                self._below_high_water.set()
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                self._writing = True
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._broken = True
                    self._parts = []
                    self._size = 0
                    break
                finally:
                    self._writing = False
            self._fd = None
            log.debug("closing stream", extra={"fields": {"outbox": self.name}})
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        finally:
            self._below_high_water.set()
            self.finished.set()
