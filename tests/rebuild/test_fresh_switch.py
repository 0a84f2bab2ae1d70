"""``rebuild = "fresh"``: a rebuild moves the client's thread onto a spare
Codex thread (sidecar/history/backing.py), behind the client's unchanged thread id.

The fake app-server (tests/support/children/fake_codex.py) hands out Codex-shaped
thread ids here (``uuidThreadIds``). The engine replaces everything but the
newest two messages by a summary, so from the third turn on every turn is a
rebuild: the first one reverts (no spare until the engine is seen to
rebuild), the later ones switch threads once a spare is ready.
"""

from __future__ import annotations

import json

import trio

from sidecar.history.backing import BackingThreads, routing_ids
from tests.support.fresh import SCRIPT, fresh, spare_ready
from tests.support.lifecycle import frame, wait_until
from tests.support.modes import assert_client_unaware, context_of, inspect_records, modes_sidecar, summarising, summary_text


async def test_a_rebuild_moves_the_thread_onto_its_spare_and_the_client_never_knows(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread(model="m1")
        t1 = await run.turn_ok(tid, "F1")
        t2 = await run.turn_ok(tid, "F2", effort="high")  # a sticky setting: later turns keep it
        t3 = await run.turn_ok(tid, "F3")  # rebuild 1: a revert (no spare yet)
        spare = await spare_ready(run, tid)
        t4 = await run.turn_ok(tid, "F4")  # rebuild 2: onto the spare
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        listed = await run.request("thread/loaded/list", {})
        status = await run.status()
    assert_client_unaware(run, tid)
    assert status["backingThreads"]["switched"] == 1 and status["rebuilds"] == 2
    alias = json.loads((run.state_dir / "backing" / f"{tid}.json").read_text())
    assert alias["current"] == spare and alias["retired"] == [tid]
    # Codex: the client's own thread kept the first rebuild's turn; the spare holds the second's.
    assert [t["id"] for t in run.store_turns(tid)] == [t3]
    assert [t["id"] for t in run.store_turns(spare)] == [t4]
    # The switch turn went to the spare, with the whole assembly and the sticky setting.
    (start,) = [json.loads(line) for line in run.child_lines("turn/start") if json.loads(line)["params"]["threadId"] == spare]
    assert start["params"]["effort"] == "high"
    assert summary_text(4) in context_of(start)
    seen = run.seen(spare)
    assert seen[0]["held"] == []  # a fresh thread: nothing but the projection
    # The spare started like the client's thread.
    starts = [json.loads(line)["params"] for line in run.child_lines("thread/start")]
    assert starts[0] == starts[1] == {"cwd": "/tmp/fake-work", "model": "m1"}
    # Reads answer for the client's thread: every turn, under its id.
    assert read["result"]["thread"]["id"] == tid
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t2, t3, t4]
    assert listed["result"]["data"] == [tid]
    # The retired thread was let go.
    assert any(json.loads(line)["params"] == {"threadId": tid} for line in run.child_lines("thread/unsubscribe"))


async def test_a_rebuild_waits_briefly_for_a_spare_whose_start_is_on_its_way(tmp_path):
    """The turn right after the first rebuild rebuilds again while its spare's
    thread/start is still unanswered: it waits for the answer (spare_wait)
    and switches, instead of reverting; past the wait it reverts."""
    script = {**SCRIPT, "threadStartSlowAfter": 1, "threadStartDelay": 0.3}
    for wait, switched in ((5.0, True), (0.05, False)):
        options = fresh(spare_wait=wait)
        async with modes_sidecar(tmp_path / str(wait), summarising(keep=2), options=options, script=script) as run:
            tid = await run.start_thread()
            for n in range(1, 4):
                await run.turn_ok(tid, f"W{n}")  # W3: rebuild 1, a revert (no spare yet); its spare starts as it ends
            t4 = await run.turn_ok(tid, "W4")  # rebuild 2, sent at once: the spare takes 0.3 s to answer
            records = inspect_records(run, tid)
        assert [r["rebuilt"] for r in records] == [False, False, True, True], wait
        assert bool(records[3].get("switched")) is switched, wait
        reverts = [json.loads(line)["params"]["beforeTurnId"] for line in run.child_lines("thread/revert")]
        assert len(reverts) == (1 if switched else 2), wait
        assert (t4 in [t["id"] for t in run.store_turns(tid)]) is not switched, wait
        assert_client_unaware(run, tid)


async def test_a_spare_codex_refuses_leaves_the_revert(tmp_path):
    script = {**SCRIPT, "threadStartFailsAfter": 1}
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=script) as run:
        tid = await run.start_thread()
        turns = [await run.turn_ok(tid, f"S{n}") for n in range(1, 6)]
        await wait_until(lambda: len(run.child_lines("thread/start")) >= 2, what="a spare asked for")
        status = await run.status()
    assert status["rebuilds"] == 3 and status["backingThreads"]["switched"] == 0
    assert [t["id"] for t in run.store_turns(tid)] == turns[-1:]  # reverted in place each time
    assert_client_unaware(run, tid)


async def test_a_switch_that_cannot_be_saved_reverts_instead(tmp_path, monkeypatch):
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"D{n}")
        spare = await spare_ready(run, tid)

        def full(*args):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(BackingThreads, "write", lambda self, *args: full(*args))
        t4 = await run.turn_ok(tid, "D4")
        alias = run.lifecycle.backing.aliases[tid]
    assert (alias.current, alias.spare, alias.retired) == (tid, spare, [])
    assert [t["id"] for t in run.store_turns(tid)] == [t4]  # reverted in place
    assert run.store_turns(spare) == []
    assert_client_unaware(run, tid)


async def test_a_spare_s_own_notifications_never_reach_the_client(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"N{n}")
        spare = await spare_ready(run, tid)
        await trio.sleep(0.05)
    started = [f for f in run.frames() if f.get("method") == "thread/started"]
    assert [f["params"]["thread"]["id"] for f in started] == [tid]
    assert spare not in json.dumps(run.frames())


async def test_a_spare_codex_answers_after_the_deadline_is_still_hidden_and_used(tmp_path):
    """The spare's thread/start outlives the sidecar's deadline: the answer
    that comes later still hides the thread (its id never reaches the
    client), is saved, and the next rebuild moves onto it."""
    script = {**SCRIPT, "threadStartSlowAfter": 1, "threadStartDelay": 0.6}
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(engine_deadline=0.3), script=script) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"T{n}")  # rebuild 1 reverts; the spare's start times out
        spare = await spare_ready(run, tid)
        await wait_until(lambda: (run.state_dir / "backing" / f"{tid}.json").exists() and spare in (run.state_dir / "backing" / f"{tid}.json").read_text(), what="the late spare saved")
        t4 = await run.turn_ok(tid, "T4")  # onto the late spare
        alias = run.lifecycle.backing.aliases[tid]
    assert alias.current == spare and alias.retired == [tid]
    assert [t["id"] for t in run.store_turns(spare)] == [t4]
    # (The fake's turn ids start with their thread's id: look at thread ids only.)
    assert not [f for f in run.frames() if spare in routing_ids(json.dumps(f).encode())]
    assert spare not in json.dumps([f for f in run.frames() if f.get("method") in ("thread/started", "thread/status/changed")])
    assert_client_unaware(run, tid)


async def test_a_released_thread_does_not_leave_its_spare_loaded(tmp_path):
    """lifecycle.py _release_session / _on_thread_closed: the client
    unsubscribes its thread, Codex closes it, the session is released, but
    the spare started for it stays loaded in Codex for the life of the
    process (one extra Codex session per thread ever rebuilt)."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"L{n}")
        spare = await spare_ready(run, tid)
        await run.request("thread/unsubscribe", {"threadId": tid})
        await wait_until(lambda: tid not in run.lifecycle.sessions, what="session released")
        await trio.sleep(0.2)
        unsubscribed = [json.loads(line)["params"]["threadId"] for line in run.child_lines("thread/unsubscribe")]
    assert spare in unsubscribed, "the spare of a released thread is never unloaded"


async def test_a_process_that_resumed_a_thread_starts_no_spare_until_its_second_turn(tmp_path):
    """OpenClaw's ``agent --local`` resumes the thread in a new process for
    every turn and kills it right after: a spare started then only leaves a
    Codex thread the next process must retire. A thread resumed here gets
    its spare once a second turn shows the process lives on."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="one") as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"P{n}")  # P3 rebuilds: the engine is known to rebuild
        first_spare = await spare_ready(run, tid)  # started here: the process's own thread gets one at once
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="two") as run2:
        await run2.resume_thread(tid)
        await run2.turn_ok(tid, "P4")
        await trio.sleep(0.3)  # what a spare start would take (the fake answers at once)
        starts_after_one = len(run2.child_lines("thread/start"))
        await run2.turn_ok(tid, "P5")
        await wait_until(lambda: len(run2.child_lines("thread/start")) > starts_after_one, what="a spare started after the second turn")
    assert starts_after_one == 0, "no spare for a process that may die after its only turn"
    alias = json.loads((run2.state_dir / "backing" / f"{tid}.json").read_text())
    assert alias["retired"] == [first_spare], "the first process's spare is the only one retired"


async def test_settings_of_a_turn_start_codex_refuses_do_not_stick(tmp_path):
    """The settings a switch turn gets again are those of turn/starts Codex
    took: one it refused (an input it does not know) changed nothing."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread(model="m1")
        await run.turn_ok(tid, "F1", effort="high")
        rid = run.new_id()
        bad = {"threadId": tid, "effort": "low", "input": [{"type": "text", "text": "F2", "text_elements": []}, {"type": "no-such-input"}]}
        await run.send(frame({"id": rid, "method": "turn/start", "params": bad}))
        assert (await run.wait_response(rid))["error"]["code"] == -32600
        await run.turn_ok(tid, "F3")
        sticky = run.lifecycle.backing.aliases[tid].sticky
    assert sticky["effort"] == "high"
