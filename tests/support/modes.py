"""Projection modes over the fake app-server, and the scripted engines they use.

:func:`modes_sidecar` is ``tests.support.lifecycle.sidecar`` with the fake's
model view logged: per accepted ``turn/start`` the fake
(``children/fake_codex.py``) logs the turns its thread holds (each with the
``additionalContext`` and ``input`` it was started with) plus the new turn's
own, so "the model saw X" is read from the fake (:meth:`ModesRun.seen`), not
inferred from the sidecar's ledger.

Engines are ``RecordingEngine``s with a scripted ``assemble``: identity,
recall (one snippet appended), summarising (everything but the newest
``keep`` messages replaced by one summary), summarising_once (one rebuild,
then plain deltas), epochs (``thread_bootstrap`` with a changing epoch).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines import AssembleResult, CompactionSummaryMessage, ContextProjection, EngineInfo, UserMessage
from engines.testkit import RecordingEngine
from sidecar import methods
from sidecar.history.backing import BackingThreads
from sidecar.lifecycle import Lifecycle, LifecycleOptions
from sidecar.projection import CONTEXT_KEY
from sidecar.rows import thread_id_keys

from .harness import child, frame, proxied
from .lifecycle import Run

CHANNEL = f"turn/start.additionalContext[{CONTEXT_KEY}]"
"""How inspection records name the channel the projected context goes in."""
REVERT_NOISE = ("thread/reverted", "thread/readState/changed")
LONG_REPLY = "Reply {n}. " + "All right, noted; " * 25
"""A fake reply script of ~450 characters, so that a snippet is small beside a turn."""

# --------------------------------------------------------------------------
# A sidecar over the fake, with the model's view logged


@dataclass
class ModesRun(Run):
    model_log: Path = Path("/nonexistent")
    store_path: Path = Path("/nonexistent")

    def store_turns(self, thread_id: str) -> list[dict[str, Any]]:
        """The turns the fake Codex itself holds for the thread."""
        return json.loads(self.store_path.read_text())[thread_id]["turns"]

    def seen(self, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Per accepted turn/start: {threadId, turnId, held: [...], additionalContext, input}."""
        if not self.model_log.exists():
            return []
        out = [json.loads(line) for line in self.model_log.read_text().splitlines() if line.strip()]
        return [s for s in out if thread_id is None or s["threadId"] == thread_id]

    def child_lines(self, method: str) -> list[bytes]:
        return [line for line in self.received_lines() if json.loads(line).get("method") == method]

    def child_methods(self) -> list[str]:
        return [m.get("method") for m in self.received() if "method" in m]

    async def turn_ok(self, thread_id: str, text: str, **params: Any) -> str:
        done = await self.turn(thread_id, text, **params)
        assert done["completed"]["params"]["turn"]["status"] == "completed"
        return done["id"]

    async def status(self) -> dict[str, Any]:
        resp = await self.request("sidecar/status")
        return resp["result"]["lifecycle"]


@asynccontextmanager
async def modes_sidecar(
    tmp_path: Path,
    engine: RecordingEngine,
    mode: str = "delta",
    *,
    options: LifecycleOptions | None = None,
    script: dict[str, Any] | None = None,
    state: str = "state",
    name: str = "run",
    store: str = "codex-store.json",
):
    tmp_path.mkdir(parents=True, exist_ok=True)
    state_dir = tmp_path / state
    received_log = tmp_path / f"{name}-received.jsonl"
    sent_log = tmp_path / f"{name}-sent.jsonl"
    model_log = tmp_path / f"{name}-model.jsonl"
    env = {
        "FAKE_CODEX_LOG": str(received_log),
        "FAKE_CODEX_SENT": str(sent_log),
        "FAKE_CODEX_STORE": str(tmp_path / store),
        "FAKE_CODEX_MODEL": str(model_log),
    }
    if script is not None:
        script_path = tmp_path / f"{name}-script.json"
        script_path.write_text(json.dumps(script))
        env["FAKE_CODEX_SCRIPT"] = str(script_path)
    async with proxied(child("fake_codex.py"), env=env, edge=BackingThreads(state_dir, thread_id_keys(methods.METHODS))) as client:
        lifecycle = Lifecycle(client.proxy, engine, state_dir, options or LifecycleOptions(engine_deadline=5.0, projection_mode=mode, stale_floor_chars=0))
        lifecycle.install(client.proxy.router.hooks, methods.METHODS)
        run = ModesRun(client, lifecycle, engine, state_dir, received_log, sent_log, model_log=model_log, store_path=tmp_path / store)
        resp = await run.request(
            "initialize",
            {"clientInfo": {"name": "modes_tests", "title": "projection mode tests", "version": "0"}, "capabilities": {"experimentalApi": True}},
        )
        assert "result" in resp
        await run.send(frame({"method": "initialized"}))
        yield run


# --------------------------------------------------------------------------
# Engines


def scripted_engine(assemble: Callable[[Any], AssembleResult] | None = None) -> RecordingEngine:
    engine = RecordingEngine(info=EngineInfo(id="modes", name="Projection modes", version="1"))
    if assemble is not None:
        engine.set_result("assemble", assemble)
    return engine


def identity() -> RecordingEngine:
    return scripted_engine()  # RecordingEngine assembles the messages unchanged


def recall(snippet: Callable[[str], str]) -> RecordingEngine:
    """History unchanged plus one snippet (keyed by the prompt) appended."""
    return scripted_engine(lambda p: AssembleResult(messages=[*p.messages, UserMessage(content=snippet(p.prompt), timestamp=0)], estimated_tokens=1))


def summary_text(count: int) -> str:
    return f"SUMMARY of the {count} earliest messages"


def summarising(keep: int = 2, addition: str | None = None) -> RecordingEngine:
    """Everything but the newest ``keep`` messages replaced by one summary."""

    def assemble(p: Any) -> AssembleResult:
        messages = list(p.messages)
        if len(messages) > keep:
            old = len(messages) - keep
            summary = CompactionSummaryMessage(summary=summary_text(old), tokens_before=old * 10, timestamp=0)
            messages = [summary, *messages[old:]]
        return AssembleResult(messages=messages, estimated_tokens=1, system_prompt_addition=addition)

    return scripted_engine(assemble)


def epochs(per: int = 4) -> RecordingEngine:
    """History unchanged; a new projection epoch every ``per`` messages."""
    return scripted_engine(
        lambda p: AssembleResult(
            messages=list(p.messages),
            estimated_tokens=1,
            context_projection=ContextProjection(mode="thread_bootstrap", epoch=f"e{len(p.messages) // per}", fingerprint="fp"),
        )
    )


# --------------------------------------------------------------------------
# Reading what went where


def context_of(turn_start_or_seen: dict[str, Any]) -> str | None:
    """The projected context block of a child turn/start (or a fake's model record)."""
    params = turn_start_or_seen.get("params", turn_start_or_seen)
    extra = params.get("additionalContext") or {}
    entry = extra.get(CONTEXT_KEY)
    return entry["value"] if entry else None


def input_of(line: bytes) -> bytes:
    """The raw bytes of a turn/start line's ``"input":[...]`` member."""
    obj = json.loads(line)
    raw = json.dumps(obj["params"]["input"], separators=(",", ":"), ensure_ascii=False).encode()
    assert b'"input":' + raw in line
    return raw


def client_turn_starts(run: ModesRun) -> list[bytes]:
    return [line for line in run.sent if json.loads(line).get("method") == "turn/start"]


def assert_client_unaware(run: ModesRun, thread_id: str) -> None:
    """Every frame the client got is about its own thread and its own requests:
    no revert noise, no response to a request it did not send."""
    sent_ids = {json.loads(line).get("id") for line in run.sent}
    for f in run.frames():
        if "method" not in f:
            assert f.get("id") in sent_ids, f"response to a request the client never sent: {f}"
            continue
        assert f["method"] not in REVERT_NOISE, f
        params = f.get("params") or {}
        if f["method"] == "thread/status/changed":
            assert params["status"]["type"] != "notLoaded", f
        if "threadId" in params:
            assert params["threadId"] == thread_id, f


def inspect_records(run: ModesRun, thread_id: str) -> list[dict[str, Any]]:
    assert run.lifecycle is not None
    return run.lifecycle.inspect(thread_id)



async def list_all(run: ModesRun, tid: str, *, cursor: str | None = None, method: str = "thread/turns/list", **params: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """Page through a listing to the end (from ``cursor``): the turn ids (or
    item ids), and every page."""
    ids: list[str] = []
    pages: list[dict[str, Any]] = []
    for _ in range(20):
        resp = await run.request(method, {"threadId": tid, **params, **({"cursor": cursor} if cursor else {})})
        assert "result" in resp, resp
        pages.append(resp["result"])
        ids += [t["id"] if "id" in t else t["item"]["id"] for t in resp["result"]["data"]]
        cursor = resp["result"]["nextCursor"]
        if cursor is None:
            return ids, pages
    raise AssertionError(f"thread/turns/list never ended: {ids}")


async def items_all(run: ModesRun, tid: str, **params: Any) -> list[dict[str, Any]]:
    """Page through ``thread/items/list`` to the end: every entry, each page within its limit."""
    entries: list[dict[str, Any]] = []
    cursor: Any = params.pop("cursor", None)
    for _ in range(40):
        resp = await run.request("thread/items/list", {"threadId": tid, **params, **({"cursor": cursor} if cursor else {})})
        assert "result" in resp, resp
        if isinstance(params.get("limit"), int):
            assert len(resp["result"]["data"]) <= params["limit"]
        entries += resp["result"]["data"]
        cursor = resp["result"]["nextCursor"]
        if cursor is None:
            return entries
    raise AssertionError("thread/items/list never ended")


async def four_turns_rebuilt_at_the_third(run: ModesRun, prefix: str) -> tuple[str, list[str]]:
    """A thread of four turns under summarising_once(): the third rebuilds,
    so Codex forgets the first two."""
    tid = await run.start_thread()
    return tid, [await run.turn_ok(tid, f"{prefix}{n}") for n in range(1, 5)]


def summarising_once() -> RecordingEngine:
    """The first two messages replaced by a summary from the third turn on:
    one rebuild, then plain deltas."""

    def assemble(p: Any) -> AssembleResult:
        messages = list(p.messages)
        if len(messages) >= 4:
            messages = [CompactionSummaryMessage(summary=summary_text(2), tokens_before=20, timestamp=0), *messages[2:]]
        return AssembleResult(messages=messages, estimated_tokens=1)

    return scripted_engine(assemble)
