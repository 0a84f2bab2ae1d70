"""JSON-RPC over newline-delimited stdio, sans I/O: framing, the envelope and
the id space (the sidecar's own request ids beside the client's, at the end).

**Framing.** The app-server protocol is one JSON message per line.
:class:`LineSplitter` turns an arbitrary chunking of a byte stream back into
lines, with a bound on how much of one line it will hold in memory. A line
longer than the bound is not an error and is never dropped or truncated: it is
handed out as a sequence of ``Oversized`` pieces that the relay forwards
unparsed, so a 200 MB ``thread/read`` reply costs the sidecar one read buffer,
not 200 MB.

**The envelope.** Codex's app-server uses JSON-RPC 2.0 shapes without the
``"jsonrpc"`` field: a request is ``{id, method, params}``, a notification
``{method, params}``, a response ``{id, result}`` or ``{id, error}``. The
relay needs only the envelope to route a line, so ``parse`` decodes ``id`` and
``method`` and keeps ``params``/``result``/``error`` as raw JSON (about 1 µs
for a 1 KB line). The original bytes are forwarded unless a message is really
changed; a change is made on the decoded message (the relay's ``Message``:
decoded once, encoded once) so every field it does not touch survives,
including ones this project has never heard of.

Feeding bytes in and taking events out is all this module does; reading the
bytes is the caller's business (the h11 style).
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

DEFAULT_MAX_LINE = 64 * 1024 * 1024


class Oversized(msgspec.Struct, frozen=True):
    """A piece of a line too long to parse.

    ``data`` is raw bytes to forward as they are. The last piece of the line
    has ``end=True`` and includes the terminating newline; a stream that ends
    inside an oversized line ends with a piece that has ``end=False``.
    """

    data: bytes
    end: bool


class Fragment(msgspec.Struct, frozen=True):
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


# -- the sidecar's own request-id space ------------------------------------------
# The sidecar sends requests of its own to the app-server (compaction,
# injection, imports) on the same connection as the client. Their ids must
# never collide with the client's, whatever ids the client picks. Internal ids
# are strings under a fixed prefix; a client request whose id happens to fall
# under that prefix is given an alias in the same space on the way in and its
# original id back on the way out, so the child never sees two live requests
# with one id and the client never notices.

PREFIX = "codex-sidecar:"


class IdSpace:
    __slots__ = ("_next", "_next_alias", "_aliases")

    def __init__(self) -> None:
        self._next = 0
        self._next_alias = 0
        self._aliases: dict[str, RpcId] = {}

    @staticmethod
    def is_reserved(id: RpcId) -> bool:
        """True when ``id`` lies in the sidecar's namespace."""
        return isinstance(id, str) and id.startswith(PREFIX)

    def new_internal(self) -> str:
        self._next += 1
        return f"{PREFIX}{self._next}"

    def alias_client_id(self, client_id: RpcId) -> str:
        """Give a client id that clashes with the namespace a fresh alias."""
        self._next_alias += 1
        alias = f"{PREFIX}client:{self._next_alias}"
        self._aliases[alias] = client_id
        return alias

    def is_alias(self, id: RpcId) -> bool:
        return isinstance(id, str) and id in self._aliases

    def resolve_alias(self, alias: str) -> RpcId:
        """The client's original id for ``alias``; forgets the alias."""
        return self._aliases.pop(alias)
