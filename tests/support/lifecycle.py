"""A sidecar with the engine lifecycle installed, in front of the fake app-server.

:func:`sidecar` runs a real ``Proxy`` with ``Lifecycle`` installed the way
``sidecar.cli`` does it, in front of ``children/fake_codex.py``, and yields a
:class:`Run`: the client side, the lifecycle, the engine and the fake's logs
of every line it received and sent. The helpers below read engine calls,
messages and log records.
"""

from __future__ import annotations

import errno
import json
import logging
import os
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from engines import EngineInfo, TextBlock
from engines.testkit import RecordingEngine
from sidecar import methods
from sidecar.history.backing import BackingThreads
from sidecar.lifecycle import Lifecycle, LifecycleOptions
from sidecar.rows import thread_id_keys
from sidecar.store.mirror import TranscriptMirror, session_path

from .harness import Client, child, frame, proxied, wait_until

__all__ = [
    "Run",
    "breakable_mirror_disk",
    "calls_for",
    "fields",
    "frame",
    "input_texts",
    "make_engine",
    "records_with",
    "roles_texts",
    "sidecar",
    "text_of",
    "wait_until",
]


@dataclass
class Run:
    """One sidecar process's worth: client side, lifecycle, engine, child logs."""

    client: Client
    lifecycle: Lifecycle | None
    engine: RecordingEngine | None
    state_dir: Path
    received_log: Path
    sent_log: Path
    _next_id: int = 100
    sent: list[bytes] = field(default_factory=list)

    # -- client side ------------------------------------------------------

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    async def send(self, line: bytes) -> None:
        self.sent.append(line)
        await self.client.send(line + b"\n")

    def frames(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.client.lines]

    async def wait_frame(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 10) -> dict[str, Any]:
        c = self.client
        seen = 0
        with trio.fail_after(timeout):
            while True:
                lines = c.lines
                for line in lines[seen:]:
                    obj = json.loads(line)
                    if pred(obj):
                        return obj
                seen = len(lines)
                if c.eof.is_set():
                    raise AssertionError("client stream ended")
                c._changed = trio.Event()
                await c._changed.wait()

    async def wait_response(self, rid: Any, timeout: float = 10) -> dict[str, Any]:
        return await self.wait_frame(lambda f: f.get("id") == rid and "method" not in f, timeout)

    async def request(self, method: str, params: Any = None) -> dict[str, Any]:
        rid = self.new_id()
        msg: dict[str, Any] = {"id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        await self.send(frame(msg))
        return await self.wait_response(rid)

    async def start_thread(self, **params: Any) -> str:
        params.setdefault("cwd", "/tmp/fake-work")
        resp = await self.request("thread/start", params)
        return resp["result"]["thread"]["id"]

    async def resume_thread(self, thread_id: str, **params: Any) -> dict[str, Any]:
        resp = await self.request("thread/resume", {"threadId": thread_id, **params})
        assert "result" in resp, resp
        await self.settle_thread(thread_id)
        return resp

    async def settle_thread(self, thread_id: str) -> None:
        """Wait until the lifecycle opened (and maybe imported) the thread's mirror."""
        if self.lifecycle is not None:
            await wait_until(
                lambda: thread_id in self.lifecycle.sessions and self.lifecycle.sessions[thread_id].ready.is_set(),
                what="session ready",
            )

    def turn_start_line(self, thread_id: str, text: str, rid: int | None = None, **params: Any) -> tuple[int, bytes]:
        rid = rid if rid is not None else self.new_id()
        body = {"threadId": thread_id, "input": [{"type": "text", "text": text, "text_elements": []}], **params}
        return rid, frame({"id": rid, "method": "turn/start", "params": body})

    async def turn(self, thread_id: str, text: str, *, settle: bool = True, **params: Any) -> dict[str, Any]:
        """Run one turn; returns {"id", "response", "completed"} once finalised."""
        rid, line = self.turn_start_line(thread_id, text, **params)
        await self.send(line)
        return await self.finish_turn(thread_id, rid, settle=settle)

    async def finish_turn(self, thread_id: str, rid: int, *, settle: bool = True) -> dict[str, Any]:
        resp = await self.wait_response(rid)
        assert "result" in resp, resp
        turn_id = resp["result"]["turn"]["id"]
        completed = await self.wait_frame(
            lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == turn_id
        )
        if settle and self.lifecycle is not None:
            await self.finalized(thread_id, turn_id)
        return {"id": turn_id, "response": resp, "completed": completed}

    async def finalized(self, thread_id: str, turn_id: str) -> None:
        """Wait until the lifecycle finished the turn (mirror, after_turn, maintenance)."""
        assert self.lifecycle is not None

        def done() -> bool:
            s = self.lifecycle.sessions.get(thread_id)
            return s is not None and (s.stats.get("lastFinalize") or {}).get("turnId") == turn_id and s.settled

        await wait_until(done, what=f"finalisation of {turn_id}")

    # -- child side -------------------------------------------------------

    def received_lines(self) -> list[bytes]:
        if not self.received_log.exists():
            return []
        return [line[:-1] for line in self.received_log.read_bytes().splitlines(keepends=True)]

    def received(self, method: str | None = None) -> list[dict[str, Any]]:
        out = [json.loads(line) for line in self.received_lines()]
        return [m for m in out if method is None or m.get("method") == method]

    def child_turn_starts(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        return [m for m in self.received("turn/start") if thread_id is None or m["params"]["threadId"] == thread_id]

    # -- lifecycle side ---------------------------------------------------

    def mirror_entries(self, thread_id: str) -> list[dict[str, Any]]:
        path = session_path(self.state_dir, thread_id)
        return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]

    def mirror_messages(self, thread_id: str) -> list[dict[str, Any]]:
        return [e["message"] for e in self.mirror_entries(thread_id) if e.get("type") == "message"]

    def session(self, thread_id: str):
        assert self.lifecycle is not None
        return self.lifecycle.sessions[thread_id]


@asynccontextmanager
async def sidecar(
    tmp_path: Path,
    engine: RecordingEngine | None,
    *,
    options: LifecycleOptions | None = None,
    script: dict[str, Any] | None = None,
    state: str = "state",
    name: str = "run",
    store: str = "codex-store.json",
    mode: str = "per_turn",
):
    """A proxy in front of fake_codex with the lifecycle installed as cli.py does.

    Without ``options`` the lifecycle runs with a 5 s engine deadline in
    projection mode ``mode``."""
    state_dir = tmp_path / state
    received_log = tmp_path / f"{name}-received.jsonl"
    sent_log = tmp_path / f"{name}-sent.jsonl"
    env = {
        "FAKE_CODEX_LOG": str(received_log),
        "FAKE_CODEX_SENT": str(sent_log),
        "FAKE_CODEX_STORE": str(tmp_path / store),
    }
    if script is not None:
        script_path = tmp_path / f"{name}-script.json"
        script_path.write_text(json.dumps(script))
        env["FAKE_CODEX_SCRIPT"] = str(script_path)
    async with proxied(child("fake_codex.py"), env=env, edge=BackingThreads(state_dir, thread_id_keys(methods.METHODS))) as client:
        lifecycle = None
        if engine is not None:
            # As sidecar.cli wires it, before any frame flows.
            lifecycle = Lifecycle(client.proxy, engine, state_dir, options or LifecycleOptions(engine_deadline=5.0, projection_mode=mode))
            lifecycle.install(client.proxy.router.hooks, methods.METHODS)
        run = Run(client, lifecycle, engine, state_dir, received_log, sent_log)
        resp = await run.request(
            "initialize",
            {"clientInfo": {"name": "lifecycle_tests", "title": "lifecycle tests", "version": "0"}, "capabilities": {"experimentalApi": True}},
        )
        assert "result" in resp
        await run.send(frame({"method": "initialized"}))
        yield run


def make_engine(**kwargs: Any) -> RecordingEngine:
    owns = kwargs.pop("owns_compaction", False)
    return RecordingEngine(info=EngineInfo(id="rec", name="Recording", version="1", owns_compaction=owns), **kwargs)


def text_of(message: Any) -> str:
    """The text of an AgentMessage (Struct) or of a mirrored OpenClaw message dict."""
    if isinstance(message, dict):
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(b.text for b in content if isinstance(b, TextBlock))


def roles_texts(messages: list[Any]) -> list[tuple[str, str]]:
    return [(m["role"] if isinstance(m, dict) else m.role, text_of(m)) for m in messages]


def calls_for(engine: RecordingEngine, method: str, thread_id: str) -> list[Any]:
    return [c.params for c in engine.calls_to(method) if c.params.session_id == thread_id]


def input_texts(turn_start: dict[str, Any]) -> list[str]:
    return [i["text"] for i in turn_start["params"]["input"] if i.get("type") == "text"]


def records_with(caplog, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def fields(record: logging.LogRecord) -> dict[str, Any]:
    return getattr(record, "fields", None) or {}



def breakable_mirror_disk(monkeypatch) -> dict[str, bool]:
    """Mirrors opened from now on write through a switch: ``["on"] = True``
    makes every write fail with ENOSPC (a full disk)."""
    broken = {"on": False}

    def writer(fd, data):
        if broken["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    real_open = TranscriptMirror.open.__func__
    monkeypatch.setattr(
        TranscriptMirror, "open", classmethod(lambda cls, *a, **kw: real_open(cls, *a, **{**kw, "writer": writer}))
    )
    return broken
