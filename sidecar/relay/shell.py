"""The relay's trio shell around the router.

One nursery owns every task: two pumps (client and child stdout), two
outbox writers, the child supervisor, the signal forwarder, and whatever
hooks and control methods spawn, each of those under supervision
(:mod:`sidecar.relay.tasks`). A pump reads a chunk, splits it into lines and
hands each to the :class:`~sidecar.relay.router.Router`, which puts what goes
out into the outboxes synchronously; the chunk's output is flushed in one
write. Nothing depends on a clean exit: the process can be SIGKILLed at any
instant, and anything worth keeping is written where it happens.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from protocol import Fragment, LineSplitter, Oversized, RpcId

from .. import __version__
from ..child import FORWARDED_SIGNALS, Child
from ..record import Recorder
from .control import AsyncControl, ControlMethods
from .edge import Edge
from .messages import Hooks, Message
from .outbox import Outbox
from .pipes import Activity, effective_busy_poll, grow_pipe, receiver
from .router import Counters, Router
from .tasks import supervised

log = logging.getLogger("codex_sidecar.proxy")


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
    0 = sleep at once. See :func:`sidecar.relay.pipes.receiver`."""


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
        child: Child | None = None,
    ) -> None:
        """``child``: already started (with ``argv``); else :meth:`run` starts it."""
        self.argv = list(argv)
        self.env = env
        self._started_child = child
        self.options = options or ProxyOptions()
        self._client_in = client_in
        self._client_out = client_out
        self.to_child = Outbox("codex", self.options.high_water)
        self.to_client = Outbox("client", self.options.high_water)
        self.controls = ControlMethods()
        self.router = Router(
            self.to_child,
            self.to_client,
            hooks=hooks,
            controls=self.controls,
            recorder=recorder,
            spawn=self.spawn,
            max_line=self.options.max_line,
        )
        self.controls.add("sidecar/status", self.status)
        self._status_providers: dict[str, Callable[[], Any]] = {}
        self.started_at = time.monotonic()
        self.busy_poll = effective_busy_poll(self.options.busy_poll)
        # When each reader should expect an answer: the child's after a
        # request went to it, the client's after a response or server
        # request went to it. Notifications set neither.
        self._expect_child = Activity()
        self._expect_client = Activity()
        if self.busy_poll:
            self.router.expect_child = self._expect_child.mark
            self.router.expect_client = self._expect_client.mark
        self.exit_status: int | None = None
        self.process: Child | None = None
        self._nursery: trio.Nursery | None = None
        self._child_stdout_done = trio.Event()
        self._shutdown_started = False

    # ------------------------------------------------ what hooks work with

    @property
    def hooks(self) -> Hooks:
        return self.router.hooks

    @property
    def edge(self) -> Edge | None:
        """The translator at the child's edge (``sidecar.backing.BackingThreads``
        when rebuilds switch threads), or None."""
        return self.router.edge

    @edge.setter
    def edge(self, edge: Edge | None) -> None:
        self.router.edge = edge

    def send_to_child(self, line: bytes, direction: str = "sidecar>codex", *, raw: bool = False) -> bool:
        """``raw``: no thread id translation (a request about a retired thread)."""
        return self.router.send_to_child(line, direction, raw=raw)

    def send_to_client(self, line: bytes, direction: str = "sidecar>client") -> bool:
        return self.router.send_to_client(line, direction)

    def forward_client_request(self, msg: Message) -> bool:
        """Forward a client request a hook held back (or rewrote later)."""
        return self.router.forward_client_request(msg)

    def answer_client_request(self, client_id: RpcId, line: bytes) -> bool:
        """Answer a held client request from the sidecar (no child involved)."""
        return self.router.answer_client_request(client_id, line)

    def gate(self, thread_id: str, holder: Any) -> None:
        """See :meth:`Router.gate`: later requests on the thread wait for ``holder``."""
        self.router.gate(thread_id, holder)

    def ungate(self, thread_id: str, holder: Any) -> None:
        self.router.ungate(thread_id, holder)

    def add_control(self, method: str, fn: Callable[..., Any]) -> None:
        """A ``sidecar/...`` method answered at once: ``fn(**params)``."""
        self.controls.add(method, fn)

    def add_async_control(self, method: str, fn: AsyncControl) -> None:
        """A ``sidecar/...`` method that needs to await (e.g. the child):
        ``fn(params)`` runs in a task; its return value is the result, an
        ``RpcError`` it raises the error."""
        self.controls.add_async(method, fn)

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
        ``raw``: thread ids go to Codex untranslated (see ``edge``);
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

    def pending_methods(self) -> set[str]:
        """Methods of the client requests Codex has not answered yet."""
        return self.router.pending.methods()

    @property
    def pending_count(self) -> int:
        return len(self.router.pending)

    @property
    def gated_count(self) -> int:
        """Client requests waiting behind a held request on their thread."""
        return self.router.gates.waiting

    @property
    def gated_threads(self) -> int:
        """Threads some hook has gated (with or without requests waiting)."""
        return len(self.router.gates)

    @property
    def c2s(self) -> Counters:
        return self.router.c2s

    @property
    def s2c(self) -> Counters:
        return self.router.s2c

    def status(self) -> dict[str, Any]:
        observed = self.router.observed
        return {
            "sidecarVersion": __version__,
            "pid": os.getpid(),
            "childPid": self.process.pid if self.process else None,
            "childRunning": self.process is not None and self.process.returncode is None,
            "codexVersion": observed.codex_version,
            "userAgent": observed.user_agent,
            "uptimeSeconds": round(time.monotonic() - self.started_at, 3),
            "clientToCodex": self.router.c2s.as_dict(),
            "codexToClient": self.router.s2c.as_dict(),
            "pendingRequests": len(self.router.pending),
            "gatedRequests": self.gated_count,
            "threadsSeen": sorted(observed.threads_seen),
            "busyPollMicroseconds": round(self.busy_poll * 1e6),
            **{name: fn() for name, fn in self._status_providers.items()},
        }

    # ------------------------------------------------------------ running

    async def run(self) -> int:
        """Spawn the child, relay until both sides are done; the child's status.

        Raises ``OSError`` when the child cannot be started.
        """
        self.process = self._started_child or Child.spawn(self.argv, self.env)
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
                nursery.start_soon(self._forward_signals)
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
        if self.to_client.broken and not self.router.child_gone:
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

    # -------------------------------------------------------------- pumps

    async def _pump_client(self) -> None:
        await self._pump(self._client_in, self.to_child, self.router.from_client, self.router.from_client_fragment, self._expect_client)
        if not self.router.child_gone:
            await self._shutdown_child("client closed its output (EOF)")

    async def _pump_child(self) -> None:
        assert self.process is not None
        try:
            await self._pump(self.process.stdout, self.to_client, self.router.from_child, self.router.from_child_fragment, self._expect_child)
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
