"""Review of ``rebuild = "fresh"``: failing tests that pin down bugs found in
review (each test states what the sidecar should do; today it does not).

Codex behaviour the fake does not model, checked against the real 0.169.0
binary (thread/start, kill, thread/resume in a fresh process): a thread that
never had an accepted turn has no rollout, and a fresh process answers its
``thread/resume`` with ``-32600 no rollout found for thread id ...``. A
warm ``thread/resume`` does not materialise it either; ``thread/name/set``
and an accepted ``turn/start`` do. ``codex_forgets_zero_turn_threads`` below
applies that to the fake's store between two sidecar processes.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from sidecar.inspect import InspectLog, inspect_path
from sidecar.lifecycle import Lifecycle
from sidecar.relay import ProxyOptions
from tests.harness import child, proxied
from tests.test_fresh_rebuild import SCRIPT, fresh, spare_ready
from tests.test_lifecycle import frame, wait_until
from tests.test_projection_modes import ModesRun, modes_sidecar, summarising

FIRST_THREAD = "01a20000-0000-7000-8000-000000000001"  # the fake's first uuidThreadIds id


def codex_forgets_zero_turn_threads(tmp_path: Path, store: str = "codex-store.json") -> list[str]:
    """What a Codex restart does to threads that never had an accepted turn
    (0.169.0: no rollout file): they are gone for thread/resume."""
    path = tmp_path / store
    threads = json.loads(path.read_text())
    gone = [tid for tid, t in threads.items() if not t["turns"]]
    path.write_text(json.dumps({tid: t for tid, t in threads.items() if t["turns"]}))
    return gone


# --------------------------------------------------------------------------
# 1. The map names a backing thread Codex cannot resume


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
        InspectLog(inspect_path(run.state_dir, tid)).append({"rebuilding": True, "rebuilds": 1, "projectedEpoch": None})
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


# --------------------------------------------------------------------------
# 2. Released sessions leave their spare loaded in Codex


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


# --------------------------------------------------------------------------
# 3. Oversized lines bypass the edge


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
    async with proxied(child("fake_codex.py"), env=env, options=opts) as client:
        engine = summarising(keep=2)
        lifecycle = Lifecycle(client.proxy, engine, state_dir, fresh())
        lifecycle.install(client.proxy.hooks)
        run = ModesRun(
            client, lifecycle, engine, state_dir, tmp_path / "received.jsonl", tmp_path / "sent.jsonl",
            model_log=tmp_path / "model.jsonl", store_path=tmp_path / "codex-store.json",
        )
        await run.request("initialize", {"clientInfo": {"name": "t", "title": "t", "version": "0"}, "capabilities": {"experimentalApi": True}})
        await run.send(frame({"method": "initialized"}))
        yield run


async def test_an_oversized_request_after_a_switch_goes_to_the_current_backing_thread(tmp_path):
    """relay/router.py _client_raw_head/_forward_raw: a client line longer than
    max_line_bytes is streamed to Codex without edge.to_codex, so after a
    switch it names the client's id, i.e. the RETIRED Codex thread. Its
    notifications are then about a hidden thread and dropped: the client
    waits for a turn/completed that never comes. (Oversized answers from
    Codex likewise reach the client untranslated, naming the backing id.)"""
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


# --------------------------------------------------------------------------
# 4. A hidden id anywhere in a frame drops the client's own frames


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


# --------------------------------------------------------------------------
# 5. Concurrent saves of one alias share one temporary file


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

    import sidecar.backing as backing_mod
    from sidecar.backing import BackingThreads

    x, s = FIRST_THREAD, "01a20000-0000-7000-8000-0000000000b1"
    b = BackingThreads(tmp_path)
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
