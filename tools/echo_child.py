"""A minimal app-server double for benchmarks: answers every request with its params.

Reads newline-delimited JSON on stdin. A request ``{"id":N,"method":...,
"params":P}`` gets ``{"id":N,"result":P}`` on stdout, with ``N`` and ``P``
copied byte for byte; notifications (no id) are ignored. Everything read in
one ``os.read`` is answered in one ``os.write``, so it costs about the same
whether it is driven one round trip at a time or flooded. The same child runs
behind the direct connection and behind the sidecar, so its cost cancels out.

Run as ``python tools/echo_child.py`` (no imports from this project).
"""

from __future__ import annotations

import os

import msgspec


class _Request(msgspec.Struct):
    id: msgspec.Raw = msgspec.Raw(b"")
    params: msgspec.Raw = msgspec.Raw(b"null")


_decode = msgspec.json.Decoder(_Request).decode


def answer(line: bytes) -> bytes | None:
    """The response line (with newline) for one request line, or None."""
    try:
        req = _decode(line)
    except msgspec.DecodeError:
        return None
    if not req.id:
        return None
    return b'{"id":' + bytes(req.id) + b',"result":' + bytes(req.params) + b"}\n"


def main() -> None:
    buf = b""
    while True:
        data = os.read(0, 1 << 20)
        if not data:
            return
        if buf:
            data = buf + data
        lines = data.split(b"\n")
        buf = lines.pop()
        out = [r for r in map(answer, lines) if r is not None]
        if out:
            view = memoryview(b"".join(out))
            while view:
                view = view[os.write(1, view) :]


if __name__ == "__main__":
    try:
        main()
    except (BrokenPipeError, KeyboardInterrupt):
        pass
