"""Newline-delimited framing, sans I/O.

The app-server protocol is one JSON message per line. This module turns an
arbitrary chunking of a byte stream back into lines, with a bound on how much
of one line it will hold in memory. A line longer than the bound is not an
error and is never dropped or truncated: it is handed out as a sequence of
``Oversized`` pieces that the relay forwards unparsed, so a 200 MB
``thread/read`` reply costs the sidecar one read buffer, not 200 MB.

Feeding bytes in and taking events out is all this module does; reading the
bytes is the caller's business (the h11 style).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MAX_LINE = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Oversized:
    """A piece of a line too long to parse.

    ``data`` is raw bytes to forward as they are. The last piece of the line
    has ``end=True`` and includes the terminating newline; a stream that ends
    inside an oversized line ends with a piece that has ``end=False``.
    """

    data: bytes
    end: bool


@dataclass(frozen=True, slots=True)
class Fragment:
    """Bytes after the last newline when the stream ended.

    Forwarded as they are (no newline is invented), so nothing is lost.
    """

    data: bytes


Event = bytes | Oversized | Fragment
"""A complete line (``bytes``, without its newline) or one of the above."""


class LineSplitter:
    """Incremental line framer.

    ``feed`` returns complete lines without their ``\\n`` (a ``\\r`` before
    it is kept, so forwarding ``line + b"\\n"`` reproduces the input byte for
    byte) and ``Oversized`` pieces; ``close`` returns what the end of the
    stream leaves over. Concatenating every line (plus newline), every
    ``Oversized.data`` and every ``Fragment.data`` in order gives back
    exactly the bytes fed in.
    """

    __slots__ = ("max_line", "_pieces", "_held", "_oversized")

    def __init__(self, max_line: int = DEFAULT_MAX_LINE) -> None:
        if max_line < 1:
            raise ValueError("max_line must be at least 1 byte")
        self.max_line = max_line
        # The start of an incomplete line, as the chunks it came in: joined
        # once when its newline arrives (a bytearray would copy it twice).
        self._pieces: list[bytes] = []
        self._held = 0
        self._oversized = False

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete line."""
        return self._held

    def feed(self, data: bytes) -> list[Event]:
        out: list[Event] = []
        if not data:
            return out
        start = 0
        if self._oversized:
            nl = data.find(b"\n")
            if nl < 0:
                out.append(Oversized(bytes(data), end=False))
                return out
            out.append(Oversized(bytes(data[: nl + 1]), end=True))
            self._oversized = False
            start = nl + 1
        elif self._pieces:
            nl = data.find(b"\n")
            if nl < 0:
                self._pieces.append(bytes(data))
                self._held += len(data)
                if self._held > self.max_line:
                    out.append(Oversized(b"".join(self._pieces), end=False))
                    self._pieces = []
                    self._held = 0
                    self._oversized = True
                return out
            self._pieces.append(data[:nl])
            line = b"".join(self._pieces)
            self._pieces = []
            self._held = 0
            if len(line) > self.max_line:
                out.append(Oversized(line + b"\n", end=True))
            else:
                out.append(line)
            start = nl + 1
        max_line = self.max_line
        find = data.find
        append = out.append
        while True:
            nl = find(b"\n", start)
            if nl < 0:
                break
            if nl - start > max_line:
                append(Oversized(bytes(data[start : nl + 1]), end=True))
            else:
                append(bytes(data[start:nl]))
            start = nl + 1
        if start < len(data):
            rest = data[start:]
            if len(rest) > max_line:
                append(Oversized(bytes(rest), end=False))
                self._oversized = True
            else:
                self._pieces.append(bytes(rest))
                self._held = len(rest)
        return out

    def close(self) -> list[Event]:
        """End of stream: hand out whatever is left, so nothing is lost."""
        if self._pieces:
            data = b"".join(self._pieces)
            self._pieces = []
            self._held = 0
            return [Fragment(data)]
        return []
