"""The sidecar's own JSON-RPC methods (``sidecar/...``), never forwarded.

One dispatcher, jsonrpcserver, for every control method. Codex's wire has
no ``"jsonrpc"`` field while jsonrpcserver insists on it, so it is added
before dispatch; the client sees Codex's dialect.

jsonrpcserver's async dispatch runs on asyncio, and the relay runs on trio,
so an async method (one that awaits the child) is registered with a sync
stand-in: jsonrpcserver validates and routes the request as for any method,
and the stand-in's result is a :class:`Later` that the relay awaits under
trio and turns into the reply. Nothing here awaits anything itself.

The replies are what they always were: a sync method's as jsonrpcserver
shapes it (``{"result"|"error":...,"id":...}``), an async method's as the
relay's own answers (``{"id":...,"result"|"error":...}``), with ``RpcError``
giving the error and any other exception a ``-32603``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import msgspec

from protocol import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, RpcId, encode, encode_error, encode_response

from .messages import RpcError

if TYPE_CHECKING:
    from jsonrpcserver import Result

# jsonrpcserver (with jsonschema under it) is imported on the first control
# request, not at start-up: ~0.1-0.3 s that every app-server start paid for
# methods most runs never call.

log = logging.getLogger("codex_sidecar.control")

_decode = msgspec.json.Decoder()

AsyncControl = Callable[[dict[str, Any]], Awaitable[Any]]


class Later:
    """An async method's call, validated and routed, still to be awaited."""

    __slots__ = ("method", "fn", "params", "request_id")

    def __init__(self, method: str, fn: AsyncControl, params: dict[str, Any]) -> None:
        self.method = method
        self.fn = fn
        self.params = params
        self.request_id: RpcId = None

    async def reply(self) -> bytes:
        """Await the method; its reply line (it never raises an ``Exception``)."""
        try:
            result = await self.fn(self.params)
            return encode_response(self.request_id, result)
        except RpcError as exc:
            return encode_error(self.request_id, exc.code, exc.message, exc.data)
        except Exception as exc:  # reported to the caller, logged without content
            log.exception("control method failed", extra={"fields": {"method": self.method}})
            return encode_error(self.request_id, INTERNAL_ERROR, "control method failed", type(exc).__name__)


class ControlMethods:
    """The registry and dispatcher: ``dispatch`` answers one request line."""

    def __init__(self) -> None:
        self._methods: dict[str, Callable[..., Result]] = {}
        self._async: set[str] = set()

    def add(self, name: str, fn: Callable[..., Any]) -> None:
        """Register ``fn(**params) -> result``; exceptions become JSON-RPC errors."""

        def method(**params: Any) -> Result:
            from jsonrpcserver import Error, Success

            try:
                return Success(fn(**params))
            except TypeError as exc:
                return Error(-32602, "invalid params", type(exc).__name__)
            except Exception as exc:  # reported to the caller, logged without content
                log.exception("control method failed", extra={"fields": {"method": name}})
                return Error(INTERNAL_ERROR, f"{name} failed", type(exc).__name__)

        self._methods[name] = method
        self._async.discard(name)

    def add_async(self, name: str, fn: AsyncControl) -> None:
        """Register ``await fn(params) -> result`` (``params``: the request's
        object, ``{}`` for anything else); an ``RpcError`` it raises is the
        error reply."""

        def method(**params: Any) -> Result:
            from jsonrpcserver import Success

            return Success(Later(name, fn, params))

        self._methods[name] = method
        self._async.add(name)

    @property
    def names(self) -> list[str]:
        return sorted(self._methods)

    def dispatch(self, line: bytes) -> bytes | Later:
        """The reply to one request line, or the :class:`Later` to await for it."""
        try:
            request = _decode.decode(line)
        except msgspec.DecodeError:
            return encode_error(None, PARSE_ERROR, "parse error")
        if not isinstance(request, dict):
            return encode_error(None, INVALID_REQUEST, "invalid request")
        request_id = request.get("id")
        request["jsonrpc"] = "2.0"
        if request.get("method") in self._async and not isinstance(request.get("params"), dict):
            request["params"] = {}  # an async method takes an object; anything else counts as none
        elif "params" in request and request["params"] is None:
            del request["params"]
        from jsonrpcserver import dispatch_to_serializable

        # Already decoded (by msgspec); hand jsonrpcserver the dict itself.
        response = dispatch_to_serializable("", methods=self._methods, deserializer=lambda _s: request)
        if not isinstance(response, dict):  # a notification: jsonrpcserver gives nothing
            return encode_error(request_id, INVALID_REQUEST, "invalid request")
        later = response.get("result")
        if type(later) is Later:
            later.request_id = request_id
            return later
        response.pop("jsonrpc", None)
        response["id"] = request_id
        return encode(response)
