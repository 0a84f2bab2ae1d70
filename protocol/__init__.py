"""The wire: JSON-RPC lines (framing, envelope and the id space) and typed Codex messages.

Nothing in this package does I/O: it turns bytes into events and values into
bytes, so it can be tested exhaustively and reused by any transport.
"""

from .jsonrpc import (
    CHILD_EXITED,
    DEFAULT_MAX_LINE,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    OUTCOME_UNKNOWN,
    PARSE_ERROR,
    Envelope,
    Fragment,
    IdSpace,
    InvalidMessage,
    Kind,
    LineSplitter,
    Oversized,
    RpcId,
    decode,
    encode,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
    parse,
)

__all__ = [
    "CHILD_EXITED",
    "DEFAULT_MAX_LINE",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "OUTCOME_UNKNOWN",
    "PARSE_ERROR",
    "Envelope",
    "Fragment",
    "IdSpace",
    "InvalidMessage",
    "Kind",
    "LineSplitter",
    "Oversized",
    "RpcId",
    "decode",
    "encode",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_response",
    "parse",
]
