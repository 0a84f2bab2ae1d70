"""Run the proxy in-process against a real child, with the client side in memory.

``child(name)`` is the argv of one of the app-server doubles in
``tests/support/children/``; ``proxied(argv)`` runs a ``Proxy`` in front of it
and yields a :class:`Client` that collects what the client side receives.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trio.testing

from protocol import LineSplitter
from sidecar.child import Child
from sidecar.relay import Hooks, Proxy, ProxyOptions

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root (the folder holding ``sidecar/`` and ``tests/``)."""
CHILDREN = Path(__file__).parent / "children"
"""Small app-server doubles run as the proxy's child (``fake_codex.py`` is a deterministic app-server)."""


def child(name: str, *args: str) -> list[str]:
    return [sys.executable, str(CHILDREN / name), *args]


def frame(obj: Any) -> bytes:
    """One JSON-RPC line as a client writes it (compact, UTF-8, no newline)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


async def wait_until(pred: Callable[[], Any], timeout: float = 10, what: str = "condition") -> Any:
    """Poll ``pred`` until it returns something truthy (and return that), or fail after ``timeout``."""
    with trio.move_on_after(timeout):
        while True:
            value = pred()
            if value:
                return value
            await trio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Client:
    send_stream: trio.testing.MemorySendStream
    proxy: Proxy
    lines: list[bytes] = field(default_factory=list)
    raw: bytearray = field(default_factory=bytearray)
    eof: trio.Event = field(default_factory=trio.Event)
    exit_status: int | None = None
    done: trio.Event = field(default_factory=trio.Event)
    _changed: trio.Event = field(default_factory=trio.Event)

    async def send(self, data: bytes) -> None:
        await self.send_stream.send_all(data)

    async def close(self) -> None:
        await self.send_stream.aclose()

    async def wait_lines(self, n: int, timeout: float = 10) -> list[bytes]:
        with trio.fail_after(timeout):
            while len(self.lines) < n:
                if self.eof.is_set():
                    raise AssertionError(f"stream ended after {len(self.lines)} lines, wanted {n}")
                self._changed = trio.Event()
                await self._changed.wait()
        return self.lines[:n]

    async def wait_exit(self, timeout: float = 15) -> int:
        with trio.fail_after(timeout):
            await self.done.wait()
        assert self.exit_status is not None
        return self.exit_status


@asynccontextmanager
async def proxied(argv, *, options: ProxyOptions | None = None, hooks: Hooks | None = None, env=None, recorder=None, edge=None):
    in_send, in_recv = trio.testing.memory_stream_one_way_pair()
    out_send, out_recv = trio.testing.memory_stream_one_way_pair()
    opts = options or ProxyOptions(eof_grace=2.0, kill_grace=2.0, forward_signals=False)
    full_env = dict(os.environ, **(env or {}))
    proxy = Proxy(partial(Child.spawn, argv, full_env), trio.StapledStream(out_send, in_recv), options=opts, hooks=hooks, edge=edge, recorder=recorder)
    client = Client(in_send, proxy)

    async def read_all():
        splitter = LineSplitter(1 << 30)
        while True:
            data = await out_recv.receive_some()
            if not data:
                break
            client.raw += data
            client.lines.extend(splitter.feed(bytes(data)))
            client._changed.set()
        client.eof.set()
        client._changed.set()

    async def run():
        client.exit_status = await proxy.run()
        client.done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_all)
        nursery.start_soon(run)
        yield client
        if not client.done.is_set():
            await client.close()
            await client.wait_exit()
