"""The relay's trio shell around the router.

One nursery owns every task: two pumps (client and child stdout), two
outbox writers, the child supervisor, the signal forwarder, and whatever
hooks and control methods spawn, each of those under supervision
(:func:`supervised`, below). A pump reads a chunk, splits it into lines and
hands each to the :class:`~sidecar.relay.router.Router`, which puts what goes
out into the outboxes synchronously; the chunk's output is flushed in one
write. Nothing depends on a clean exit: the process can be SIGKILLed at any
instant, and anything worth keeping is written where it happens.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

import sidecar
from protocol import Fragment, LineSplitter, Oversized

from ..child import Child
from .edge import Edge
from .failures import failure_fields, task_name
from .hold import ClientHold, is_initialize
from .messages import Hooks
from .options import ProxyOptions
from .pipes import READ_SIZE, effective_busy_poll, grow_pipe
from .router import Activity, Router
from .stopping import forward_signals, stop_child

if TYPE_CHECKING:
    from ..record import Recorder  # only a session that records imports it

log = logging.getLogger("codex_sidecar.proxy")

class Proxy:
    """Relays between a client byte stream pair and a child process's stdio."""

    def __init__(
        self,
        child: Child | Callable[[], Child],
        client: trio.StapledStream[trio.abc.SendStream, trio.abc.ReceiveStream],
        *,
        options: ProxyOptions | None = None,
        hooks: Hooks | None = None,
        edge: Edge | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        """``child``: already started, or how :meth:`run` starts it (e.g.
        ``functools.partial(Child.spawn, argv, env)``). ``client``: the
        client's byte streams, what it sends (``receive_stream``) and where
        its answers go (``send_stream``). ``hooks``, ``edge`` and
        ``recorder`` go to the :class:`Router`, built here whole: the hooks
        the lifecycle installs later are rows added to ``hooks``, never a
        collaborator attached to the router."""
        self._child = child
        self.options = options or ProxyOptions()
        self._client_in = client.receive_stream
        self._client_out = client.send_stream
        self.to_child = Outbox("codex", self.options.high_water)
        self.to_client = Outbox("client", self.options.high_water)
        self.router = Router(
            self.to_child,
            self.to_client,
            hooks=hooks,
            spawn=self.spawn,
            options=self.options,
            edge=edge,
            recorder=recorder,
        )
        """Every routing decision, and what hooks and jobs call to send,
        forward, answer or gate: they talk to it directly."""
        self.router.controls.add("sidecar/status", self.status)
        self._status_providers: dict[str, Callable[[], Any]] = {}
        self.started_at = time.monotonic()
        self.busy_poll = effective_busy_poll(self.options.busy_poll)
        self.exit_status: int | None = None
        self.process: Child | None = None
        self._nursery: trio.Nursery | None = None
        self._child_stdout_done = trio.Event()
        self._shutdown_started = False
        self.held = ClientHold()
        """The client's lines held at start-up (:meth:`hold_client`)."""

    # ------------------------------------------------ what hooks work with

    def add_status_provider(self, name: str, fn: Callable[[], Any]) -> None:
        """Adds ``name: fn()`` to ``sidecar/status``."""
        self._status_providers[name] = fn

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in the relay's nursery, supervised: if it raises,
        that is logged and it ends; nothing else does."""
        assert self._nursery is not None, "proxy is not running"
        self._nursery.start_soon(supervised, fn, *args, name=fn)

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
        ``raw``: thread ids go to Codex unmapped (see ``edge``);
        ``on_result``: called with the result as soon as it is read."""
        done = trio.Event()
        call = self.router.call(method, params, raw=raw, on_result=on_result, notify=done.set)
        timed_out = False
        try:
            if timeout is None:
                await done.wait()
            else:
                with trio.fail_after(timeout):
                    await done.wait()
        except trio.TooSlowError:
            timed_out = True
            raise
        finally:
            self.router.end_call(call, timed_out)
        if call.error is not None:
            raise call.error
        return call.result

    @property
    def running(self) -> bool:
        """Relaying, with the child alive: the sidecar's own requests can be answered."""
        return self._nursery is not None and not self.router.child_gone

    def status(self) -> dict[str, Any]:
        observed = self.router.observed
        return {
            "sidecarVersion": sidecar.__version__,
            "pid": os.getpid(),
            "childPid": self.process.pid if self.process else None,
            "childRunning": self.process is not None and self.process.returncode is None,
            "codexVersion": observed.codex_version,
            "userAgent": observed.user_agent,
            "uptimeSeconds": round(time.monotonic() - self.started_at, 3),
            "clientToCodex": self.router.c2s.as_dict(),
            "codexToClient": self.router.s2c.as_dict(),
            "pendingRequests": len(self.router.pending),
            "gatedRequests": self.router.gates.waiting,
            "threadsSeen": sorted(observed.threads_seen),
            "busyPollMicroseconds": round(self.busy_poll * 1e6),
            "negotiated": self.router.negotiation.status(),
            **{name: fn() for name, fn in self._status_providers.items()},
        }

    # ------------------------------------------------------------ running

    async def run(self) -> int:
        """Spawn the child, relay until both sides are done; the child's status.

        Raises ``OSError`` when the child cannot be started.
        """
        self.process = self._child if isinstance(self._child, Child) else self._child()
        log.info("child started", extra={"fields": {"childPid": self.process.pid}})
        for stream in (self.process.stdin, self.process.stdout, self._client_in, self._client_out):
            grow_pipe(stream)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self.to_child.run_writer, self.process.stdin)
            nursery.start_soon(self.to_client.run_writer, self._client_out)
            nursery.start_soon(self._pump_client)
            nursery.start_soon(self._pump_child)
            nursery.start_soon(self._watch_client_out)
            if self.options.forward_signals:
                nursery.start_soon(forward_signals, self.process)
            nursery.start_soon(self._supervise_child)
        assert self.exit_status is not None
        return self.exit_status

    async def _supervise_child(self) -> None:
        assert self.process is not None and self._nursery is not None
        rc = await self.process.wait()
        # Deliver what the child wrote before it died, then answer for it.
        with trio.move_on_after(2.0):
            await self._child_stdout_done.wait()
        self.to_child.close()
        failed = self.router.child_exited(rc)
        if self.held.parked is not None:
            self.release_client()  # codex never had them: answered -32001 (not delivered)
        self.exit_status = 128 - rc if rc < 0 else rc
        log.info("child exited", extra={"fields": {"status": rc, "exitStatus": self.exit_status, "failedRequests": failed}})
        self.to_client.close()
        with trio.move_on_after(5.0):
            await self.to_client.finished.wait()
        self._nursery.cancel_scope.cancel()

    async def _shutdown_child(self, why: str) -> None:
        """The client is gone: close the child's stdin, then insist."""
        if self._shutdown_started:
            return
        self._shutdown_started = True
        assert self.process is not None
        log.info("client gone; stopping child", extra={"fields": {"reason": why}})
        await stop_child(self.process, self.to_child.close, self.options.eof_grace, self.options.kill_grace)

    async def _watch_client_out(self) -> None:
        await self.to_client.finished.wait()
        if self.to_client.broken and not self.router.child_gone:
            await self._shutdown_child("client output closed")

    # ------------------------------------------------- held at start-up

    def hold_client(self, on_held: Callable[[], None] | None = None) -> None:
        """Hold the client's lines, all but a first ``initialize``, until
        :meth:`release_client`: the relay passes codex's start-up handshake
        while the sidecar still imports its lifecycle and loads the engine,
        and nothing the lifecycle hooks reaches codex before its hooks are in.
        ``on_held`` is called once, when the first line is held or the client
        ends its output while held: someone now waits for the release."""
        self.held.start(on_held)

    def release_client(self) -> None:
        """Relay what was held, in order, and everything after it as it comes."""
        parked = self.held.release()
        if not parked:
            return
        self.to_child.hold()
        try:
            for whole, ev in parked:
                if whole:
                    self.router.from_client(ev)
                else:
                    self.router.from_client_fragment(ev)
        finally:
            self.to_child.flush()

    def _client_line(self, line: bytes) -> None:
        parked = self.held.parked
        if parked is not None and (parked or not is_initialize(line)):
            self.held.park(True, line, len(line))
            return
        self.router.from_client(line)

    def _client_piece(self, ev: Oversized | Fragment) -> None:
        if self.held.parked is not None:
            self.held.park(False, ev, len(ev.data))
            return
        self.router.from_client_fragment(ev)

    # -------------------------------------------------------------- pumps

    async def _pump_client(self) -> None:
        await self._pump(self._client_in, self.to_child, self._client_line, self._client_piece, self.router.client_expected)
        if self.held.parked is not None:
            self.held.note_held()
        await self.held.released.wait()  # what was held still goes to codex before its stdin closes
        if not self.router.child_gone:
            await self._shutdown_child("client closed its output (EOF)")

    async def _pump_child(self) -> None:
        assert self.process is not None
        try:
            await self._pump(self.process.stdout, self.to_client, self.router.from_child, self.router.from_child_fragment, self.router.child_expected)
        finally:
            self._child_stdout_done.set()

    async def _pump(
        self,
        stream: trio.abc.ReceiveStream,
        out: Outbox,
        handle: Callable[[bytes], None],
        handle_raw: Callable[[Oversized | Fragment], None],
        expect: Activity,
    ) -> None:
        """Read ``stream`` until EOF, handing each line to ``handle``.

        What one read yields is handled as a batch: the outbox is held, so the
        whole chunk's output goes out in one write, straight from here when
        the writer task is idle.
        """
        splitter = LineSplitter(self.options.max_line)
        receive = receiver(stream, self.busy_poll, expect)
        while True:
            await out.wait_writable()
            if out is self.to_child and self.held.parked is not None and self.held.full:
                # Held at start-up past HELD_BYTES: read no more of the client
                # (its writes block on the pipe) until the lifecycle is in.
                await self.held.released.wait()
            try:
                data = await receive()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                for ev in splitter.close():  # a torn last line: a Fragment
                    if isinstance(ev, bytes):
                        handle(ev)
                    else:
                        handle_raw(ev)
                # Ended inside a line too long to parse: end it, so what the
                # sidecar still sends (its -32001 answers) has lines of its own.
                out.end_raw(b"\n" if out is self.to_client else b"")
                return
            out.hold()
            try:
                for ev in splitter.feed(data):
                    if isinstance(ev, bytes):
                        handle(ev)
                    else:
                        handle_raw(ev)
            finally:
                out.flush()


# -- supervision -----------------------------------------------------------------
# Supervised background work.
#
# Everything hooks and the lifecycle hand to ``Proxy.spawn`` (finalising a
# turn, mirror and archive writes, starting spares, answering a control
# method...) runs under :func:`supervised`: a task that raises is logged once
# and ends there, failing open; the relay, the child and every other task
# carry on. Cancellation is not a failure and passes through.
#
# The log names the task, the exception's type and where it was raised, never
# the exception's text, which may quote a prompt (:mod:`.failures`).

task_log = logging.getLogger("codex_sidecar.tasks")


async def supervised(fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
    try:
        await fn(*args)
    except Exception as exc:
        task_log.error("background task failed; carrying on", extra={"fields": failure_fields(task_name(fn, args), exc)})


# -- the outboxes ------------------------------------------------------------
# One writer per output stream, fed without awaiting.
#
# Readers and hooks put bytes here synchronously (so a rewrite decided while
# parsing a chunk keeps its place in the stream); a single writer task drains
# everything queued in one ``send_all``. That batching is what lets a Python
# relay move tens of thousands of frames a second. Memory is bounded by a high
# water mark that readers wait on before they read more: the slow side pushes
# back on the fast one instead of the sidecar buffering without limit.

_IOV_MAX = 1024


class Outbox:
    __slots__ = (
        "name",
        "high_water",
        "_parts",
        "_size",
        "_data_ready",
        "_below_high_water",
        "_closed",
        "_broken",
        "finished",
        "_fd",
        "_held",
        "_writing",
        "_raw_open",
        "_deferred",
    )

    def __init__(self, name: str, high_water: int = 8 * 1024 * 1024) -> None:
        self.name = name
        self.high_water = high_water
        self._parts: list[bytes] = []
        self._size = 0
        self._data_ready = trio.Event()
        self._below_high_water = trio.Event()
        self._below_high_water.set()
        self._closed = False
        self._broken = False
        self.finished = trio.Event()
        """Set when the writer has stopped (drained and closed, or broken)."""
        self._fd: int | None = None
        self._held = False
        self._writing = False
        self._raw_open = False
        """An oversized line is being streamed through in pieces."""
        self._deferred: list[bytes] = []
        """Frames put while a raw line is open: they follow its end."""

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def broken(self) -> bool:
        """The stream refused a write: the peer has gone."""
        return self._broken

    @property
    def queued(self) -> int:
        return self._size

    def put(self, data: bytes) -> bool:
        """Queue raw bytes; False when they can no longer be delivered."""
        if self._closed or self._broken:
            return False
        if self._raw_open:
            self._deferred.append(data)
            return True
        self._queue(data)
        return True

    def put_line(self, line: bytes) -> bool:
        """Queue one frame; the newline is added here, not copied into ``line``."""
        if self._closed or self._broken:
            return False
        if self._raw_open:
            self._deferred += (line, b"\n")
            return True
        self._parts += (line, b"\n")  # the hot path: inlined _queue
        self._size += len(line) + 1
        if not self._held:
            self._data_ready.set()
        if self._size > self.high_water and self._below_high_water.is_set():
            self._below_high_water = trio.Event()
        return True

    def put_raw(self, data: bytes, end: bool) -> bool:
        """Queue a piece of a line too long to parse (``end``: its last piece,
        newline included). Until that piece, other frames wait behind the
        line instead of landing inside it."""
        if self._closed or self._broken:
            return False
        self._queue(data)
        self._raw_open = not end
        if end:
            self._release()
        return True

    def end_raw(self, terminator: bytes = b"") -> None:
        """The stream ended inside a raw line: end it with ``terminator`` and
        let the frames that waited behind it go."""
        if self._raw_open:
            self._raw_open = False
            if terminator and not (self._closed or self._broken):
                self._queue(terminator)
            self._release()

    def _release(self) -> None:
        if self._deferred:
            deferred, self._deferred = self._deferred, []
            if not (self._closed or self._broken):
                self._queue(*deferred)

    def _queue(self, *parts: bytes) -> None:
        self._parts.extend(parts)
        self._size += sum(len(p) for p in parts)
        if not self._held:
            self._data_ready.set()
        if self._size > self.high_water and self._below_high_water.is_set():
            self._below_high_water = trio.Event()

    def hold(self) -> None:
        """Batch the puts that follow until ``flush`` (a reader's chunk)."""
        self._held = True

    def flush(self) -> None:
        """End a batch: write what is queued straight to the fd if the pipe
        takes it (no task switch); whatever is left goes to the writer task."""
        self._held = False
        if not self._parts:
            return
        if self._fd is not None and not self._writing and not self._closed:
            parts = self._parts
            size = self._size
            try:
                # writev: a 1 MB frame and its newline go out without a join copy.
                n = os.writev(self._fd, parts) if len(parts) <= _IOV_MAX else os.write(self._fd, b"".join(parts))
            except OSError:
                n = 0  # full (EAGAIN) or broken: the writer task deals with it
            if n == size:
                self._parts = []
                self._size = 0
                if not self._below_high_water.is_set():
                    self._below_high_water.set()
                return
            if n:
                data = b"".join(parts)
                self._parts = [data[n:]]
                self._size = size - n
        self._data_ready.set()

    async def wait_writable(self) -> None:
        """Wait while more than ``high_water`` bytes are queued."""
        while not self._below_high_water.is_set():
            await self._below_high_water.wait()

    def close(self) -> None:
        """No more puts; the writer drains what is queued, then closes the stream."""
        self._closed = True
        self._data_ready.set()

    async def run_writer(self, stream: trio.abc.SendStream) -> None:
        """Drain into ``stream`` until closed. A broken stream ends quietly."""
        fileno = getattr(stream, "fileno", None)
        if fileno is not None:
            try:
                self._fd = fileno()
            except Exception:
                self._fd = None
        try:
            while True:
                # Check the state, not an event: a close() that arrives while a
                # write is in flight must still end the loop once drained.
                if not self._parts:
                    if self._closed:
                        break
                    self._data_ready = trio.Event()
                    await self._data_ready.wait()
                    continue
                parts = self._parts
                self._parts = []
                self._size = 0
                self._below_high_water.set()
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                self._writing = True
                try:
                    await stream.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    self._broken = True
                    self._parts = []
                    self._size = 0
                    break
                finally:
                    self._writing = False
            self._fd = None
            log.debug("closing stream", extra={"fields": {"outbox": self.name}})
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        finally:
            self._below_high_water.set()
            self.finished.set()


# -- reading the pipes -----------------------------------------------------------
# A receive without per-read checkpoints and optional busy polling while an
# answer is expected: the relay's hot path on the wire side; no routing
# decisions here. The pipes' sizes and whether to poll at all: :mod:`.pipes`.


def receiver(
    stream: trio.abc.ReceiveStream, busy_poll: float = 0.0, activity: Activity | None = None
) -> Callable[[], Awaitable[bytes]]:
    """``stream.receive_some`` without its checkpoint before every read.

    For an fd-backed stream: read at once, park on the fd only when it has
    nothing, and yield to other tasks every few reads that did not park.

    With ``busy_poll`` > 0, a reader that finds its pipe empty within that
    many seconds of ``activity.last`` (marked when the router forwards
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

    async def receive_some() -> bytes:
        return bytes(await stream.receive_some(READ_SIZE))

    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return receive_some
    fd = fileno()
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        # Regular files and ttys: epoll cannot wait on a file, and a short
        # read does not mean "drained"; the stream's own method is right.
        return receive_some
    unparked = 0
    drained = False
    act = activity if activity is not None else Activity()
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
