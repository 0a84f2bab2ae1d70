"""The sidecar's own JSON-RPC methods (``sidecar/...``), never forwarded.

They are answered synchronously with jsonrpcserver. Codex's wire has no
``"jsonrpc"`` field while jsonrpcserver insists on it, so it is added before
dispatch and removed from the reply: the client sees Codex's dialect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import msgspec
from jsonrpcserver import Error, Result, Success, dispatch_to_serializable

from protocol import INTERNAL_ERROR, encode, encode_error

log = logging.getLogger("codex_sidecar.control")

_decode = msgspec.json.Decoder()


class ControlMethods:
    """A registry of control methods; ``handle`` answers one request line."""

    def __init__(self) -> None:
        self._methods: dict[str, Callable[..., Result]] = {}

    def add(self, name: str, fn: Callable[..., Any]) -> None:
        """Register ``fn(**params) -> dict``; exceptions become JSON-RPC errors."""

        def method(**params: Any) -> Result:
            try:
                return Success(fn(**params))
            except TypeError as exc:
                return Error(-32602, "invalid params", type(exc).__name__)
            except Exception as exc:  # reported to the caller, logged without content
                log.exception("control method failed", extra={"fields": {"method": name}})
                return Error(INTERNAL_ERROR, f"{name} failed", type(exc).__name__)

        self._methods[name] = method

    @property
    def names(self) -> list[str]:
        return sorted(self._methods)

    def handle(self, line: bytes) -> bytes:
        try:
            request = _decode.decode(line)
        except msgspec.DecodeError:
            return encode_error(None, -32700, "parse error")
        request_id = request.get("id")
        request["jsonrpc"] = "2.0"
        if "params" in request and request["params"] is None:
            del request["params"]
        # Already decoded (by msgspec); hand jsonrpcserver the dict itself.
        response = dispatch_to_serializable("", methods=self._methods, deserializer=lambda _s: request)
        if not isinstance(response, dict):  # a notification: jsonrpcserver gives nothing
            return encode_error(request_id, -32600, "invalid request")
        response.pop("jsonrpc", None)
        response["id"] = request_id
        return encode(response)
