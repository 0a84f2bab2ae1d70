"""``rebuild = "fresh"``: the client's thread stays resumable whatever the
switch onto a spare meets: a restart, a kill before Codex accepted the switch
turn, a switch turn Codex refuses, a client resume while it is in flight, a
map saved twice at once or loaded with a switch pending.

Each test pins a bug found in review; its docstring says how it went wrong.
A thread that never had an accepted turn has no rollout in Codex 0.169.0, so
a fresh process cannot resume it: ``codex_forgets_zero_turn_threads`` applies
that to the fake's store between two sidecar processes.
"""

from __future__ import annotations

import json
from typing import Any

import trio

from sidecar.history.backing import BackingThreads
from sidecar.methods import METHODS
from sidecar.rows import thread_id_keys
from sidecar.store.ledger import Ledger, ledger_path
from tests.support.fresh import FIRST_THREAD, SCRIPT, codex_forgets_zero_turn_threads, fresh, spare_ready
from tests.support.lifecycle import frame
from tests.support.modes import assert_client_unaware, context_of, modes_sidecar, summarising, summary_text

C = FIRST_THREAD  # the client's thread
S1 = "01a20000-0000-7000-8000-0000000000b1"  # its first spare
S2 = "01a20000-0000-7000-8000-0000000000b2"  # the next spare


async def test_a_restart_resumes_the_client_thread_on_its_backing_thread(tmp_path):
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="one") as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"R{n}")
        await spare_ready(run, tid)
        t4 = await run.turn_ok(tid, "R4")  # onto the spare
        left = await spare_ready(run, tid)  # the next spare, left unused by this process
        current = run.lifecycle.backing.aliases[tid].current
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="two") as run2:
        resumed = await run2.resume_thread(tid)
        t5 = await run2.turn_ok(tid, "R5")
        alias = run2.lifecycle.backing.aliases[tid]
    assert resumed["result"]["thread"]["id"] == tid
    assert [t["id"] for t in resumed["result"]["thread"]["turns"]][-1] == t4
    assert json.loads(run2.child_lines("thread/resume")[0])["params"]["threadId"] == current
    assert_client_unaware(run2, tid)
    # The spare the first process left is not loaded in the new Codex: never
    # used, still hidden; the new process's first rebuild reverts in place.
    assert left in alias.retired and alias.current == current
    assert [t["id"] for t in run2.store_turns(current)] == [t5]
    assert left not in json.dumps(run2.frames())


async def test_a_kill_before_codex_accepted_the_switch_turn_goes_back_to_the_thread_before(tmp_path):
    """Codex writes no rollout for a thread until it accepts a turn, so a
    switch saved but never accepted cannot be resumed: the restart goes
    back to the thread before it, which still holds its turns, and the next
    turn rebuilds there."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="one") as run:
        tid = await run.start_thread()
        turns = [await run.turn_ok(tid, f"K{n}") for n in range(1, 4)]
        spare = await spare_ready(run, tid)
        backing = run.lifecycle.backing
        # Exactly what _switch persists before the turn goes out, then a SIGKILL:
        backing.switch(tid)
        backing.save(backing.aliases[tid])
        Ledger(ledger_path(run.state_dir, tid)).rebuilding(1, None)
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="two") as run2:
        resumed = await run2.resume_thread(tid)
        k4 = await run2.turn_ok(tid, "K4")
        alias = run2.lifecycle.backing.aliases[tid]
    assert json.loads(run2.child_lines("thread/resume")[0])["params"]["threadId"] == tid
    assert [t["id"] for t in resumed["result"]["thread"]["turns"]] == turns
    (start,) = [json.loads(line) for line in run2.child_lines("turn/start")]
    assert start["params"]["threadId"] == tid
    context = context_of(start)
    assert context is not None and summary_text(4) in context  # rebuilt: the whole assembly
    assert [t["id"] for t in run2.store_turns(tid)] == [k4]
    assert (alias.current, alias.pending) == (tid, False) and spare in alias.retired
    assert_client_unaware(run2, tid)


async def test_a_switch_turn_codex_refuses_stays_pending_until_a_turn_lands(tmp_path):
    """Codex refuses the switch turn: the new thread has no rollout yet and
    the switch stays pending. While the thread is loaded here a resume stays
    on it, and the next turn lands there (with the whole assembly: the
    thread holds nothing) and makes it resumable."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread()
        turns = [await run.turn_ok(tid, f"Q{n}") for n in range(1, 4)]
        spare = await spare_ready(run, tid)
        rid = run.new_id()
        bad = {"threadId": tid, "input": [{"type": "text", "text": "Q4", "text_elements": []}, {"type": "no-such-input"}]}
        await run.send(frame({"id": rid, "method": "turn/start", "params": bad}))
        assert "error" in await run.wait_response(rid)
        assert run.lifecycle.backing.aliases[tid].pending
        resumed = await run.resume_thread(tid)
        q5 = await run.turn_ok(tid, "Q5")
        alias = run.lifecycle.backing.aliases[tid]
    assert [t["id"] for t in resumed["result"]["thread"]["turns"]] == turns  # the archived ones, spliced in
    assert (alias.current, alias.pending) == (spare, False)
    (start,) = [json.loads(line) for line in run.child_lines("turn/start") if "Q5" in line.decode()]
    assert start["params"]["threadId"] == spare and summary_text(4) in context_of(start)
    assert [t["id"] for t in run.store_turns(spare)] == [q5]
    assert_client_unaware(run, tid)


async def test_a_kill_between_the_switch_and_its_turn_leaves_the_thread_resumable(tmp_path):
    """lifecycle.py _switch: the map (current = spare) is saved before the
    switch turn reaches Codex, and the spare has no rollout until a turn is
    accepted. A kill in that window leaves a map whose current thread Codex
    cannot resume: every later thread/resume of the client's thread fails."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="one") as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"K{n}")
        spare = await spare_ready(run, tid)
        backing = run.lifecycle.backing
        backing.switch(tid)  # what _switch persists before the turn goes out, then a SIGKILL
        backing.save(backing.aliases[tid])
        Ledger(ledger_path(run.state_dir, tid)).rebuilding(1, None)
    assert spare in codex_forgets_zero_turn_threads(tmp_path)
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="two") as run2:
        resp = await run2.request("thread/resume", {"threadId": tid})
    assert "result" in resp, f"the client's thread cannot be resumed any more: {resp}"


async def test_a_refused_switch_turn_leaves_the_thread_resumable_after_a_restart(tmp_path):
    """Same root cause without a kill: Codex refuses the switch turn (here an
    input item it does not know), so the new backing thread never gets a
    rollout, but the map already names it. After a restart (or after Codex
    unloads it following thread/unsubscribe) the thread cannot be resumed."""
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="one") as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"Q{n}")
        spare = await spare_ready(run, tid)
        rid = run.new_id()
        bad = {"threadId": tid, "input": [{"type": "text", "text": "Q4", "text_elements": []}, {"type": "no-such-input"}]}
        await run.send(frame({"id": rid, "method": "turn/start", "params": bad}))
        refused = await run.wait_response(rid)
        assert "error" in refused
        assert run.lifecycle.backing.aliases[tid].current == spare  # switched, nothing on it
    assert spare in codex_forgets_zero_turn_threads(tmp_path)
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=SCRIPT, name="two") as run2:
        resp = await run2.request("thread/resume", {"threadId": tid})
    assert "result" in resp, f"the client's thread cannot be resumed any more: {resp}"


def test_overlapping_saves_never_leave_the_disk_switched_while_memory_is_not(tmp_path, monkeypatch):
    """backing.py save(): every save of a client's alias writes the same
    ``<client>.tmp`` and saves are not serialised: _save_alias (spare noted,
    sticky settings, name, remember_start) runs in a worker thread and can
    overlap _switch's own save. Here the spare's save (taken before the
    switch) writes, the switch's save truncates and rewrites the same tmp,
    the spare's save renames it into place (switched content) and the
    switch's rename then fails (FileNotFoundError): _switch unswitches and
    reverts in place, but the disk says the client's thread lives on the
    spare. A restart (or a Codex unload + resume) then resumes the spare,
    which has none of the turns that ran on the client's thread since."""
    import os as real_os
    import threading

    import sidecar.history.backing as backing_mod
    from sidecar.history.backing import BackingThreads

    x, s = FIRST_THREAD, "01a20000-0000-7000-8000-0000000000b1"
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    alias = b.remember_start(x, {"cwd": "/w"})
    b.note_spare(x, s)

    a_written, b_written, a_replaced = threading.Event(), threading.Event(), threading.Event()

    class SlowOs:
        def __getattr__(self, name):
            return getattr(real_os, name)

        def fsync(self, fd):
            who = threading.current_thread().name
            if who == "spare-save" and not a_written.is_set():
                a_written.set()
                b_written.wait(1)  # a slow disk: the switch's save runs meanwhile (if it can)
            elif who == "switch-save" and not b_written.is_set():
                b_written.set()
                a_replaced.wait(1)
            real_os.fsync(fd)

        def replace(self, src, dst):
            real_os.replace(src, dst)
            if threading.current_thread().name == "spare-save":
                a_replaced.set()

    monkeypatch.setattr(backing_mod, "os", SlowOs())
    errors: dict[str, BaseException] = {}

    def run(name):
        try:
            b.save(alias)
        except OSError as exc:
            errors[name] = exc

    spare_save = threading.Thread(target=run, args=("spare-save",), name="spare-save")
    spare_save.start()  # _start_spare's _save_alias, in a worker
    assert a_written.wait(5)
    old, new = b.switch(x)  # _switch on the loop ...
    switch_save = threading.Thread(target=run, args=("switch-save",), name="switch-save")
    switch_save.start()  # ... and its save, in another worker
    spare_save.join(5)
    switch_save.join(5)
    if "switch-save" in errors:
        b.unswitch(x, old, new)  # what _switch does when its save fails
    monkeypatch.setattr(backing_mod, "os", real_os)
    # (Read raw: loading would roll back the switch, which is pending until Codex accepts its turn.)
    on_disk = json.loads((tmp_path / "backing" / f"{x}.json").read_text())["current"]
    assert on_disk == b.aliases[x].current, (
        f"memory says {b.aliases[x].current}, disk says {on_disk} (errors: {errors})"
    )


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


def test_load_rolls_a_pending_switch_back_to_the_thread_before_not_to_the_spare(tmp_path):
    """backing.py _load: a map with a pending switch AND a spare (a spare
    started while the switch turn was not yet accepted, e.g. after a refused
    switch turn a native compaction's turn/completed ran _want_spare) is
    loaded by appending the spare to ``retired`` first, then rollback() pops
    ``retired[-1]``: the spare (never used, not loaded in the new Codex, no
    rollout) becomes the client's current thread instead of the thread
    before the switch. Every resume of the client's thread then fails."""
    b = BackingThreads(tmp_path, thread_id_keys(METHODS))
    b.remember_start(C, {"cwd": "/w"})
    b.note_spare(C, S1)
    b.switch(C)  # pending
    b.note_spare(C, S2)  # the next spare, before the switch turn was accepted
    b.save(b.aliases[C])
    loaded = BackingThreads(tmp_path, thread_id_keys(METHODS))
    alias = loaded.aliases[C]
    assert alias.current == C, f"rolled back onto {alias.current} (S1={S1}, S2={S2}); retired={alias.retired}"
