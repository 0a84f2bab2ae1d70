"""Second review of ``rebuild = "fresh"`` (the fixes of 82b850d and 5ce92f0):
failing tests that pin down bugs in the fixes (each states what should happen).
"""

from __future__ import annotations

import json
from typing import Any

import trio

from sidecar.backing import BackingThreads
from tests.test_fresh_rebuild import SCRIPT, fresh, spare_ready
from tests.test_lifecycle import frame
from tests.test_projection_modes import modes_sidecar, summarising

C = "01a20000-0000-7000-8000-000000000001"  # the client's thread
S1 = "01a20000-0000-7000-8000-0000000000b1"  # its first spare
S2 = "01a20000-0000-7000-8000-0000000000b2"  # the next spare
TURN = "01a20000-0000-7000-8000-0000000000c1"


# --------------------------------------------------------------------------
# 1. A client resume while the switch turn is in flight rolls the switch back
#    under the running turn: every notification of the turn is dropped.


async def test_a_resume_right_after_the_switch_turn_does_not_lose_the_turn(tmp_path):
    """lifecycle.py _backing_resume: the switch is *pending* from _switch
    until Codex answers the switch turn/start. A thread/resume the client
    sends meanwhile (here right behind its turn/start: the gate holds it and
    releases it the moment the turn/start is forwarded, before Codex
    answered) rolls the switch back: current = the old thread, the spare
    (where the turn is running) hidden. turn/started, the items and
    turn/completed of the client's turn name a hidden thread and are all
    dropped; confirm() is a no-op (not pending any more). The client's turn
    never completes, and the sidecar's own mirror/finalize never see it."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"P{n}")
        spare = await spare_ready(run, tid)
        rid, line = run.turn_start_line(tid, "P4")  # a rebuild: onto the spare
        await run.send(line)
        resume_id = run.new_id()
        await run.send(frame({"id": resume_id, "method": "thread/resume", "params": {"threadId": tid}}))
        resp = await run.wait_response(rid)
        assert "result" in resp
        turn_id = resp["result"]["turn"]["id"]
        completed: Any = None
        with trio.move_on_after(3):
            completed = await run.wait_frame(lambda f: f.get("method") == "turn/completed" and f["params"]["turn"]["id"] == turn_id)
        alias = run.lifecycle.backing.aliases[tid]
    assert [t["id"] for t in run.store_turns(spare)] == [turn_id]  # the turn ran on the spare
    assert completed is not None, (
        f"the client's turn never completes: rolled back under it (current={alias.current}, spare {spare} hidden)"
    )


# --------------------------------------------------------------------------
# 2. _load: a leftover spare is made retired BEFORE the pending switch rolls back


def test_load_rolls_a_pending_switch_back_to_the_thread_before_not_to_the_spare(tmp_path):
    """backing.py _load: a map with a pending switch AND a spare (a spare
    started while the switch turn was not yet accepted, e.g. after a refused
    switch turn a native compaction's turn/completed ran _want_spare) is
    loaded by appending the spare to ``retired`` first, then rollback() pops
    ``retired[-1]``: the spare (never used, not loaded in the new Codex, no
    rollout) becomes the client's current thread instead of the thread
    before the switch. Every resume of the client's thread then fails."""
    b = BackingThreads(tmp_path)
    b.remember_start(C, {"cwd": "/w"})
    b.note_spare(C, S1)
    b.switch(C)  # pending
    b.note_spare(C, S2)  # the next spare, before the switch turn was accepted
    b.save(b.aliases[C])
    loaded = BackingThreads(tmp_path)
    alias = loaded.aliases[C]
    assert alias.current == C, f"rolled back onto {alias.current} (S1={S1}, S2={S2}); retired={alias.retired}"


# --------------------------------------------------------------------------
# 3. The keyed regex still matches members the model writes


def test_a_tool_call_whose_arguments_name_the_client_thread_is_not_dropped(tmp_path):
    """backing.py notification()/_KEYED: dynamic tool calls carry the
    model's ``arguments`` as a JSON object (fixtures/dynamic_tool_call.jsonl),
    so a member the model wrote, e.g. ``{"sessionId": <the thread id it was
    told>}`` for an OpenClaw sessions tool, is a keyed member like any
    routing one. After the first switch the client's own id is hidden, so
    the item/tool/call server request of the CURRENT thread is dropped:
    Codex waits for the tool's result forever (its item/started and
    item/completed are dropped too, before the lifecycle's hooks)."""
    b = BackingThreads(tmp_path)
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
    b = BackingThreads(tmp_path)
    b.remember_start(C, {})
    b.note_spare(C, S1)
    b.switch(C)
    line = json.dumps({"id": 7, "result": {"reviewThreadId": S1, "turn": {"id": TURN, "items": [], "status": "inProgress"}}}).encode()
    assert S1.encode() not in b.response(line, "review/start")
