"""Count the JSON decodes and encodes the sidecar makes of one message.

:func:`counted` profiles the code of ``sidecar/`` and ``protocol/`` while a
block runs and records every msgspec JSON decode or encode (and every
``json.loads``/``json.dumps``) that it calls on data holding ``marker``: a
decode whose input holds it, an encode whose caller holds a value holding it.
A unique marker in one request's text attributes calls to that request and
to nothing else (an engine's messages, the mirror, other frames). Counting
stops when a line holding the marker is queued on an outbox (for a client
request: it leaves for the child); with ``legs=2``, when the second one is
(its answer reaches the client), each leg counted apart in ``legs``.

Decodes with the relay's routing decoder (the ``Envelope``: id and method,
params kept raw) are counted apart as ``parses``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec

from protocol.jsonrpc import Envelope
from sidecar.relay.shell import Outbox

_OURS = ("sidecar", "protocol")
_JSON_CODES = {json.loads.__code__: "decode", json.dumps.__code__: "encode"}
_FUNCTIONS = {msgspec.json.decode: "decode", msgspec.json.encode: "encode"}


@dataclass
class Counts:
    parses: list[str] = field(default_factory=list)
    decodes: list[str] = field(default_factory=list)
    encodes: list[str] = field(default_factory=list)
    sent: bool = False
    """The line reached an outbox: counting stopped."""
    legs: list[Counts] = field(default_factory=list)
    """Per line queued (the request to the child, then its answer to the client)."""

    def add(self, kind: str, where: str) -> None:
        getattr(self, kind + "s").append(where)
        if self.legs:
            self.legs[-1].add(kind, where)

    def __str__(self) -> str:
        return f"{len(self.decodes)} decodes {self.decodes}, {len(self.encodes)} encodes {self.encodes}, {len(self.parses)} envelope parses {self.parses}"


def _holds(value: Any, marker: bytes, depth: int = 6) -> bool:
    if isinstance(value, (bytes, bytearray, memoryview, msgspec.Raw)):
        return marker in bytes(value)
    if isinstance(value, str):
        return marker.decode() in value
    if depth == 0:
        return False
    if isinstance(value, dict):
        return any(_holds(v, marker, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds(v, marker, depth - 1) for v in value)
    return False


def _ours(frame: Any) -> bool:
    return frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] in _OURS


def _kind(fn: Any) -> str | None:
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    if isinstance(owner, msgspec.json.Decoder) and name.startswith("decode"):
        return "parse" if owner.type is Envelope else "decode"
    if isinstance(owner, msgspec.json.Encoder) and name.startswith("encode"):
        return "encode"
    try:
        return _FUNCTIONS.get(fn)
    except TypeError:  # unhashable
        return None


@contextmanager
def counted(marker: bytes, legs: int = 1) -> Iterator[Counts]:
    """Count until the first line holding ``marker`` is queued on an outbox
    (the relay's way out to the child), or the ``legs``-th; the block must
    get them there."""
    counts = Counts(legs=[Counts()])
    put_line = Outbox.put_line.__code__

    def profile(frame: Any, event: str, arg: Any) -> None:
        if counts.sent:
            return
        if event == "c_call":
            kind = _kind(arg)
            if kind is not None and _ours(frame) and any(_holds(v, marker) for v in frame.f_locals.values()):
                counts.add(kind, f"{frame.f_globals['__name__']}.{frame.f_code.co_qualname}")
        elif event == "call":
            if frame.f_code is put_line and marker in frame.f_locals.get("line", b""):
                counts.legs[-1].sent = True
                if len(counts.legs) == legs:
                    counts.sent = True
                else:
                    counts.legs.append(Counts())
                return
            kind = _JSON_CODES.get(frame.f_code)
            if kind is not None and _ours(frame.f_back) and any(_holds(v, marker) for v in frame.f_locals.values()):
                back = frame.f_back
                counts.add(kind, f"{back.f_globals['__name__']}.{back.f_code.co_qualname}")

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield counts
    finally:
        sys.setprofile(previous)
    assert counts.sent, "the counted message never reached an outbox"
