"""A small trio client for any `codex app-server`-compatible command on stdio.

Tests and fixture recording drive the real codex and the sidecar proxy with
the same client, so it speaks exactly the wire format Codex uses
(newline-delimited JSON, no "jsonrpc" field) and keeps the raw bytes it sent
and received: a direct session and a proxied one can then be compared byte
for byte.  It prints nothing: stdout is a protocol channel elsewhere.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import msgspec
import trio

log = logging.getLogger(__name__)

#: Lines are capped so a runaway peer cannot eat all memory; Codex sends
#: whole thread histories (with base64 images) in one line.
DEFAULT_MAX_LINE = 256 * 1024 * 1024
_READ_CHUNK = 1 << 20
_STDERR_KEEP = 1 << 20

Handler = Callable[[Any], Awaitable[Any]]

_encoder = msgspec.json.Encoder()


class RpcError(Exception):
    """An error response, kept whole so tests can assert on code and data."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def to_wire(self) -> dict:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


class ServerGone(ConnectionError):
    """The server closed its stdout while we still expected something."""


class AppServerClient:
    """One stdio session with an app-server child process.

    Create it with `AppServerClient.spawn(...)`; the constructor only wires
    streams so the same logic could run over other byte streams.
    """

    def __init__(
        self,
        send_stream: trio.abc.SendStream,
        receive_stream: trio.abc.ReceiveStream,
        nursery: trio.Nursery,
        *,
        process: trio.Process | None = None,
        max_line: int = DEFAULT_MAX_LINE,
        request_timeout: float = 60.0,
    ) -> None:
        self._send_stream = send_stream
        self._receive_stream = receive_stream
        self._nursery = nursery
        self.process = process
        self.max_line = max_line
        self.request_timeout = request_timeout
        self._ids = itertools.count(1)
        self._send_lock = trio.Lock()
        self._pending: dict[Any, list] = {}  # id -> [Event, message|None]
        self._handlers: dict[str, Handler] = {}
        self._changed = trio.Event()
        self._eof = False
        self._stdin_closed = False
        self.received: list[bytes] = []
        self.sent: list[bytes] = []
        self.notifications: list[dict] = []
        self.server_requests: list[dict] = []
        self.stderr_bytes = bytearray()
        self.reader_error: BaseException | None = None
        self._reader_done = trio.Event()
        self._stderr_done = trio.Event()

    # ------------------------------------------------------------------
    # lifecycle

    @classmethod
    @contextlib.asynccontextmanager
    async def spawn(
        cls,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stderr: Any = subprocess.PIPE,
        *,
        max_line: int = DEFAULT_MAX_LINE,
        request_timeout: float = 60.0,
        close_timeout: float = 10.0,
    ) -> AsyncIterator["AppServerClient"]:
        """Start `argv`, yield a client, and always reap the child.

        `stderr=subprocess.PIPE` (default) keeps the child's stderr in
        `client.stderr_bytes` (last 1 MiB) so a failing test can show it
        without it flooding the terminal; pass None to inherit instead.
        Exceptions from the body come out unwrapped, not in an
        ExceptionGroup, because the background tasks never raise.
        """
        proc = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
            cwd=cwd,
        )
        try:
            async with trio.open_nursery() as nursery:
                client = cls(
                    proc.stdin,
                    proc.stdout,
                    nursery,
                    process=proc,
                    max_line=max_line,
                    request_timeout=request_timeout,
                )
                nursery.start_soon(client._read_loop)
                if proc.stderr is not None:
                    nursery.start_soon(client._stderr_loop, proc.stderr)
                try:
                    yield client
                finally:
                    with trio.CancelScope(shield=True):
                        await client.close(timeout=close_timeout)
                        # The child is gone: let the readers drain what it
                        # wrote last, so `received` and stderr are complete.
                        with trio.move_on_after(2):
                            await client._reader_done.wait()
                            if proc.stderr is not None:
                                await client._stderr_done.wait()
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        finally:
            if proc.returncode is None:
                with contextlib.suppress(OSError):
                    proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()

    async def close(self, timeout: float = 10.0) -> int | None:
        """Close stdin (the app-server's shutdown signal) and reap the child."""
        if not self._stdin_closed:
            self._stdin_closed = True
            # No send lock: a send blocked on a peer that stopped reading
            # must not stall shutdown; aclose() makes that send fail instead.
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await self._send_stream.aclose()
        proc = self.process
        if proc is None:
            return None
        with trio.move_on_after(timeout):
            await proc.wait()
        if proc.returncode is None:
            log.warning("app-server did not exit %.0fs after stdin closed; killing", timeout)
            proc.kill()
            await proc.wait()
        return proc.returncode

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.returncode

    @property
    def stderr_text(self) -> str:
        return self.stderr_bytes.decode("utf-8", "replace")

    # ------------------------------------------------------------------
    # sending

    async def _send(self, message: dict) -> None:
        line = _encoder.encode(message)
        async with self._send_lock:
            if self._stdin_closed:
                raise trio.ClosedResourceError("client already closed stdin")
            self.sent.append(line)
            await self._send_stream.send_all(line + b"\n")

    async def send_raw(self, line: bytes) -> None:
        """Send one pre-encoded line unchanged (for malformed-input tests)."""
        line = line.rstrip(b"\n")
        async with self._send_lock:
            self.sent.append(line)
            await self._send_stream.send_all(line + b"\n")

    async def request(
        self, method: str, params: Any = None, *, timeout: float | None = None
    ) -> Any:
        """Send a request and return its `result`; raise RpcError on error."""
        req_id = next(self._ids)
        slot: list = [trio.Event(), None]
        self._pending[req_id] = slot
        message: dict[str, Any] = {"id": req_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            if self._eof:
                raise ServerGone(f"server already exited; cannot send {method}")
            try:
                await self._send(message)
            except trio.BrokenResourceError as exc:
                raise ServerGone(f"server stopped reading before {method}") from exc
            with trio.fail_after(self.request_timeout if timeout is None else timeout):
                await slot[0].wait()
        except trio.TooSlowError:
            raise TimeoutError(f"no response to {method} (id {req_id})") from None
        finally:
            self._pending.pop(req_id, None)
        reply = slot[1]
        if reply is None:
            raise ServerGone(f"server exited before answering {method}")
        if "error" in reply:
            err = reply["error"] or {}
            raise RpcError(err.get("code", 0), err.get("message", ""), err.get("data"))
        return reply.get("result")

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"method": method}
        if params is not None:
            message["params"] = params
        await self._send(message)

    def on_server_request(self, method: str, handler: Handler) -> None:
        """Answer server requests `method` with `await handler(params)`.

        Raising RpcError from the handler sends that error; any other
        exception becomes -32603 so Codex is never left waiting.
        """
        self._handlers[method] = handler

    # ------------------------------------------------------------------
    # receiving

    async def _read_loop(self) -> None:
        try:
            async for line in _lines(self._receive_stream, self.max_line):
                self._dispatch(line)
        except Exception as exc:  # recorded, not raised: see spawn()
            self.reader_error = exc
            log.warning("app-server client reader stopped: %r", exc)
        finally:
            self._eof = True
            for slot in list(self._pending.values()):
                slot[0].set()
            self._wake()
            self._reader_done.set()

    async def _stderr_loop(self, stream: trio.abc.ReceiveStream) -> None:
        try:
            while chunk := await stream.receive_some(65536):
                self.stderr_bytes += chunk
                if len(self.stderr_bytes) > _STDERR_KEEP:
                    del self.stderr_bytes[: len(self.stderr_bytes) - _STDERR_KEEP]
        except Exception:
            pass
        finally:
            self._stderr_done.set()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _dispatch(self, line: bytes) -> None:
        self.received.append(line)
        try:
            msg = msgspec.json.decode(line)
        except msgspec.DecodeError:
            log.warning("non-JSON line from server: %r", line[:200])
            return
        if not isinstance(msg, dict):
            log.warning("non-object message from server: %r", line[:200])
            return
        if "method" in msg and "id" in msg:
            self.server_requests.append(msg)
            self._nursery.start_soon(self._answer, msg)
            self._wake()
        elif "method" in msg:
            self.notifications.append(msg)
            self._wake()
        elif "id" in msg:
            slot = self._pending.get(msg["id"])
            if slot is None:
                log.warning("response to unknown id %r", msg["id"])
                return
            slot[1] = msg
            slot[0].set()
        else:
            log.warning("unroutable message from server: %r", line[:200])

    async def _answer(self, msg: dict) -> None:
        method = msg["method"]
        handler = self._handlers.get(method)
        reply: dict[str, Any] = {"id": msg["id"]}
        if handler is None:
            log.warning("no handler for server request %s; replying with an error", method)
            reply["error"] = {"code": -32601, "message": f"client has no handler for {method}"}
        else:
            try:
                reply["result"] = await handler(msg.get("params"))
            except RpcError as exc:
                reply["error"] = exc.to_wire()
            except Exception as exc:
                log.exception("handler for %s failed", method)
                reply["error"] = {"code": -32603, "message": f"client handler failed: {exc!r}"}
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._send(reply)

    def mark(self) -> int:
        """A cursor for `wait_notification(since=...)`: skip what came before."""
        return len(self.notifications)

    async def wait_notification(
        self,
        method: str,
        predicate: Callable[[Any], bool] | None = None,
        timeout: float = 30.0,
        *,
        since: int = 0,
    ) -> dict:
        """Return the params of the first matching notification.

        Looks at notifications already received (from index `since`) before
        waiting, so a notification that raced ahead of its request's
        response is not missed.
        """
        index = since
        with trio.move_on_after(timeout) as scope:
            while True:
                while index < len(self.notifications):
                    note = self.notifications[index]
                    index += 1
                    if note.get("method") != method:
                        continue
                    params = note.get("params")
                    if predicate is None or predicate(params):
                        return params
                if self._eof:
                    raise ServerGone(f"server exited while waiting for {method}")
                await self._changed.wait()
        assert scope.cancelled_caught
        raise TimeoutError(f"no {method} notification within {timeout}s")

    async def wait_server_request(
        self, method: str, timeout: float = 30.0, *, since: int = 0
    ) -> dict:
        """Wait until a server request `method` arrived (it is answered anyway)."""
        index = since
        with trio.move_on_after(timeout):
            while True:
                while index < len(self.server_requests):
                    req = self.server_requests[index]
                    index += 1
                    if req.get("method") == method:
                        return req
                if self._eof:
                    raise ServerGone(f"server exited while waiting for {method}")
                await self._changed.wait()
        raise TimeoutError(f"no {method} server request within {timeout}s")

    # ------------------------------------------------------------------
    # conveniences for the common flow

    async def initialize(
        self,
        experimental: bool = True,
        *,
        name: str = "codex_sidecar_tests",
        title: str = "codex-sidecar tests",
        version: str = "0.1.0",
        capabilities: dict | None = None,
    ) -> dict:
        """Handshake the way OpenClaw does: initialize, then `initialized`."""
        caps = dict(capabilities or {})
        if experimental:
            caps.setdefault("experimentalApi", True)
        params: dict[str, Any] = {"clientInfo": {"name": name, "title": title, "version": version}}
        if caps:
            params["capabilities"] = caps
        result = await self.request("initialize", params)
        await self.notify("initialized")
        return result

    async def start_thread(self, **params: Any) -> str:
        result = await self.request("thread/start", params)
        return result["thread"]["id"]

    async def start_turn(self, thread_id: str, text: str, **extra: Any) -> str:
        """Start a turn without waiting for it; return the turn id."""
        params: dict[str, Any] = {
            "threadId": thread_id,
            "input": [{"type": "text", "text": text, "text_elements": []}],
        }
        params.update(extra)
        result = await self.request("turn/start", params)
        return result["turn"]["id"]

    async def wait_turn_completed(
        self, thread_id: str, turn_id: str, timeout: float = 60.0
    ) -> dict:
        return await self.wait_notification(
            "turn/completed",
            lambda p: p.get("threadId") == thread_id and (p.get("turn") or {}).get("id") == turn_id,
            timeout=timeout,
        )

    async def run_turn(
        self, thread_id: str, text: str, *, timeout: float = 60.0, **extra: Any
    ) -> dict:
        """turn/start, then the params of that turn's turn/completed."""
        turn_id = await self.start_turn(thread_id, text, **extra)
        return await self.wait_turn_completed(thread_id, turn_id, timeout)

    def notifications_for(self, method: str, **match: Any) -> list[dict]:
        """Params of received notifications `method` whose top-level fields match."""
        out = []
        for note in self.notifications:
            if note.get("method") != method:
                continue
            params = note.get("params") or {}
            if all(params.get(k) == v for k, v in match.items()):
                out.append(params)
        return out


async def _lines(stream: trio.abc.ReceiveStream, max_line: int) -> AsyncIterator[bytes]:
    """Split a byte stream into lines without quadratic rescans of big lines."""
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = await stream.receive_some(_READ_CHUNK)
        if not chunk:
            if size:
                yield b"".join(parts)
            return
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                rest = chunk[start:]
                if rest:
                    parts.append(rest)
                    size += len(rest)
                    if size > max_line:
                        raise ValueError(f"line longer than {max_line} bytes")
                break
            piece = chunk[start:nl]
            if size + len(piece) > max_line:
                raise ValueError(f"line longer than {max_line} bytes")
            if parts:
                parts.append(piece)
                line = b"".join(parts)
                parts, size = [], 0
            else:
                line = piece
            if line:  # blank lines carry no message; everything else is kept raw
                yield line
            start = nl + 1


__all__ = ["AppServerClient", "RpcError", "ServerGone", "DEFAULT_MAX_LINE"]
