"""The head of a line too long to parse, sans I/O.

A line longer than the relay's max line is streamed through in pieces, never
parsed whole. Its routing still matters: a request needs a pending entry (and
an alias for an id in the sidecar's space), an answer must be matched to its
request. Codex writes responses as ``{"id":...,"result"|"error":...}`` and
requests as ``{"id":...,"method":...,"params":...}``, so the scalar members at
the start of the first piece are enough.
"""

from __future__ import annotations

import re

import msgspec

from protocol import RpcId

_HEAD_OPEN = re.compile(rb'\s*\{')
_HEAD_KEY = re.compile(rb'\s*"((?:[^"\\]|\\.)*)"\s*:\s*')
_HEAD_SCALAR = re.compile(rb'(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|"(?:[^"\\]|\\.)*"|null|true|false)\s*,?')

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()

Span = tuple[int, int]


def scan_head(data: bytes) -> tuple[dict[bytes, Span], bytes | None]:
    """The scalar members at the start of a JSON object too long to parse
    (key -> span of its value), and the key of the first member that is not
    a scalar (``params``, ``result``...), where the scan stops."""
    m = _HEAD_OPEN.match(data)
    if m is None:
        return {}, None
    fields: dict[bytes, Span] = {}
    pos = m.end()
    while len(fields) < 8:
        key = _HEAD_KEY.match(data, pos)
        if key is None:
            return fields, None
        value = _HEAD_SCALAR.match(data, key.end())
        if value is None:
            return fields, key.group(1)
        fields[key.group(1)] = value.span(1)
        pos = value.end()
    return fields, None


def request_head(data: bytes) -> tuple[RpcId, str, Span] | None:
    """A request's id, method and the id's span, when both come before its
    params; None for anything else."""
    fields, _ = scan_head(data)
    if b"id" not in fields or b"method" not in fields:
        return None
    (id_start, id_end), (m_start, m_end) = fields[b"id"], fields[b"method"]
    try:
        request_id = _decoder.decode(data[id_start:id_end])
        name = _decoder.decode(data[m_start:m_end])
    except msgspec.DecodeError:
        return None
    if not isinstance(name, str) or request_id is None or isinstance(request_id, bool):
        return None
    return request_id, name, (id_start, id_end)


def answer_head(data: bytes) -> tuple[RpcId, Span] | None:
    """A response's id and its span; None when the head is not recognisably
    an answer (a request from Codex has a method)."""
    fields, stop = scan_head(data)
    if b"id" not in fields or b"method" in fields or stop not in (b"result", b"error"):
        return None
    id_start, id_end = fields[b"id"]
    try:
        return _decoder.decode(data[id_start:id_end]), (id_start, id_end)
    except msgspec.DecodeError:
        return None


def replace_id(data: bytes, span: Span, new_id: RpcId) -> bytes:
    return data[: span[0]] + _encoder.encode(new_id) + data[span[1] :]
