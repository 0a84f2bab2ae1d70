"""The JSON-RPC envelope as Codex speaks it, sans I/O.

Codex's app-server uses JSON-RPC 2.0 shapes without the ``"jsonrpc"`` field:
a request is ``{id, method, params}``, a notification ``{method, params}``, a
response ``{id, result}`` or ``{id, error}``. The relay needs only the
envelope to route a line, so ``parse`` decodes ``id`` and ``method`` and keeps
``params``/``result``/``error`` as raw JSON (about 1 µs for a 1 KB line). The
original bytes are forwarded unless a message is really changed; ``rewrite``
changes a message from its full dict form so every field it does not touch
survives, including ones this project has never heard of.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

RpcId = int | float | str | None
"""JSON-RPC ids as they occur on the wire (Codex uses ints; clients may not)."""

_EMPTY = msgspec.Raw(b"")

# JSON-RPC error codes used by the sidecar.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
CHILD_EXITED = -32001
"""The app-server went away and the request never reached it. Codex itself
answers -32001 to a request it rejected before enqueueing (overload), and
Codex's and OpenClaw's clients retry that code as safe to retry: so it is
only ever used for requests the sidecar did not forward."""
OUTCOME_UNKNOWN = INTERNAL_ERROR
"""The app-server went away after the request was forwarded to it: it may
have run (a ``turn/start``, a write). Not retried by clients; the error's
``data.outcome`` is ``"unknown"``."""


class Kind(enum.Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"
    ERROR = "error"


class Envelope(msgspec.Struct, gc=False):
    """Routing view of one message. ``params``/``result``/``error`` stay raw."""

    id: RpcId | msgspec.UnsetType = msgspec.UNSET
    method: str | msgspec.UnsetType = msgspec.UNSET
    params: msgspec.Raw = _EMPTY
    result: msgspec.Raw = _EMPTY
    error: msgspec.Raw = _EMPTY

    @property
    def kind(self) -> Kind | None:
        """What the message is, or None when the shape fits no JSON-RPC kind."""
        if self.method is not msgspec.UNSET:
            return Kind.NOTIFICATION if self.id is msgspec.UNSET else Kind.REQUEST
        if self.id is msgspec.UNSET:
            return None
        if self.error:
            return Kind.ERROR
        if self.result:
            return Kind.RESPONSE
        return None


_decoder = msgspec.json.Decoder(Envelope)
_any_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class InvalidMessage(ValueError):
    """A line that is not a JSON object with a JSON-RPC shape."""


def parse(line: bytes) -> Envelope:
    """Decode the envelope of one line, or raise ``InvalidMessage``.

    The message text never goes into the error: errors end up in logs, and
    logs never carry prompt or transcript text.
    """
    try:
        env = _decoder.decode(line)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise InvalidMessage(_describe_decode_error(exc)) from None
    if env.kind is None:
        raise InvalidMessage("JSON object is neither request, notification nor response")
    return env


def _describe_decode_error(exc: Exception) -> str:
    text = str(exc)
    # msgspec's messages name types and JSON paths, never values; keep them short.
    return text[:200]


def decode(raw: bytes | msgspec.Raw) -> Any:
    """Fully decode a JSON value (params, result, or a whole line)."""
    return _any_decoder.decode(raw)


def encode(value: Any) -> bytes:
    """Encode a JSON value deterministically (dicts keep insertion order)."""
    return _encoder.encode(value)


def encode_request(id: RpcId, method: str, params: Any | None = None) -> bytes:
    msg: dict[str, Any] = {"id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return _encoder.encode(msg)


def encode_notification(method: str, params: Any | None = None) -> bytes:
    msg: dict[str, Any] = {"method": method}
    if params is not None:
        msg["params"] = params
    return _encoder.encode(msg)


def encode_response(id: RpcId, result: Any) -> bytes:
    return _encoder.encode({"id": id, "result": result})


def encode_error(id: RpcId, code: int, message: str, data: Any | None = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _encoder.encode({"id": id, "error": error})


def rewrite(line: bytes, **changes: Any) -> bytes:
    """Return ``line`` with top-level fields replaced, every other field kept.

    Field order is the original order (replaced fields keep their place, new
    ones go last), so a rewrite is as byte-stable as its input.
    """
    msg = _any_decoder.decode(line)
    if not isinstance(msg, dict):
        raise InvalidMessage("not a JSON object")
    msg.update(changes)
    return _encoder.encode(msg)
