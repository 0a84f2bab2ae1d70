"""The relay's decisions, sans I/O: lines in, lines out.

The shell (:mod:`sidecar.relay.shell`) hands the router every line it reads
(``from_client``, ``from_child``, and the pieces of lines too long to parse),
and the router puts what goes out into two sinks, one per direction, in the
same call: a rewrite decided while reading a chunk keeps its place in the
stream. Routing decodes only the envelope; the original bytes go out unless
a hook or the edge changed them.

A client's answer the edge holds (:meth:`Edge.hold`: a thread list while the
sidecar's own thread start is unanswered) waits while later frames go on; a
timer task bounds the wait and ends as soon as the answer goes on.

Hooks are synchronous and may hand slow work to ``spawn``; such a hook holds
its message (returns ``HANDLED``) and later forwards, answers or drops it
with :meth:`Router.forward_client_request`, :meth:`Router.answer_client_request`,
while :meth:`Router.gate` keeps the client's later requests on the same
thread behind it. Every line to the child leaves through :meth:`Router._to_child`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol

import msgspec
import trio

from protocol import (
    CHILD_EXITED,
    Envelope,
    Fragment,
    IdSpace,
    InvalidMessage,
    Oversized,
    RpcId,
    decode,
    encode_error,
    encode_request,
    experimental,
    parse,
)
from protocol.jsonrpc import PREFIX as INTERNAL_PREFIX

from ..rows import ITEMS, THREAD, Part, Phase, Row, Sender, install
from .calls import InternalCall, InternalCalls
from .control import ControlMethods, Later
from .edge import Edge, Held
from .messages import HANDLED, Hooks, Message, PendingRequest, RpcError, dead_child_error, exit_text
from .negotiation import Negotiation
from .observe import Observed
from .options import ProxyOptions
from .rawlines import RawLines

if TYPE_CHECKING:
    from ..record import Recorder

log = logging.getLogger("codex_sidecar.proxy")

CONTROL_PREFIX = "sidecar/"

# fmt: off
RELAY_ROWS = (
    Row(method="initialize", request=Negotiation.on_initialize, part=Part.RELAY, phase=Phase.FRONT),
    Row(method="initialize", response=Observed.on_initialize, part=Part.RELAY, phase=Phase.SEE),
    Row(method="thread/start", response=Observed.on_thread_result, part=Part.RELAY, phase=Phase.SEE),
    Row(method="thread/resume", response=Observed.on_thread_result, part=Part.RELAY, phase=Phase.SEE),
    Row(method="thread/fork", response=Observed.on_thread_result, part=Part.RELAY, phase=Phase.SEE),
    Row(method="thread/started", source=Sender.NOTIFICATION, request=Observed.on_thread_started, part=Part.RELAY, phase=Phase.SEE, thread_keys=THREAD + ITEMS),
)
# fmt: on
"""The relay's own rows of the method table (:data:`sidecar.methods.METHODS`
lists them first): what the client negotiated, and what ``sidecar/status``
shows (Codex's version, the threads seen). The router installs them on its
hooks, with or without a lifecycle."""

CLIENT_TO_CODEX = "client>codex"
CODEX_TO_CLIENT = "codex>client"
SIDECAR_TO_CODEX = "sidecar>codex"
SIDECAR_TO_CLIENT = "sidecar>client"
CLIENT_TO_SIDECAR = "client>sidecar"
CODEX_TO_SIDECAR = "codex>sidecar"

_UNSET = msgspec.UNSET


class Sink(Protocol):
    """Where the router puts one direction's output (an ``Outbox``)."""

    def put_line(self, line: bytes) -> bool: ...
    def put(self, data: bytes) -> bool: ...
    def put_raw(self, data: bytes, end: bool) -> bool: ...


class Counters(msgspec.Struct):
    frames: int = 0
    bytes: int = 0
    invalid: int = 0
    oversized: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "frames": self.frames,
            "bytes": self.bytes,
            "invalidFrames": self.invalid,
            "oversizedFrames": self.oversized,
        }


def _no_spawn(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    raise RuntimeError("the router has no task runner")


class Activity:
    """When a reader was last told to expect data (``time.perf_counter``):
    the router marks it, the shell's pipe reader polls in its window."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0.0

    def mark(self) -> None:
        self.last = perf_counter()


class Router:
    def __init__(
        self,
        to_child: Sink,
        to_client: Sink,
        *,
        hooks: Hooks | None = None,
        spawn: Callable[..., None] = _no_spawn,
        options: ProxyOptions | None = None,
        edge: Edge | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        """Built whole: what is optional at its fixed points is given here
        or never. ``options``: the longest line parsed, whether the sidecar
        speaks for an engine (:class:`Negotiation`), and whether readers
        busy-poll (then the router marks when each side will answer).
        ``edge``: the one optional edge at the child's side (:class:`Edge`).
        ``recorder``: what every line in and out is shown to (``--record``)."""
        options = options or ProxyOptions()
        self.to_child = to_child
        self.to_client = to_client
        self.hooks = hooks or Hooks()
        self.controls = ControlMethods()
        """The ``sidecar/...`` methods this router answers itself (added by the shell)."""
        self.recorder = recorder
        self.spawn = spawn
        """Runs ``fn(*args)`` as a task (an async control method's answer)."""
        self.max_line = options.max_line
        self.edge = edge
        ids = IdSpace()
        self.pending = PendingTable(ids)
        self.calls = InternalCalls(ids)
        self.gates = Gates()
        self.c2s = Counters()
        self.s2c = Counters()
        self.observed = Observed()
        self.negotiation = Negotiation(options.engine_reads)
        install(self.hooks, (self.negotiation, self.observed), {Part.RELAY}, RELAY_ROWS)
        self.child_gone = False
        self.child_expected = Activity()
        """When the child will answer soon (a request went to it)."""
        self.client_expected = Activity()
        """When the client may write soon (it got a response or a server request)."""
        self.busy_poll = options.busy_poll > 0
        """Whether the shell's readers poll: the marks above are kept only then."""
        self.raw = RawLines(self)
        """Lines too long to parse, streamed through in pieces."""

    # ----------------------------------------------------------- sending

    def _to_child(self, line: bytes, direction: str, counters: Counters | None = None, through_edge: bool = True) -> bool:
        """The one way a line goes to the child."""
        if through_edge and self.edge is not None and self.edge.maps_to_codex:
            line = self.edge.to_codex(line)
        if counters is not None:
            counters.frames += 1
            counters.bytes += len(line) + 1
        if self.recorder is not None:
            self.recorder.record(direction, line)
        return self.to_child.put_line(line)

    def _to_client(self, line: bytes, direction: str, counters: Counters | None = None) -> bool:
        if counters is not None:
            counters.frames += 1
            counters.bytes += len(line) + 1
        if self.recorder is not None:
            self.recorder.record(direction, line)
        return self.to_client.put_line(line)

    def _record(self, direction: str, line: bytes) -> None:
        if self.recorder is not None:
            self.recorder.record(direction, line)

    def send_to_child(self, line: bytes, direction: str = SIDECAR_TO_CODEX, *, raw: bool = False) -> bool:
        """``raw``: not through the edge (a request about a retired thread)."""
        return self._to_child(line, direction, through_edge=not raw)

    def send_to_client(self, line: bytes, direction: str = SIDECAR_TO_CLIENT) -> bool:
        """A line of the sidecar's (or one a hook held) to the client: never a
        notification the client opted out of (:class:`Negotiation`)."""
        if self.negotiation.hidden:
            env = parse(line)
            if env.id is _UNSET and env.method in self.negotiation.hidden:
                self._record(CODEX_TO_SIDECAR, line)
                return True
        return self._to_client(line, direction)

    # ------------------------------------------------ held client requests

    def forward_client_request(self, msg: Message) -> bool:
        """Forward a client request a hook held back (or rewrote later)."""
        pending = self.pending.find(msg.env.id)  # type: ignore[arg-type]
        if pending is None:
            return False  # already answered (e.g. the child died meanwhile): nothing to send
        if self.child_gone:
            self._fail_pending(pending)
            return False
        pending.forwarded = True
        return self._request_to_child(msg, pending)

    def answer_client_request(self, client_id: RpcId, line: bytes) -> bool:
        """Answer a held client request from the sidecar (no child involved)."""
        pending = self.pending.find(client_id)
        if pending is not None:
            self.pending.close(pending.wire_id)
        return self._to_client(line, SIDECAR_TO_CLIENT)

    def gate(self, thread_id: str, holder: Any) -> None:
        """Hold the client's later requests naming ``thread_id`` while
        ``holder`` (a hook holding one of its requests) has it gated: Codex
        must see them in the client's order. Idempotent per holder."""
        if not self.child_gone:
            self.gates.hold(thread_id, holder)

    def ungate(self, thread_id: str, holder: Any) -> None:
        """``holder`` is done; when it was the last, the waiting requests go
        (to codex, or answered -32001 if it has exited), in the order they came."""
        for msg in self.gates.release(thread_id, holder):
            self._client_request(msg)

    # ----------------------------------------------------- internal calls

    def call(
        self,
        method: str,
        params: Any = None,
        *,
        raw: bool = False,
        on_result: Callable[[Any], None] | None = None,
        notify: Callable[[], Any] | None = None,
    ) -> InternalCall:
        """Send the sidecar's own request; ``notify`` runs once it is settled.
        Raises ``RpcError`` when the child is gone."""
        if self.child_gone:
            raise RpcError(CHILD_EXITED, "codex app-server is not running")
        call = self.calls.open(method, on_result, notify)
        if self.edge is not None:
            self.edge.sidecar_request(call.id, method)
        self._to_child(encode_request(call.id, method, params), SIDECAR_TO_CODEX, through_edge=not raw)
        return call

    def end_call(self, call: InternalCall, timed_out: bool = False) -> None:
        self.calls.end(call, timed_out)

    # ------------------------------------------------------ child's exit

    def child_exited(self, rc: int | None) -> int:
        """Answer for the child: every pending and gated client request gets
        -32001, every internal call fails. The number of pending requests."""
        self.child_gone = True
        failed = self.pending.take_all()
        for pending in failed:
            self._send_child_exited(pending, rc)
        for msg in self.gates.release_all():
            self._client_request(msg)  # the child is gone: answered -32001
        self.calls.fail_all(RpcError(CHILD_EXITED, exit_text(rc)))
        if self.edge is not None:
            self._release(self.edge.release_all())  # Codex's own answers: they go as they are
        return len(failed)

    def _fail_pending(self, pending: PendingRequest, rc: int | None = None) -> None:
        self.pending.close(pending.wire_id)
        self._send_child_exited(pending, rc)

    def _send_child_exited(self, pending: PendingRequest, rc: int | None) -> None:
        self._to_client(encode_error(pending.client_id, *dead_child_error(pending, rc)), SIDECAR_TO_CLIENT)

    # -------------------------------------------------- client -> child

    def from_client(self, line: bytes) -> None:
        try:
            env = parse(line)
        except InvalidMessage as exc:
            self.c2s.invalid += 1
            log.warning("invalid frame from client forwarded", extra={"fields": {"error": str(exc)}})
            self._to_child(line, CLIENT_TO_CODEX, self.c2s)
            return
        method = env.method
        if method is _UNSET or env.id is _UNSET:
            # Responses to server requests and client notifications pass through.
            if method is not _UNSET and method.startswith(CONTROL_PREFIX):
                return  # a control notification: nothing to answer, nothing to forward
            if method is _UNSET and self.busy_poll:
                self.child_expected.last = perf_counter()  # codex goes on after an answer
            self._to_child(line, CLIENT_TO_CODEX, self.c2s)
            return
        if method.startswith(CONTROL_PREFIX):
            self._control(line)
            return
        if self.gates or self.child_gone or self.hooks.client_requests.get(method) or _reserved(env.id) or (self.negotiation.screens and experimental.gated(method)):
            self._client_request(Message(env, line))
            return
        # Nobody reads it and nothing changes it: the relay's fast path, no Message.
        self.pending.open(env.id, method).forwarded = True
        if self.busy_poll:
            self.child_expected.last = perf_counter()
        self._to_child(line, CLIENT_TO_CODEX, self.c2s)

    def _client_request(self, msg: Message) -> None:
        """A client request (parsed, not a control method): gated, failed,
        hooked or forwarded. The one ``Message`` carries its decoded params
        from the gate check through the hooks to the child."""
        if self.negotiation.screens and experimental.gated(msg.method):
            refused = self.negotiation.refuse(msg.id, msg.method, msg.params())
            if refused is not None:
                # The client's own connection could not send it: codex's own
                # refusal, from the sidecar (codex would now accept it).
                self._record(CLIENT_TO_SIDECAR, msg.line)
                self._to_client(refused, SIDECAR_TO_CLIENT)
                return
        if self.gates and not self.child_gone:
            thread_id = msg.thread_id
            if thread_id is not None and self.gates.gated(thread_id):
                self.gates.park(thread_id, msg)
                return
        env = msg.env  # the envelope's id and method: no call into the message
        client_id: RpcId = env.id  # type: ignore[assignment]
        method: str = env.method  # type: ignore[assignment]
        if self.child_gone:
            self._record(CLIENT_TO_CODEX, msg.line)
            self._to_client(encode_error(client_id, *dead_child_error(PendingRequest(client_id, method, client_id), None)), SIDECAR_TO_CLIENT)
            return
        pending = msg.request = self.pending.open(client_id, method)
        hooks = self.hooks.client_requests.get(method)
        if hooks:
            if self._run_chain(hooks, msg, request=pending) is None:
                return
        if self.busy_poll:
            self.child_expected.last = perf_counter()
        pending.forwarded = True
        self._request_to_child(msg, pending)

    def _request_to_child(self, msg: Message, pending: PendingRequest) -> bool:
        """A client request leaves for the child: under its wire id, its
        thread ids mapped by the edge (on the decoded params when a hook
        decoded them, else on the bytes), encoded once if anything changed."""
        if pending.wire_id is not pending.client_id:
            msg.set_id(pending.wire_id)
        if msg.params_changed and pending.original is None:
            pending.original = msg.line
        edge = self.edge
        if edge is not None and edge.maps_to_codex and msg.decoded:
            params = msg.params()
            mapped = edge.request_params(params)
            if mapped is not params:
                msg.set_params(mapped)
            return self._to_child(msg.wire(), CLIENT_TO_CODEX, self.c2s, through_edge=False)
        return self._to_child(msg.wire(), CLIENT_TO_CODEX, self.c2s)

    def _control(self, line: bytes) -> None:
        self._record(CLIENT_TO_SIDECAR, line)
        reply = self.controls.dispatch(line)
        if type(reply) is Later:
            self.spawn(self._answer_later, reply)
        else:
            self._to_client(reply, SIDECAR_TO_CLIENT)  # type: ignore[arg-type]

    async def _answer_later(self, later: Later) -> None:
        self._to_client(await later.reply(), SIDECAR_TO_CLIENT)

    def from_client_fragment(self, ev: Oversized | Fragment) -> None:
        """A piece of a client line too long to parse, or its stream's torn tail (:mod:`.rawlines`)."""
        self.raw.from_client(ev)

    # -------------------------------------------------- child -> client

    def from_child(self, line: bytes) -> None:
        try:
            env = parse(line)
        except InvalidMessage as exc:
            self.s2c.invalid += 1
            log.warning("invalid frame from codex forwarded", extra={"fields": {"error": str(exc)}})
            self._to_client(line, CODEX_TO_CLIENT, self.s2c)
            return
        if env.method is _UNSET:
            self._from_child_response(env, line)
            return
        edge = self.edge
        if edge is not None and edge.active:
            seen = edge.notification(line)
            if seen is None:
                self._record(CODEX_TO_SIDECAR, line)
                return  # about a thread the client does not know
            if seen is not line:
                line = seen
                env = parse(line)
        if env.id is _UNSET:
            hooks = self.hooks.server_notifications.get(env.method)  # type: ignore[arg-type]
        else:
            if self.negotiation.screens:
                answer = self.negotiation.answer_server_request(env.id, env.method)  # type: ignore[arg-type]
                if answer is not None:  # codex asks it of experimental clients only
                    self._record(CODEX_TO_SIDECAR, line)
                    self._to_child(answer, SIDECAR_TO_CODEX)
                    return
            hooks = self.hooks.server_requests.get(env.method)  # type: ignore[arg-type]
            if self.busy_poll:
                self.client_expected.last = perf_counter()
        if hooks:
            chained = self._run_chain(hooks, Message(env, line))
            if chained is None:
                return
            line = chained.wire()
        if self.negotiation.hidden and env.method in self.negotiation.hidden:
            self._record(CODEX_TO_SIDECAR, line)  # the client opted out of it; the lifecycle read it
            return
        self._to_client(line, CODEX_TO_CLIENT, self.s2c)

    def _from_child_response(self, env: Envelope, line: bytes) -> None:
        wire_id = env.id
        if type(wire_id) is str and wire_id.startswith(INTERNAL_PREFIX) and not self.pending.is_alias(wire_id):
            self._record(CODEX_TO_SIDECAR, line)
            self._answer_call(wire_id, env, line)
            if self.edge is not None:  # after its on_result: what it made known filters the answers it releases
                self._release(self.edge.sidecar_answered(wire_id))
            return
        if env.error:
            retry = self.pending.get(wire_id)  # type: ignore[arg-type]
            if retry is not None and retry.original is not None and _refused(env.error):
                self._send_original(retry, env)
                return
        pending = self.pending.close(wire_id)  # type: ignore[arg-type]
        if self.edge is not None and pending is not None and (wait := self.edge.hold(pending.method, held := Held(env, line, pending))) is not None:
            self.spawn(self._overdue, held, wait)  # the edge holds it; other frames go on meanwhile
            return
        self._deliver_response(env, line, pending)

    def _deliver_response(self, env: Envelope, line: bytes, pending: PendingRequest | None) -> None:
        """A client's answer, from the edge on: mapped, its id, its hooks, to the client."""
        if self.edge is not None:
            mapped = self.edge.response(line, pending.method if pending is not None else None)
            if mapped is not line:
                line = mapped
                env = parse(line)
        if pending is not None:
            hooks = self.hooks.responses.get(pending.method)
            if hooks or pending.wire_id is not pending.client_id:
                msg = Message(env, line)
                if pending.wire_id is not pending.client_id:
                    msg.set_id(pending.client_id)
                if hooks and self._run_chain(hooks, msg, pending) is None:
                    return
                line = msg.wire()
        if self.busy_poll:
            self.client_expected.last = perf_counter()  # clients often ask again at once
        self._to_client(line, CODEX_TO_CLIENT, self.s2c)

    def _send_original(self, pending: PendingRequest, env: Envelope) -> None:
        """Codex refused what the sidecar made of a client request: the
        client's own request goes instead, once, under the same wire id; its
        answer is the one the client and the response hooks see."""
        line, pending.original = pending.original, None
        assert line is not None
        pending.fell_back = True
        err = decode(env.error)
        log.warning(
            "codex refused the sidecar's change to a request; sending the client's own",
            extra={"fields": {"method": pending.method, "code": err.get("code") if isinstance(err, dict) else None}},
        )
        msg = Message(parse(line), line)
        if pending.wire_id is not pending.client_id:
            msg.set_id(pending.wire_id)
        self._to_child(msg.wire(), CLIENT_TO_CODEX, self.c2s)

    def _answer_call(self, call_id: str, env: Envelope, line: bytes) -> None:
        """An answer to the sidecar's own request: never the client's."""
        call = self.calls.live(call_id)
        late = call is None
        if call is None:
            call = self.calls.take_late(call_id)
            if call is None:
                log.info("late response to a sidecar request dropped")  # nobody waits for it
                return
        if env.error:
            err = decode(env.error)
            if not isinstance(err, dict):
                err = {}
            code = err.get("code", -32603)
            error = RpcError(code if type(code) is int else -32603, str(err.get("message", "")), err.get("data"))
            result = None
        else:
            if self.edge is not None:
                mapped = self.edge.response(line, call.method)
                if mapped is not line:
                    env = parse(mapped)
            error = None
            result = decode(env.result)
            if call.on_result is not None:
                try:
                    call.on_result(result)
                except Exception:
                    log.exception("internal result callback failed")
        if late:
            log.info("late response to a sidecar request dropped")  # its on_result had it
        else:
            self.calls.end(call)
            call.settle(result, error)

    def _release(self, held: list[Held]) -> None:
        for one in held:
            one.timer.cancel()  # its timer task ends now, not at the deadline
            self._deliver_response(one.env, one.line, one.pending)

    async def _overdue(self, held: Held, seconds: float) -> None:
        """At most ``seconds`` after the edge held it, ``held`` goes on (with
        what is known); the task ends at once when it went on before that
        (its timer cancelled, even before the task began)."""
        with held.timer:
            await trio.sleep(seconds)
        if not held.timer.cancel_called:
            self._release(self.edge.overdue(held) if self.edge is not None else [])

    def from_child_fragment(self, ev: Oversized | Fragment) -> None:
        """A piece of a child line too long to parse, or its stream's torn tail (:mod:`.rawlines`)."""
        self.raw.from_child(ev)

    # ------------------------------------------------------------ hooks

    def _run_chain(self, hooks: list[Any], msg: Message, pending: PendingRequest | None = None, request: PendingRequest | None = None) -> Message | None:
        """Run hooks in order; the message to forward, or None when one took it.
        A hook changes the message through it (``set_params``/``set_result``),
        seen by the hooks after it and encoded once when it leaves.
        A hook that raises fails open: the message goes on as it was.
        ``request``: a client request's pending entry, which keeps the params
        (and thread) the hooks read (the first message of the chain whose
        params were read)."""
        for hook in hooks:
            edits = None if msg._changes is None else dict(msg._changes)  # Message.edits, inlined on every hook's path
            try:
                decision = hook(msg) if pending is None else hook(msg, pending)
            except Exception:
                log.exception("hook failed; forwarding the message unchanged", extra={"fields": {"hook": _name(hook)}})
                msg.restore(edits)  # what it changed before it failed goes too
                continue
            if request is not None and request.params is None:
                request.params = msg.params_if_read()
                if request.params is not None:
                    request.thread_id = msg.thread_id
            if decision is HANDLED:
                return None
        return msg


REFUSALS = frozenset({-32600, -32602})
"""Codex's answers to a request it would not take as it was (invalid
request, invalid params): what a change of the sidecar's may have caused."""


def _refused(error: msgspec.Raw) -> bool:
    err = decode(error)
    return isinstance(err, dict) and err.get("code") in REFUSALS


def _reserved(rpc_id: Any) -> bool:
    """``IdSpace.is_reserved``, inlined on the request's path: a client id in
    the sidecar's own space travels under an alias."""
    return isinstance(rpc_id, str) and rpc_id.startswith(INTERNAL_PREFIX)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


# -- bookkeeping: requests in flight and gated threads -------------------------
# The router's bookkeeping, sans I/O: requests in flight and gated threads.
#
# * :class:`PendingTable`: client requests Codex has not answered, keyed by
#   the id Codex sees; a client id inside the sidecar's own id space travels
#   under an alias and comes back as itself.
# * :class:`Gates`: threads whose later requests wait behind one a hook holds.
#
# Both are on every request's path, so they live here; the sidecar's own
# requests (:class:`~sidecar.relay.calls.InternalCalls`) and lines too long
# to parse (:class:`~sidecar.relay.rawlines.RawLines`) have modules of their own.


class PendingTable:
    __slots__ = ("ids", "_by_wire")

    def __init__(self, ids: IdSpace) -> None:
        self.ids = ids
        self._by_wire: dict[RpcId, PendingRequest] = {}

    def open(self, client_id: RpcId, method: str) -> PendingRequest:
        """Take a client request in: its wire id (an alias when the client's
        id lies in the sidecar's space) is what goes to Codex."""
        wire_id = self.ids.alias_client_id(client_id) if _reserved(client_id) else client_id
        pending = PendingRequest(client_id, method, wire_id)
        self._by_wire[wire_id] = pending
        return pending

    def close(self, wire_id: RpcId) -> PendingRequest | None:
        """The request answered under ``wire_id``, forgotten (alias included)."""
        pending = self._by_wire.pop(wire_id, None)
        if pending is not None and pending.wire_id is not pending.client_id:
            self.ids.resolve_alias(pending.wire_id)  # type: ignore[arg-type]
        return pending

    def get(self, wire_id: RpcId) -> PendingRequest | None:
        """The request pending under ``wire_id`` (left pending)."""
        return self._by_wire.get(wire_id)

    def find(self, client_id: RpcId) -> PendingRequest | None:
        """The pending request with the client's id ``client_id``."""
        if not _reserved(client_id):
            return self._by_wire.get(client_id)
        for p in self._by_wire.values():
            if p.client_id == client_id and p.wire_id is not p.client_id:
                return p
        return None

    def is_alias(self, wire_id: RpcId) -> bool:
        return self.ids.is_alias(wire_id)

    def take_all(self) -> list[PendingRequest]:
        """Every pending request, forgotten (the child is gone)."""
        out = list(self._by_wire.values())
        for pending in out:
            self.close(pending.wire_id)
        return out

    def methods(self) -> set[str]:
        return {p.method for p in self._by_wire.values()}

    def __len__(self) -> int:
        return len(self._by_wire)

    def __iter__(self) -> Iterator[PendingRequest]:
        return iter(list(self._by_wire.values()))


class Gates:
    """Threads gated by holders, and the lines waiting on each, in order."""

    __slots__ = ("_gates",)

    def __init__(self) -> None:
        self._gates: dict[str, tuple[set[Any], list[Message]]] = {}

    def hold(self, thread_id: str, holder: Any) -> None:
        self._gates.setdefault(thread_id, (set(), []))[0].add(holder)

    def gated(self, thread_id: str) -> bool:
        return thread_id in self._gates

    def park(self, thread_id: str, msg: Message) -> None:
        self._gates[thread_id][1].append(msg)

    def release(self, thread_id: str, holder: Any) -> list[Message]:
        """``holder`` lets go; when it was the last, the thread's waiting requests
        in the order they came (and the thread is no longer gated)."""
        gate = self._gates.get(thread_id)
        if gate is None:
            return []
        gate[0].discard(holder)
        if gate[0]:
            return []
        del self._gates[thread_id]
        return gate[1]

    def release_all(self) -> list[Message]:
        gates, self._gates = self._gates, {}
        return [msg for _holders, msgs in gates.values() for msg in msgs]

    @property
    def waiting(self) -> int:
        """Lines waiting behind a gate."""
        return sum(len(lines) for _holders, lines in self._gates.values())

    def __len__(self) -> int:
        """Gated threads."""
        return len(self._gates)
