"""The relay between one client and one app-server child.

Every frame is forwarded unchanged unless a hook has a reason to change it.
Routing decodes only the envelope; the original bytes go out. Hooks are
synchronous (a rewrite keeps the message's place in the stream) and may hand
slow work to a task of the proxy's nursery, which later forwards, answers or
drops the held message; unrelated traffic keeps flowing meanwhile.

One nursery owns every task: two readers, two writers, the child supervisor,
the signal forwarder and whatever hooks spawn. Nothing depends on a clean
exit: the process can be SIGKILLed at any instant, and anything worth keeping
is written where it happens, not at shutdown.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol import (
    CHILD_EXITED,
    OUTCOME_UNKNOWN,
    Envelope,
    Fragment,
    IdSpace,
    InvalidMessage,
    Kind,
    LineSplitter,
    Oversized,
    RpcId,
    decode,
    encode_error,
    encode_request,
    encode_response,
    parse,
    rewrite,
)
from protocol.ids import PREFIX as INTERNAL_PREFIX

from . import __version__
from .child import FORWARDED_SIGNALS, Child
from .outbox import Outbox
from .record import Recorder

log = logging.getLogger("codex_sidecar.proxy")

READ_SIZE = 1 << 20
CONTROL_PREFIX = "sidecar/"


class _Handled:
    __slots__ = ()

    def __repr__(self) -> str:
        return "HANDLED"


HANDLED = _Handled()
"""Hook decision: the hook took the message; the relay must not forward it."""

Decision = None | bytes | _Handled
"""A hook returns None (forward unchanged), new bytes (forward these), or HANDLED."""


@dataclass(slots=True)
class Message:
    """One parsed frame: its routing envelope and its exact bytes."""

    env: Envelope
    line: bytes

    @property
    def id(self) -> RpcId:
        return self.env.id  # type: ignore[return-value]

    @property
    def method(self) -> str:
        return self.env.method  # type: ignore[return-value]

    def params(self) -> Any:
        return decode(self.env.params) if self.env.params else None

    def result(self) -> Any:
        return decode(self.env.result) if self.env.result else None

    def error(self) -> Any:
        return decode(self.env.error) if self.env.error else None


@dataclass(slots=True)
class PendingRequest:
    """A client request the sidecar has taken in and not yet seen answered."""

    client_id: RpcId
    method: str
    wire_id: RpcId
    forwarded: bool = False
    """Handed to codex: if codex dies now, whether it ran is unknown."""


ClientRequestHook = Callable[[Message], Decision]
ServerMessageHook = Callable[[Message], Decision]
ResponseHook = Callable[[Message, PendingRequest], Decision]


@dataclass
class Hooks:
    """Interception points, by method name. Hooks run in order; the first
    HANDLED stops the chain, a returned ``bytes`` replaces the message for the
    hooks after it and for the wire."""

    client_requests: dict[str, list[ClientRequestHook]] = field(default_factory=dict)
    responses: dict[str, list[ResponseHook]] = field(default_factory=dict)
    server_notifications: dict[str, list[ServerMessageHook]] = field(default_factory=dict)
    server_requests: dict[str, list[ServerMessageHook]] = field(default_factory=dict)

    def on_client_request(self, method: str, hook: ClientRequestHook) -> None:
        self.client_requests.setdefault(method, []).append(hook)

    def on_response(self, method: str, hook: ResponseHook) -> None:
        """Responses (results and errors) to client requests of ``method``."""
        self.responses.setdefault(method, []).append(hook)

    def on_server_notification(self, method: str, hook: ServerMessageHook) -> None:
        self.server_notifications.setdefault(method, []).append(hook)

    def on_server_request(self, method: str, hook: ServerMessageHook) -> None:
        self.server_requests.setdefault(method, []).append(hook)


class RpcError(Exception):
    """An error response to a request the sidecar itself sent."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data


LATE_CALLS = 64
"""Timed-out internal calls whose late answer is still awaited (oldest dropped)."""


class _InternalCall:
    __slots__ = ("done", "result", "error", "method", "on_result")

    def __init__(self, method: str = "", on_result: Callable[[Any], None] | None = None) -> None:
        self.done = trio.Event()
        self.result: Any = None
        self.error: RpcError | None = None
        self.method = method
        self.on_result = on_result
        """Run as the answer is read, before any later frame is."""


@dataclass
class Counters:
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


@dataclass
class ProxyOptions:
    max_line: int = 64 * 1024 * 1024
    eof_grace: float = 2.0
    """Seconds the child gets to exit on its own after the client hangs up."""
    kill_grace: float = 3.0
    """Seconds between SIGTERM and SIGKILL when the child lingers."""
    high_water: int = 1024 * 1024
    forward_signals: bool = True
    busy_poll: float = 300e-6
    """Seconds a reader keeps polling its pipe for an answer it expects (a
    response, or the client's next request) before it sleeps in epoll;
    0 = sleep at once. See ``effective_busy_poll`` and ``_receiver``."""


def effective_busy_poll(requested: float) -> float:
    """The busy-poll window actually used: none on a single CPU.

    Polling only pays when the peer that will answer runs on another CPU; on
    one CPU the poller would take the very CPU the peer needs.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return requested if requested > 0 and cpus > 1 else 0.0


_USER_AGENT_VERSION = re.compile(r"/(\d+\.\d+\.\d+[0-9A-Za-z.+-]*)")

# The head of a line too long to parse: its id, when the line starts with it
# (Codex writes responses as {"id":...,"result"|"error":...}), and a request's
# method when it follows the id.
_HEAD_OPEN = re.compile(rb'\s*\{')
_HEAD_KEY = re.compile(rb'\s*"((?:[^"\\]|\\.)*)"\s*:\s*')
_HEAD_SCALAR = re.compile(rb'(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|"(?:[^"\\]|\\.)*"|null|true|false)\s*,?')


def _scan_head(data: bytes) -> tuple[dict[bytes, tuple[int, int]], bytes | None]:
    """The scalar members at the start of a JSON object too long to parse
    (key -> span of its value), and the key of the first member that is not
    a scalar (``params``, ``result``...), where the scan stops."""
    m = _HEAD_OPEN.match(data)
    if m is None:
        return {}, None
    fields: dict[bytes, tuple[int, int]] = {}
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
_id_decoder = msgspec.json.Decoder()
_id_encoder = msgspec.json.Encoder()


def codex_version_from_user_agent(user_agent: str) -> str | None:
    """``"codex_cli_rs/0.169.0 (Linux ...)"`` -> ``"0.169.0"`` (what OpenClaw checks)."""
    m = _USER_AGENT_VERSION.search(user_agent)
    return m.group(1) if m else None


class Proxy:
    """Relays between a client byte stream pair and a child process's stdio."""

    def __init__(
        self,
        argv: list[str],
        *,
        client_in: trio.abc.ReceiveStream,
        client_out: trio.abc.SendStream,
        env: dict[str, str] | None = None,
        options: ProxyOptions | None = None,
        hooks: Hooks | None = None,
        recorder: Recorder | None = None,
        control: Callable[[bytes], bytes] | None = None,
        child: Child | None = None,
    ) -> None:
        """``child``: already started (with ``argv``); else :meth:`run` starts it."""
        self.argv = list(argv)
        self.env = env
        self._started_child = child
        self.options = options or ProxyOptions()
        self.hooks = hooks or Hooks()
        self.recorder = recorder
        self.edge: Any = None
        """A :class:`sidecar.backing.BackingThreads` when rebuilds switch
        threads: translates thread ids at the child's edge."""
        self._client_in = client_in
        self._client_out = client_out
        self._control = control
        self._async_controls: dict[str, Callable[[dict[str, Any]], Awaitable[Any]]] = {}
        self._status_providers: dict[str, Callable[[], Any]] = {}
        self._ids = IdSpace()
        self._pending: dict[RpcId, PendingRequest] = {}
        self._internal: dict[str, _InternalCall] = {}
        self._late: dict[str, _InternalCall] = {}
        """Timed-out calls whose answer still runs their ``on_result``."""
        self._gates: dict[str, tuple[set[Any], list[bytes]]] = {}
        """Threads with a request a hook is holding: (its holders, the later
        requests naming the thread, waiting in order)."""
        self._raw_c2s_open = False
        """A client line too long to parse is being streamed to codex."""
        self._raw_s2c: str | None = None
        """The same from codex: "forward" it, or "drop" it (the sidecar's own answer)."""
        self.to_child = Outbox("codex", self.options.high_water)
        self.to_client = Outbox("client", self.options.high_water)
        self.c2s = Counters()
        self.s2c = Counters()
        self.started_at = time.monotonic()
        self.busy_poll = effective_busy_poll(self.options.busy_poll)
        # When each reader should expect an answer: the child's after a
        # request went to it, the client's after a response or server
        # request went to it. Notifications set neither.
        self._expect_child = _Activity()
        self._expect_client = _Activity()
        self.codex_version: str | None = None
        self.user_agent: str | None = None
        self.threads_seen: set[str] = set()
        self.exit_status: int | None = None
        self.process: Child | None = None
        self._nursery: trio.Nursery | None = None
        self._child_stdout_done = trio.Event()
        self._child_gone = False
        self._client_gone = False
        self._shutdown_started = False
        self._install_builtin_hooks()

    # ------------------------------------------------------------------ API

    def set_control(self, handler: Callable[[bytes], bytes]) -> None:
        """Who answers ``sidecar/...`` requests (given the line, returns the reply)."""
        self._control = handler

    def add_async_control(self, method: str, fn: Callable[[dict[str, Any]], Awaitable[Any]]) -> None:
        """A ``sidecar/...`` method that needs to await (e.g. the child):
        ``fn(params)`` runs in a task; its return value is the result, an
        ``RpcError`` it raises the error."""
        self._async_controls[method] = fn

    def add_status_provider(self, name: str, fn: Callable[[], Any]) -> None:
        """Adds ``name: fn()`` to ``sidecar/status``."""
        self._status_providers[name] = fn

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in the proxy's nursery (hooks hand slow work here)."""
        assert self._nursery is not None, "proxy is not running"
        self._nursery.start_soon(fn, *args)

    def send_to_child(self, line: bytes, direction: str = "sidecar>codex", *, raw: bool = False) -> bool:
        """``raw``: no thread id translation (a request about a retired thread)."""
        if self.edge is not None and not raw:
            line = self.edge.to_codex(line)
        self._record(direction, line)
        return self.to_child.put_line(line)

    def send_to_client(self, line: bytes, direction: str = "sidecar>client") -> bool:
        self._record(direction, line)
        return self.to_client.put_line(line)

    def forward_client_request(self, msg: Message) -> bool:
        """Forward a client request a hook held back (or rewrote later)."""
        pending = self._find_pending(msg.env.id)  # type: ignore[arg-type]
        if pending is None:
            # Already answered (e.g. the child died meanwhile): nothing to send.
            return False
        line = msg.line
        if pending.wire_id != pending.client_id:
            line = rewrite(line, id=pending.wire_id)
        if self._child_gone:
            self._fail_pending_request(pending)
            return False
        if self.edge is not None:
            line = self.edge.to_codex(line)
        self.c2s.frames += 1
        self.c2s.bytes += len(line) + 1
        self._record("client>codex", line)
        pending.forwarded = True
        return self.to_child.put_line(line)

    def gate(self, thread_id: str, holder: Any) -> None:
        """Hold the client's later requests naming ``thread_id`` while
        ``holder`` (a hook holding one of its requests) has it gated: Codex
        must see them in the client's order. Idempotent per holder."""
        if not self._child_gone:
            self._gates.setdefault(thread_id, (set(), []))[0].add(holder)

    def ungate(self, thread_id: str, holder: Any) -> None:
        """``holder`` is done; when it was the last, the waiting requests go
        (to codex, or answered -32001 if it has exited), in the order they came."""
        gate = self._gates.get(thread_id)
        if gate is None:
            return
        gate[0].discard(holder)
        if gate[0]:
            return
        del self._gates[thread_id]
        for line in gate[1]:
            self._from_client(line)

    def _fail_gated_requests(self) -> None:
        """The child exited: requests still waiting behind a gate are answered too."""
        gates, self._gates = self._gates, {}
        for _holders, lines in gates.values():
            for line in lines:
                self._from_client(line)  # the child is gone: answered -32001

    def answer_client_request(self, client_id: RpcId, line: bytes) -> bool:
        """Answer a held client request from the sidecar (no child involved)."""
        pending = self._find_pending(client_id)
        if pending is not None:
            del self._pending[pending.wire_id]
            if pending.wire_id is not pending.client_id:
                self._ids.resolve_alias(pending.wire_id)  # type: ignore[arg-type]
        return self.send_to_client(line)

    def _find_pending(self, client_id: RpcId) -> PendingRequest | None:
        if not IdSpace.is_reserved(client_id):
            return self._pending.get(client_id)
        for p in self._pending.values():
            if p.client_id == client_id and p.wire_id is not p.client_id:
                return p
        return None

    async def request(
        self,
        method: str,
        params: Any = None,
        *,
        timeout: float | None = None,
        raw: bool = False,
        on_result: Callable[[Any], None] | None = None,
    ) -> Any:
        """Send the sidecar's own request to the child; its response never
        reaches the client. Raises ``RpcError`` (also when the child exits).
        ``raw``: thread ids go to Codex untranslated (see ``edge``);
        ``on_result``: called with the result as soon as it is read."""
        if self._child_gone:
            raise RpcError(CHILD_EXITED, "codex app-server is not running")
        call_id = self._ids.new_internal()
        call = _InternalCall(method, on_result)
        self._internal[call_id] = call
        timed_out = False
        try:
            self.send_to_child(encode_request(call_id, method, params), raw=raw)
            if timeout is None:
                await call.done.wait()
            else:
                with trio.fail_after(timeout):
                    await call.done.wait()
        except trio.TooSlowError:
            timed_out = True
            raise
        finally:
            self._internal.pop(call_id, None)
            if timed_out and on_result is not None:
                self._late[call_id] = call  # its answer still needs on_result
                while len(self._late) > LATE_CALLS:
                    del self._late[next(iter(self._late))]  # never answered: let go of the oldest
        if call.error is not None:
            raise call.error
        return call.result

    def pending_methods(self) -> set[str]:
        """Methods of the client requests Codex has not answered yet."""
        return {p.method for p in self._pending.values()}

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def gated_count(self) -> int:
        """Client requests waiting behind a held request on their thread."""
        return sum(len(lines) for _holders, lines in self._gates.values())

    def status(self) -> dict[str, Any]:
        return {
            "sidecarVersion": __version__,
            "pid": os.getpid(),
            "childPid": self.process.pid if self.process else None,
            "childRunning": self.process is not None and self.process.returncode is None,
            "codexVersion": self.codex_version,
            "userAgent": self.user_agent,
            "uptimeSeconds": round(time.monotonic() - self.started_at, 3),
            "clientToCodex": self.c2s.as_dict(),
            "codexToClient": self.s2c.as_dict(),
            "pendingRequests": len(self._pending),
            "gatedRequests": self.gated_count,
            "threadsSeen": sorted(self.threads_seen),
            "busyPollMicroseconds": round(self.busy_poll * 1e6),
            **{name: fn() for name, fn in self._status_providers.items()},
        }

    # ------------------------------------------------------------- running

    async def run(self) -> int:
        """Spawn the child, relay until both sides are done; the child's status.

        Raises ``OSError`` when the child cannot be started.
        """
        self.process = self._started_child or Child.spawn(self.argv, self.env)
        log.info("child started", extra={"fields": {"childPid": self.process.pid}})
        for stream in (self.process.stdin, self.process.stdout, self._client_in, self._client_out):
            _grow_pipe(stream)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.to_child.run_writer, self.process.stdin)
            nursery.start_soon(self.to_client.run_writer, self._client_out)
            nursery.start_soon(self._pump_client)
            nursery.start_soon(self._pump_child)
            nursery.start_soon(self._watch_client_out)
            if self.options.forward_signals:
                nursery.start_soon(self._forward_signals)
            nursery.start_soon(self._supervise)
        assert self.exit_status is not None
        return self.exit_status

    async def _supervise(self) -> None:
        assert self.process is not None and self._nursery is not None
        rc = await self.process.wait()
        # Deliver what the child wrote before it died, then answer for it.
        with trio.move_on_after(2.0):
            await self._child_stdout_done.wait()
        self._child_gone = True
        self.to_child.close()
        n = len(self._pending)
        for pending in list(self._pending.values()):
            self._fail_pending_request(pending, rc)
        self._fail_gated_requests()
        for call in self._internal.values():
            call.error = RpcError(CHILD_EXITED, _exit_text(rc))
            call.done.set()
        self.exit_status = 128 - rc if rc < 0 else rc
        log.info(
            "child exited",
            extra={"fields": {"status": rc, "exitStatus": self.exit_status, "failedRequests": n}},
        )
        self.to_client.close()
        with trio.move_on_after(5.0):
            await self.to_client.finished.wait()
        self._nursery.cancel_scope.cancel()

    def _fail_pending_request(self, pending: PendingRequest, rc: int | None = None) -> None:
        self._pending.pop(pending.wire_id, None)
        if self._ids.is_alias(pending.wire_id):
            self._ids.resolve_alias(pending.wire_id)  # type: ignore[arg-type]
        self.send_to_client(encode_error(pending.client_id, *_dead_child_error(pending, rc)))

    async def _shutdown_child(self, why: str) -> None:
        """The client is gone: close the child's stdin, then insist."""
        if self._shutdown_started:
            return
        self._shutdown_started = True
        assert self.process is not None
        log.info("client gone; stopping child", extra={"fields": {"reason": why}})
        self.to_child.close()
        with trio.move_on_after(self.options.eof_grace):
            await self.process.wait()
            return
        if self.process.returncode is None:
            log.warning("child ignored stdin EOF; sending SIGTERM")
            self.process.terminate()
        with trio.move_on_after(self.options.kill_grace):
            await self.process.wait()
            return
        if self.process.returncode is None:
            log.warning("child ignored SIGTERM; sending SIGKILL")
            self.process.kill()

    async def _watch_client_out(self) -> None:
        await self.to_client.finished.wait()
        if self.to_client.broken and not self._child_gone:
            self._client_gone = True
            await self._shutdown_child("client output closed")

    async def _forward_signals(self) -> None:
        assert self.process is not None
        with trio.open_signal_receiver(*FORWARDED_SIGNALS) as signals:
            async for signum in signals:
                if self.process.returncode is None:
                    log.info("forwarding signal", extra={"fields": {"signal": signum}})
                    try:
                        self.process.send_signal(signum)
                    except ProcessLookupError:
                        pass

    async def _run_async_control(self, handler: Callable[[dict[str, Any]], Awaitable[Any]], request_id: RpcId, raw_params: msgspec.Raw) -> None:
        params = decode(raw_params) if raw_params else {}
        try:
            result = await handler(params if isinstance(params, dict) else {})
            reply = encode_response(request_id, result)
        except RpcError as exc:
            reply = encode_error(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:
            log.exception("control method failed")
            reply = encode_error(request_id, -32603, "control method failed", type(exc).__name__)
        self.send_to_client(reply)

    # ------------------------------------------------------------- readers

    async def _pump_client(self) -> None:
        try:
            await self._pump(self._client_in, self.to_child, self._from_client, self._from_client_raw, self._expect_client)
        finally:
            self._client_gone = True
        if not self._child_gone:
            await self._shutdown_child("client closed its output (EOF)")

    async def _pump_child(self) -> None:
        assert self.process is not None
        try:
            await self._pump(self.process.stdout, self.to_client, self._from_child, self._from_child_raw, self._expect_child)
        finally:
            self._child_stdout_done.set()

    async def _pump(
        self,
        stream: trio.abc.ReceiveStream,
        out: Outbox,
        handle: Callable[[bytes], None],
        handle_raw: Callable[[Oversized | Fragment], None],
        expect: _Activity,
    ) -> None:
        """Read ``stream`` until EOF, handing each line to ``handle``.

        What one read yields is handled as a batch: the outbox is held, so the
        whole chunk's output goes out in one write, straight from here when
        the writer task is idle.
        """
        splitter = LineSplitter(self.options.max_line)
        receive = _receiver(stream, self.busy_poll, expect)
        while True:
            await out.wait_writable()
            try:
                data = await receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                for ev in splitter.close():
                    handle_raw(ev)
                # Ended inside a line too long to parse: end it, so what the
                # sidecar still sends (its -32001 answers) has lines of its own.
                out.end_raw(b"\n" if out is self.to_client else b"")
                return
            out.hold()
            try:
                for ev in splitter.feed(data):
                    if type(ev) is bytes:
                        handle(ev)
                    else:
                        handle_raw(ev)
            finally:
                out.flush()

    # ------------------------------------------------- client -> child frames

    def _from_client_raw(self, ev: Oversized | Fragment) -> None:
        if type(ev) is Oversized:
            first = not self._raw_c2s_open
            self._raw_c2s_open = not ev.end
            if first:
                ev = Oversized(self._client_raw_head(ev.data), ev.end)
        self._forward_raw(ev, self.c2s, self.to_child, "client>codex", "client")

    def _client_raw_head(self, data: bytes) -> bytes:
        """A request too long to parse still gets what every request gets: a
        pending entry (its -32001 if codex dies) and an alias for an id in
        the sidecar's namespace. Its hooks cannot run: it passes unchanged."""
        fields, _ = _scan_head(data)
        if b"id" not in fields or b"method" not in fields:
            return data  # not a request whose id and method come before its params: as is
        (id_start, id_end), (m_start, m_end) = fields[b"id"], fields[b"method"]
        try:
            client_id = _id_decoder.decode(data[id_start:id_end])
            name = _id_decoder.decode(data[m_start:m_end])
        except msgspec.DecodeError:
            return data
        if not isinstance(name, str) or client_id is None or isinstance(client_id, bool):
            return data
        if name.startswith(CONTROL_PREFIX) or self._child_gone:
            return data
        wire_id = self._ids.alias_client_id(client_id) if IdSpace.is_reserved(client_id) else client_id
        self._pending[wire_id] = PendingRequest(client_id, name, wire_id)
        if self.hooks.client_requests.get(name):
            log.warning("oversized request passed without the sidecar's hooks", extra={"fields": {"method": name, "maxLine": self.options.max_line}})
        if wire_id is not client_id:
            data = data[:id_start] + _id_encoder.encode(wire_id) + data[id_end:]
        return data

    def _forward_raw(self, ev: Oversized | Fragment, counters: Counters, out: Outbox, direction: str, source: str) -> None:
        """A piece of an unparsable line, or a stream's unterminated tail: as is."""
        if type(ev) is Oversized:
            if ev.end:
                counters.frames += 1
                counters.oversized += 1
                log.warning(
                    f"oversized line from {source} forwarded unparsed",
                    extra={"fields": {"maxLine": self.options.max_line}},
                )
                self._record_note(direction, "oversized line forwarded unparsed")
        else:
            counters.frames += 1
            counters.invalid += 1
            log.warning(f"{source} output ended inside a line; forwarding the fragment")
            if source == "codex":
                # The sidecar's own -32001 answers follow: end the torn line
                # so that they reach the client as lines of their own.
                counters.bytes += len(ev.data)
                out.put(ev.data + b"\n")
                return
        data = ev.data
        if self.edge is not None and type(ev) is Oversized:
            # Thread ids in the piece, as in a parsed line (one a piece
            # boundary cuts is not translated; nothing can be dropped).
            data = self.edge.fragment_to_codex(data) if source == "client" else self.edge.fragment_to_client(data)
        counters.bytes += len(data)
        if type(ev) is Oversized:
            out.put_raw(data, ev.end)
        else:
            out.put(data)

    def _from_client(self, line: bytes) -> None:
        try:
            env = parse(line)
        except InvalidMessage as exc:
            self.c2s.invalid += 1
            log.warning("invalid frame from client forwarded", extra={"fields": {"error": str(exc)}})
            self._forward_to_child(line)
            return
        if env.method is msgspec.UNSET or env.id is msgspec.UNSET:
            # Responses to server requests and client notifications pass through.
            if env.method is not msgspec.UNSET and env.method.startswith(CONTROL_PREFIX):
                return  # a control notification: nothing to answer, nothing to forward
            if env.method is msgspec.UNSET and self.busy_poll:
                self._expect_child.last = time.perf_counter()  # codex goes on after an answer
            self._forward_to_child(line)
            return
        method: str = env.method  # type: ignore[assignment]
        if method.startswith(CONTROL_PREFIX):
            self._record("client>sidecar", line)
            handler = self._async_controls.get(method)
            if handler is not None:
                self.spawn(self._run_async_control, handler, env.id, env.params)
                return
            reply = self._control(line) if self._control else encode_error(
                env.id, -32601, f"unknown sidecar method {method}"  # type: ignore[arg-type]
            )
            self.send_to_client(reply)
            return
        if self._gates and not self._child_gone:
            params = decode(env.params) if env.params else None
            thread_id = params.get("threadId") if isinstance(params, dict) else None
            if type(thread_id) is str and thread_id in self._gates:
                self._gates[thread_id][1].append(line)
                return
        client_id: RpcId = env.id  # type: ignore[assignment]
        wire_id = self._ids.alias_client_id(client_id) if IdSpace.is_reserved(client_id) else client_id
        if self._child_gone:
            self._record("client>codex", line)
            self.send_to_client(encode_error(client_id, *_dead_child_error(PendingRequest(client_id, method, wire_id), None)))
            return
        pending = PendingRequest(client_id, method, wire_id)
        self._pending[wire_id] = pending
        hooks = self.hooks.client_requests.get(method)
        if hooks:
            line = self._run_chain(hooks, Message(env, line))
            if line is None:
                return
        if wire_id is not client_id:
            line = rewrite(line, id=wire_id)
        if self.busy_poll:
            self._expect_child.last = time.perf_counter()
        pending.forwarded = True
        self._forward_to_child(line)

    def _forward_to_child(self, line: bytes) -> None:
        if self.edge is not None:
            line = self.edge.to_codex(line)
        c = self.c2s
        c.frames += 1
        c.bytes += len(line) + 1
        if self.recorder is not None:
            self._record("client>codex", line)
        self.to_child.put_line(line)

    # ------------------------------------------------- child -> client frames

    def _from_child_raw(self, ev: Oversized | Fragment) -> None:
        if type(ev) is Oversized:
            if self._raw_s2c is None:
                data, self._raw_s2c = self._child_raw_head(ev.data)
                ev = Oversized(data, ev.end)
            keep = self._raw_s2c == "forward"
            if ev.end:
                self._raw_s2c = None
            if not keep:
                return  # an answer to the sidecar's own request: not the client's
        self._forward_raw(ev, self.s2c, self.to_client, "codex>client", "codex")

    def _child_raw_head(self, data: bytes) -> tuple[bytes, str]:
        """A response too long to parse is still matched to its request: the
        request is no longer pending (no -32001 later), an aliased id goes
        back to the client's, and an answer to one of the sidecar's own
        requests fails that request instead of reaching the client.
        Response hooks cannot run on it: it passes unchanged."""
        fields, stop = _scan_head(data)
        if b"id" not in fields or b"method" in fields or stop not in (b"result", b"error"):
            return data, "forward"  # not recognisably an answer (a request from codex has a method): as is
        id_start, id_end = fields[b"id"]
        try:
            wire_id = _id_decoder.decode(data[id_start:id_end])
        except msgspec.DecodeError:
            return data, "forward"
        if type(wire_id) is str and wire_id.startswith(INTERNAL_PREFIX) and not self._ids.is_alias(wire_id):
            call = self._internal.get(wire_id)
            if call is not None:
                call.error = RpcError(-32603, f"response longer than the sidecar's max line ({self.options.max_line} bytes)")
                call.done.set()
            log.warning("oversized response to a sidecar request dropped", extra={"fields": {"maxLine": self.options.max_line}})
            return data, "drop"
        pending = self._pending.pop(wire_id, None)
        if pending is None:
            return data, "forward"
        if self.hooks.responses.get(pending.method):
            log.warning("oversized response passed without the sidecar's hooks", extra={"fields": {"method": pending.method, "maxLine": self.options.max_line}})
        if pending.wire_id is not pending.client_id:
            self._ids.resolve_alias(pending.wire_id)  # type: ignore[arg-type]
            data = data[:id_start] + _id_encoder.encode(pending.client_id) + data[id_end:]
        return data, "forward"

    def _from_child(self, line: bytes) -> None:
        try:
            env = parse(line)
        except InvalidMessage as exc:
            self.s2c.invalid += 1
            log.warning("invalid frame from codex forwarded", extra={"fields": {"error": str(exc)}})
            self._forward_to_client(line)
            return
        if env.method is msgspec.UNSET:
            self._from_child_response(env, line)
            return
        if self.edge is not None and self.edge.active:
            seen = self.edge.notification(line)
            if seen is None:
                self._record("codex>sidecar", line)
                return  # about a thread behind the client's (retired or spare)
            if seen is not line:
                line = seen
                env = parse(line)
        if env.id is msgspec.UNSET:
            hooks = self.hooks.server_notifications.get(env.method)  # type: ignore[arg-type]
        else:
            hooks = self.hooks.server_requests.get(env.method)  # type: ignore[arg-type]
            if self.busy_poll:
                self._expect_client.last = time.perf_counter()
        if hooks:
            line = self._run_chain(hooks, Message(env, line))
            if line is None:
                return
        self._forward_to_client(line)

    def _from_child_response(self, env: Envelope, line: bytes) -> None:
        wire_id = env.id
        if type(wire_id) is str and wire_id.startswith(INTERNAL_PREFIX):
            call = self._internal.get(wire_id)
            if call is not None:
                self._record("codex>sidecar", line)
                if self.edge is not None and not env.error:
                    translated = self.edge.response(line, call.method)
                    if translated is not line:
                        env = parse(translated)
                if env.error:
                    err = decode(env.error)
                    if not isinstance(err, dict):
                        err = {}
                    code = err.get("code", -32603)
                    call.error = RpcError(
                        code if type(code) is int else -32603, str(err.get("message", "")), err.get("data")
                    )
                else:
                    call.result = decode(env.result)
                    if call.on_result is not None:
                        try:
                            call.on_result(call.result)
                        except Exception:
                            log.exception("internal result callback failed")
                call.done.set()
                return
            late = self._late.pop(wire_id, None)
            if late is not None and not env.error and late.on_result is not None:
                if self.edge is not None:
                    env = parse(self.edge.response(line, late.method))
                try:
                    late.on_result(decode(env.result))
                except Exception:
                    log.exception("internal result callback failed")
            if not self._ids.is_alias(wire_id):
                # An answer to an internal call that timed out: nobody waits for it.
                self._record("codex>sidecar", line)
                log.info("late response to a sidecar request dropped")
                return
        pending = self._pending.pop(wire_id, None)  # type: ignore[arg-type]
        if self.edge is not None:
            translated = self.edge.response(line, pending.method if pending is not None else None)
            if translated is not line:
                line = translated
                env = parse(line)
        if pending is not None and pending.wire_id is not pending.client_id:
            self._ids.resolve_alias(pending.wire_id)  # type: ignore[arg-type]
            line = rewrite(line, id=pending.client_id)
            env = parse(line)
        if pending is not None:
            hooks = self.hooks.responses.get(pending.method)
            if hooks:
                line = self._run_chain(hooks, Message(env, line), pending)
                if line is None:
                    return
        if self.busy_poll:
            self._expect_client.last = time.perf_counter()  # clients often ask again at once
        self._forward_to_client(line)

    def _forward_to_client(self, line: bytes) -> None:
        s = self.s2c
        s.frames += 1
        s.bytes += len(line) + 1
        if self.recorder is not None:
            self._record("codex>client", line)
        self.to_client.put_line(line)

    # ---------------------------------------------------------------- hooks

    def _run_chain(self, hooks: list[Any], msg: Message, pending: PendingRequest | None = None) -> bytes | None:
        """Run hooks in order; the line to forward, or None when one took it.

        A hook's returned bytes replace the message for the hooks after it.
        """
        for hook in hooks:
            if pending is None:
                decision = self._run_hook(hook, msg)
            else:
                decision = self._run_response_hook(hook, msg, pending)
            if decision is HANDLED:
                return None
            if decision is not None:
                msg = Message(parse(decision), decision)  # type: ignore[arg-type]
        return msg.line

    def _run_hook(self, hook: Callable[[Message], Decision], msg: Message) -> Decision:
        try:
            return hook(msg)
        except Exception:
            # Fail open: a broken hook must not break the agent.
            log.exception("hook failed; forwarding the message unchanged", extra={"fields": {"hook": _name(hook)}})
            return None

    def _run_response_hook(self, hook: ResponseHook, msg: Message, pending: PendingRequest) -> Decision:
        try:
            return hook(msg, pending)
        except Exception:
            log.exception("response hook failed; forwarding unchanged", extra={"fields": {"hook": _name(hook)}})
            return None

    def _install_builtin_hooks(self) -> None:
        self.hooks.on_response("initialize", self._observe_initialize)
        for method in ("thread/start", "thread/resume", "thread/fork"):
            self.hooks.on_response(method, self._observe_thread_result)
        self.hooks.on_server_notification("thread/started", self._observe_thread_started)

    def _observe_initialize(self, msg: Message, pending: PendingRequest) -> Decision:
        result = msg.result()
        if isinstance(result, dict) and isinstance(result.get("userAgent"), str):
            self.user_agent = result["userAgent"]
            self.codex_version = codex_version_from_user_agent(self.user_agent)
        return None

    def _observe_thread_result(self, msg: Message, pending: PendingRequest) -> Decision:
        result = msg.result()
        thread = result.get("thread") if isinstance(result, dict) else None
        if isinstance(thread, dict) and isinstance(thread.get("id"), str):
            self.threads_seen.add(thread["id"])
        return None

    def _observe_thread_started(self, msg: Message) -> Decision:
        params = msg.params()
        thread = params.get("thread") if isinstance(params, dict) else None
        if isinstance(thread, dict) and isinstance(thread.get("id"), str):
            self.threads_seen.add(thread["id"])
        return None

    # ------------------------------------------------------------ recording

    def _record(self, direction: str, line: bytes) -> None:
        if self.recorder is not None:
            self.recorder.record(direction, line)

    def _record_note(self, direction: str, note: str) -> None:
        if self.recorder is not None:
            self.recorder.note(direction, note)


class _Activity:
    """When a reader was last told to expect data (``time.perf_counter``)."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last = 0.0


def _receiver(
    stream: trio.abc.ReceiveStream, busy_poll: float = 0.0, activity: _Activity | None = None
) -> Callable[[], Awaitable[bytes]]:
    """``stream.receive_some`` without its checkpoint before every read.

    For an fd-backed stream: read at once, park on the fd only when it has
    nothing, and yield to other tasks every few reads that did not park.

    With ``busy_poll`` > 0, a reader that finds its pipe empty within that
    many seconds of ``activity.last`` (set by the proxy when it forwards
    something the other side will answer: a request, a server request, or a
    response the client may follow with its next request) keeps polling,
    yielding to every other task and to processes waiting for the CPU
    between polls, instead of parking. On a virtual machine waking a parked
    process costs tens of microseconds a hop and the sidecar adds two hops to
    every round trip; a quick answer is then picked up without a wake-up.
    Notifications (a turn's stream of events) never start a window, so
    polling does not take CPU from codex while it works, and an idle sidecar
    sleeps; the price is at most one window of CPU per request.
    """
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return lambda: stream.receive_some(READ_SIZE)
    fd = fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        # Regular files and ttys: epoll cannot wait on a file, and a short
        # read does not mean "drained"; the stream's own method is right.
        return lambda: stream.receive_some(READ_SIZE)
    unparked = 0
    drained = False
    act = activity if activity is not None else _Activity()
    clock = time.perf_counter

    async def receive() -> bytes:
        nonlocal unparked, drained
        while True:
            if drained:
                # A short read from a pipe took all there was: don't ask again
                # just to hear EAGAIN, wait for more (or poll, in the window).
                drained = False
                if not (busy_poll and clock() - act.last < busy_poll):
                    unparked = 0
                    await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                if busy_poll and clock() - act.last < busy_poll:
                    # Let a process waiting for this CPU (the peer that will
                    # write to us, when CPUs are scarce) run first.
                    os.sched_yield()
                    await trio.lowlevel.checkpoint()
                    continue
                unparked = 0
                await trio.lowlevel.wait_readable(fd)
                continue
            drained = 0 < len(data) < READ_SIZE
            unparked += 1
            if unparked >= 8:
                unparked = 0
                await trio.lowlevel.checkpoint()
            return data

    return receive


PIPE_SIZE = 1 << 20
_F_SETPIPE_SZ = 1031


def _grow_pipe(stream: object) -> None:
    """Ask for a PIPE_SIZE buffer (Linux; capped by /proc/sys/fs/pipe-max-size)."""
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return
    try:
        import fcntl

        fcntl.fcntl(fileno(), _F_SETPIPE_SZ, PIPE_SIZE)
    except (OSError, ValueError, ImportError):
        pass  # not a pipe, or not Linux


def _dead_child_error(pending: PendingRequest, rc: int | None) -> tuple[int, str, dict[str, Any]]:
    """Code, message and data for a request codex will never answer.

    -32001 tells Codex's and OpenClaw's clients "rejected before it was
    enqueued, safe to retry": true only of a request the sidecar never handed
    to codex. One codex had may have run, so it gets -32603 with
    ``outcome: "unknown"``, which no client retries on its own.
    """
    if pending.forwarded:
        text = _exit_text(rc) + "; the request was delivered and may have taken effect"
        return OUTCOME_UNKNOWN, text, {"method": pending.method, "outcome": "unknown", "reason": "appServerExited"}
    text = _exit_text(rc) + "; the request was not delivered"
    return CHILD_EXITED, text, {"method": pending.method, "outcome": "notDelivered", "reason": "appServerExited"}


def _exit_text(rc: int | None) -> str:
    if rc is None:
        return "codex app-server exited before answering"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"codex app-server was killed by {name} before answering"
    return f"codex app-server exited with status {rc} before answering"


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
