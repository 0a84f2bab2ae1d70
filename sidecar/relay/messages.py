"""What hooks see and return: messages, decisions, pending requests, errors.

Plain values, no I/O: the router hands these to hooks and the lifecycle
builds on them.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from protocol import CHILD_EXITED, OUTCOME_UNKNOWN, Envelope, InvalidMessage, RpcId, decode, encode
from protocol.codex import CodexDecodeError, decode_as

_S = TypeVar("_S", bound=msgspec.Struct)
_T = TypeVar("_T")


class _Handled:
    __slots__ = ()

    def __repr__(self) -> str:
        return "HANDLED"


HANDLED = _Handled()
"""Hook decision: the hook took the message; the relay must not forward it."""

Decision = None | _Handled
"""A hook returns None (forward, with whatever it changed through
:meth:`Message.set_params` / :meth:`Message.set_result`) or HANDLED."""


_UNDECODED: Any = object()


class Slot(Generic[_T]):
    """A typed key of a client request's state (:meth:`PendingRequest.note`):
    one a module, named for what it holds."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Slot({self.name!r})"


class PendingRequest(msgspec.Struct):
    """A client request the sidecar has taken in and not yet seen answered."""

    client_id: RpcId
    method: str
    wire_id: RpcId
    """The id Codex sees: the client's, or an alias when the client's lies
    in the sidecar's own id space."""
    forwarded: bool = False
    """Handed to codex: if codex dies now, whether it ran is unknown."""
    params: Any = None
    """The client's params as its request hooks read them (None when no hook
    read them: the router never decodes them for this)."""
    thread_id: str | None = None
    """The client's ``params.threadId``, when the params were read."""
    original: bytes | None = None
    """The client's own line, while what went to codex is the sidecar's
    change of it: sent instead if codex refuses the change (fail open)."""
    fell_back: bool = False
    """Codex refused the sidecar's change; its answer is to the client's own request."""
    notes: dict[Slot[Any], Any] | None = None
    """What the request's hooks keep for its answer's (:meth:`note`): the
    request's state rides on it, and goes with it when it is answered,
    whoever answers it (Codex, the sidecar, a dead child's error)."""

    def note(self, slot: Slot[_T], value: _T) -> None:
        """Keep ``value`` for this request's answer's hooks, under ``slot``."""
        if self.notes is None:
            self.notes = {}
        self.notes[slot] = value

    def noted(self, slot: Slot[_T]) -> _T | None:
        """What a hook on the request kept under ``slot``, or None."""
        notes = self.notes
        return None if notes is None else notes.get(slot)

    def remembered(self) -> dict[str, Any]:
        """The params a hook on the request remembered (``Message.remember_params``), or {}."""
        notes = self.notes
        params = None if notes is None else notes.get(PARAMS)
        return params if params is not None else {}


PARAMS = Slot[dict[str, Any]]("params")
"""A request's params kept for its answer's hooks (:meth:`Message.remember_params`)."""


class Message(msgspec.Struct):
    """One parsed frame: its routing envelope, its exact bytes, and (once a
    hook asks) its decoded form and typed views.

    Decode once: :meth:`params` decodes the line the first time any hook (or
    the router's gate) asks, and every later reader gets the same object;
    :meth:`typed` gives a ``protocol.codex`` Struct view of those params
    (converted from the decoded value, never parsed again). Readers never
    modify what they get.

    Encode once: a hook that changes a message says so with
    :meth:`set_params` or, on an answer, :meth:`set_result` (whole new
    params or result: every field it does not mean to change copied from
    :meth:`params` / :meth:`result`, so fields the sidecar does not know
    pass through; both return the decision to forward it, None, so a hook
    may end with ``return msg.set_result(...)``) and the router with
    :meth:`set_id` (an alias); nothing is
    encoded until :meth:`wire` builds the line for the child, once, every
    other top-level field kept in its place. A message nobody changed goes out
    as its original bytes.
    """

    env: Envelope
    line: bytes
    request: PendingRequest | None = None
    """A client request's pending entry (the router's, once it took the
    request in): where its hooks keep state for its answer's (:meth:`note`)."""
    _body: Any = _UNDECODED
    _views: dict[type, Any] | None = None
    _changes: dict[str, Any] | None = None

    @property
    def id(self) -> RpcId:
        """The id (the current one, after :meth:`set_id`)."""
        changes = self._changes
        if changes is not None and "id" in changes:
            return changes["id"]
        return self.env.id  # type: ignore[return-value]

    @property
    def method(self) -> str:
        return self.env.method  # type: ignore[return-value]

    def params(self) -> Any:
        """The params as decoded (the current ones, after :meth:`set_params`)."""
        return self._member("params", self.env.params)

    def _member(self, name: str, raw: msgspec.Raw) -> Any:
        changes = self._changes
        if changes is not None and name in changes:
            return changes[name]
        if self._body is _UNDECODED:
            if not raw:
                return None
            self._body = decode(self.line)
        return self._body.get(name)

    def params_if_read(self) -> Any:
        """The client's params as a reader decoded them (before any
        :meth:`set_params`), or None: never decodes."""
        return None if self._body is _UNDECODED else self._body.get("params")

    @property
    def decoded(self) -> bool:
        """Whether a reader has decoded this message (its params are at hand)."""
        return self._body is not _UNDECODED or self._changes is not None

    def typed(self, cls: type[_S]) -> _S:
        """The params as ``cls`` (a ``protocol.codex`` Struct): converted from
        the decoded params once per type; raises ``CodexDecodeError`` when
        they do not fit. A read-only view: fields ``cls`` does not list are
        only in :meth:`params` (and go to the child untouched)."""
        views = self._views
        if views is None:
            views = self._views = {}
        view = views.get(cls)
        if view is None:
            try:
                view = views[cls] = msgspec.convert(self.params(), cls)
            except msgspec.ValidationError as exc:  # as protocol.codex.decode_as says it
                raise CodexDecodeError(f"{cls.__name__}: {str(exc)[:200]}") from None
        return view

    @property
    def thread_id(self) -> str | None:
        """``params.threadId`` when the params are decoded and carry one."""
        params = self.params()
        thread_id = params.get("threadId") if type(params) is dict else None
        return thread_id if type(thread_id) is str else None

    def note(self, slot: Slot[_T], value: _T) -> None:
        """Keep ``value`` on this client request for its answer's hooks
        (``pending.noted(slot)``)."""
        if self.request is None:
            raise LookupError("not a client request the router took in")
        self.request.note(slot, value)

    def noted(self, slot: Slot[_T]) -> _T | None:
        """What a hook on this client request kept under ``slot``, or None."""
        return None if self.request is None else self.request.noted(slot)

    def remember_params(self) -> None:
        """Keep the params (as this hook sees them: after the changes of the
        hooks before it) for the answer's hooks (``pending.remembered()``)."""
        params = self.params()
        if isinstance(params, dict):
            self.note(PARAMS, params)

    def remembered(self) -> dict[str, Any]:
        """The params a hook on this request remembered (:meth:`remember_params`), or {}."""
        return {} if self.request is None else self.request.remembered()

    def set_params(self, params: Any) -> Decision:
        """Replace the params (encoded with the rest once, by :meth:`wire`)."""
        if self._changes is None:
            self._changes = {}
        self._changes["params"] = params
        self._views = None
        return None

    def set_result(self, result: Any) -> Decision:
        """Replace an answer's result (encoded with the rest once, by :meth:`wire`)."""
        if self._changes is None:
            self._changes = {}
        self._changes["result"] = result
        self._views = None
        return None

    def set_id(self, id: RpcId) -> None:
        """Send the message under another id (the client's, aliased)."""
        if self._changes is None:
            self._changes = {}
        self._changes["id"] = id

    @property
    def params_changed(self) -> bool:
        """Whether a hook gave the message new params (:meth:`set_params`)."""
        return self._changes is not None and "params" in self._changes

    def edits(self) -> dict[str, Any] | None:
        """The changes so far (a copy), to :meth:`restore` them."""
        return None if self._changes is None else dict(self._changes)

    def restore(self, edits: dict[str, Any] | None) -> None:
        """Back to the changes :meth:`edits` returned (a failed hook's undone)."""
        self._changes = edits
        self._views = None

    def wire(self) -> bytes:
        """The line to send: the original bytes when nothing changed, else
        the decoded message with the changes, encoded once."""
        changes = self._changes
        if not changes:
            return self.line
        if self._body is _UNDECODED:
            self._body = decode(self.line)
        body = self._body
        if type(body) is not dict:
            raise InvalidMessage("not a JSON object")
        body = {**body, **changes}
        line = encode(body)
        self.line, self._body, self._changes = line, body, None
        return line

    def result(self) -> Any:
        """An answer's result as decoded, once: every reader gets the same
        object (the current one, after :meth:`set_result`); None for an
        error response. Readers never modify it."""
        return self._member("result", self.env.result)

    def result_as(self, cls: type[_S]) -> _S | None:
        """A response's result as ``cls`` (a ``protocol.codex`` Struct);
        None for an error response. Raises ``CodexDecodeError`` when the
        result does not fit. Decoded straight into ``cls`` (no dict) when
        no reader decoded the answer yet, else converted from :meth:`result`."""
        if not self.env.result:
            return None
        if self._body is _UNDECODED and self._changes is None:
            return decode_as(cls, self.env.result)
        try:
            return msgspec.convert(self.result(), cls)
        except msgspec.ValidationError as exc:
            raise CodexDecodeError(f"{cls.__name__}: {str(exc)[:200]}") from None

    def error(self) -> Any:
        return self._member("error", self.env.error)


class RpcError(Exception):
    """An error response to a request the sidecar itself sent, or one a
    ``sidecar/...`` control method raises to answer with."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


ClientRequestHook = Callable[[Message], Decision]
ServerMessageHook = Callable[[Message], Decision]
ResponseHook = Callable[[Message, PendingRequest], Decision]


class Hooks(msgspec.Struct):
    """Interception points, by method name. Hooks run in order; the first
    HANDLED stops the chain, a returned ``bytes`` replaces the message for the
    hooks after it and for the wire."""

    client_requests: dict[str, list[ClientRequestHook]] = msgspec.field(default_factory=dict)
    responses: dict[str, list[ResponseHook]] = msgspec.field(default_factory=dict)
    server_notifications: dict[str, list[ServerMessageHook]] = msgspec.field(default_factory=dict)
    server_requests: dict[str, list[ServerMessageHook]] = msgspec.field(default_factory=dict)

    def on_client_request(self, method: str, hook: ClientRequestHook) -> None:
        self.client_requests.setdefault(method, []).append(hook)

    def on_response(self, method: str, hook: ResponseHook) -> None:
        """Responses (results and errors) to client requests of ``method``."""
        self.responses.setdefault(method, []).append(hook)

    def on_server_notification(self, method: str, hook: ServerMessageHook) -> None:
        self.server_notifications.setdefault(method, []).append(hook)

    def on_server_request(self, method: str, hook: ServerMessageHook) -> None:
        self.server_requests.setdefault(method, []).append(hook)


def exit_text(rc: int | None) -> str:
    if rc is None:
        return "codex app-server exited before answering"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"codex app-server was killed by {name} before answering"
    return f"codex app-server exited with status {rc} before answering"


def dead_child_error(pending: PendingRequest, rc: int | None) -> tuple[int, str, dict[str, Any]]:
    """Code, message and data for a request codex will never answer.

    -32001 tells Codex's and OpenClaw's clients "rejected before it was
    enqueued, safe to retry": true only of a request the sidecar never handed
    to codex. One codex had may have run, so it gets -32603 with
    ``outcome: "unknown"``, which no client retries on its own
    (docs/errors.md).
    """
    if pending.forwarded:
        text = exit_text(rc) + "; the request was delivered and may have taken effect"
        return OUTCOME_UNKNOWN, text, {"method": pending.method, "outcome": "unknown", "reason": "appServerExited"}
    text = exit_text(rc) + "; the request was not delivered"
    return CHILD_EXITED, text, {"method": pending.method, "outcome": "notDelivered", "reason": "appServerExited"}
