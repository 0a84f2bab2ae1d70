"""``rebuild = "fresh"``: thread ids at Codex's edge after a switch.

Once the client's thread lives on a backing thread, every frame between them
is mapped (``sidecar.history.backing``): the client's id out, the backing id in.
These pin the cases review found where a frame went to the wrong thread, was
dropped for naming a hidden id, or leaked the backing id: oversized lines,
replies and tool arguments that quote the client's id, and ``review/start``'s
``reviewThreadId``.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from sidecar import methods
from sidecar.history.backing import BackingThreads
from sidecar.lifecycle import Lifecycle
from sidecar.relay import ProxyOptions
from sidecar.rows import thread_id_keys
from tests.support.fresh import FIRST_THREAD, SCRIPT, fresh, spare_ready
from tests.support.harness import child, frame, proxied, wait_until
from tests.support.modes import ModesRun, modes_sidecar, summarising

C = FIRST_THREAD  # the client's thread
S1 = "01a20000-0000-7000-8000-0000000000b1"  # its first spare
TURN = "01a20000-0000-7000-8000-0000000000c1"


def test_a_tool_call_whose_arguments_name_the_client_thread_is_not_dropped(tmp_path):
    """backing.py notification()/_KEYED: dynamic tool calls carry the
    model's ``arguments`` as a JSON object (fixtures/dynamic_tool_call.jsonl),
    so a member the model wrote, e.g. ``{"sessionId": <the thread id it was
    told>}`` for an OpenClaw sessions tool, is a keyed member like any
    routing one. After the first switch the client's own id is hidden, so
    the item/tool/call server request of the CURRENT thread is dropped:
    Codex waits for the tool's result forever (its item/started and
    item/completed are dropped too, before the lifecycle's hooks)."""
    b = BackingThreads(tmp_path, thread_id_keys(methods.METHODS))
    b.remember_start(C, {})
    b.note_spare(C, S1)
    b.switch(C)
    line = json.dumps(
        {
            "method": "item/tool/call",
            "id": 0,
            "params": {"threadId": S1, "turnId": TURN, "callId": "call_1", "namespace": None, "tool": "sessions_history", "arguments": {"sessionId": C}},
        },
        separators=(",", ":"),
    ).encode()
    out = b.notification(line)
    assert out is not None, "the current thread's tool call was dropped (its arguments name the client's id)"
    assert json.loads(out)["params"]["threadId"] == C


def test_review_start_answer_does_not_leak_the_backing_thread(tmp_path):
    """backing.py _KEYED: Codex 0.169.0's ReviewStartResponse names the thread
    in ``reviewThreadId`` ("The thread id supplied to review/start";
    generate-json-schema), a member the regex does not know: after a switch
    the client gets the backing thread's id."""
    b = BackingThreads(tmp_path, thread_id_keys(methods.METHODS))
    b.remember_start(C, {})
    b.note_spare(C, S1)
    b.switch(C)
    line = json.dumps({"id": 7, "result": {"reviewThreadId": S1, "turn": {"id": TURN, "items": [], "status": "inProgress"}}}).encode()
    assert S1.encode() not in b.response(line, "review/start")


@asynccontextmanager
async def small_lines_sidecar(tmp_path: Path, max_line: int):
    """modes_sidecar with a small max_line_bytes (the default is 64 MiB)."""
    state_dir = tmp_path / "state"
    env = {
        "FAKE_CODEX_LOG": str(tmp_path / "received.jsonl"),
        "FAKE_CODEX_SENT": str(tmp_path / "sent.jsonl"),
        "FAKE_CODEX_STORE": str(tmp_path / "codex-store.json"),
        "FAKE_CODEX_MODEL": str(tmp_path / "model.jsonl"),
        "FAKE_CODEX_SCRIPT": str(tmp_path / "script.json"),
    }
    (tmp_path / "script.json").write_text(json.dumps(SCRIPT))
    opts = ProxyOptions(eof_grace=2.0, kill_grace=2.0, forward_signals=False, max_line=max_line)
    async with proxied(child("fake_codex.py"), env=env, options=opts, edge=BackingThreads(state_dir, thread_id_keys(methods.METHODS))) as client:
        engine = summarising(keep=2)
        lifecycle = Lifecycle(client.proxy, engine, state_dir, fresh())
        lifecycle.install(client.proxy.router.hooks, methods.METHODS)
        run = ModesRun(
            client, lifecycle, engine, state_dir, tmp_path / "received.jsonl", tmp_path / "sent.jsonl",
            model_log=tmp_path / "model.jsonl", store_path=tmp_path / "codex-store.json",
        )
        await run.request("initialize", {"clientInfo": {"name": "t", "title": "t", "version": "0"}, "capabilities": {"experimentalApi": True}})
        await run.send(frame({"method": "initialized"}))
        yield run


async def test_an_oversized_request_after_a_switch_goes_to_the_current_backing_thread(tmp_path):
    """relay/rawlines.py RawLines._client_head/_forward: a client line longer than
    max_line_bytes is streamed to Codex without edge.to_codex, so after a
    switch it names the client's id, i.e. the RETIRED Codex thread. Its
    notifications are then about a hidden thread and dropped: the client
    waits for a turn/completed that never comes. (Oversized answers from
    Codex likewise reach the client unmapped, naming the backing id.)"""
    async with small_lines_sidecar(tmp_path, max_line=16 * 1024) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"O{n}")
        await spare_ready(run, tid)
        await run.turn_ok(tid, "O4")  # onto the spare
        current = run.lifecycle.backing.aliases[tid].current
        assert current != tid
        _, line = run.turn_start_line(tid, "big " + "x" * 20_000)
        await run.send(line)
        got = await wait_until(
            lambda: [m for m in run.received("turn/start") if "xxxx" in json.dumps(m["params"]["input"])], what="the big turn/start"
        )
    assert got[0]["params"]["threadId"] == current, "the oversized turn/start went to the retired thread"


async def test_a_frame_of_the_current_thread_that_mentions_the_client_id_is_not_dropped(tmp_path):
    """backing.py notification(): after the first switch the client's own id
    is hidden (it names the retired Codex thread), and ANY quoted UUID in a
    frame that is hidden drops the whole frame, even when the frame is
    about the current backing thread. Here the agent's reply is exactly the
    thread id: item/completed and turn/completed (its summary carries the
    reply) are dropped and the client's turn never completes. The same
    happens to an item/tool/call server request whose arguments carry the
    id as a value (e.g. a session key, which is the thread id by default):
    Codex then waits for the tool result forever."""
    script = {**SCRIPT, "defaultReply": FIRST_THREAD}
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=script) as run:
        tid = await run.start_thread()
        assert tid == FIRST_THREAD
        for n in range(1, 4):
            await run.turn_ok(tid, f"H{n}")
        await spare_ready(run, tid)
        rid, line = run.turn_start_line(tid, "H4")
        await run.send(line)
        resp = await run.wait_response(rid)
        turn_id = resp["result"]["turn"]["id"]
        completed: Any = None
        with trio.move_on_after(3):
            completed = await run.wait_frame(lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == turn_id)
    assert completed is not None, "turn/completed of the client's own turn was dropped"
