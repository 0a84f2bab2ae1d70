"""Releasing a thread's session when Codex closes the thread.

Codex unloads a thread (``thread/closed``) after ``thread/unsubscribe`` and
its unload delay. The sidecar then closes the thread's transcript mirror and
drops its in-memory state, once nothing of the thread is under way and Codex
confirms the thread is not loaded; a later ``thread/resume`` opens it again
from disk, as after a restart. The fake app-server (tests/support/children/fake_codex.py)
closes a thread as soon as it is unsubscribed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from sidecar.store.mirror import session_path
from tests.support.lifecycle import frame, wait_until
from tests.support.modes import identity, modes_sidecar, summarising


def open_paths() -> set[str]:
    """Files this process (the in-process sidecar) has open."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.add(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
    return out


def user_texts(messages) -> list[str]:
    out = []
    for m in messages:
        if getattr(m, "role", None) == "user":
            content = m.content
            out.append(content if isinstance(content, str) else "".join(getattr(b, "text", "") for b in content))
    return out


async def _released(run, tid: str) -> None:
    await wait_until(lambda: tid not in run.lifecycle.sessions, what="session released")


async def test_a_closed_thread_is_released_and_a_resume_opens_it_from_disk(tmp_path):
    engine = summarising(keep=2)
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "R1")
        t2 = await run.turn_ok(tid, "R2")
        t3 = await run.turn_ok(tid, "R3")  # a rebuild: Codex holds t3 only
        mirror = str(session_path(run.state_dir, tid))
        assert mirror in open_paths()
        resp = await run.request("thread/unsubscribe", {"threadId": tid})
        assert resp["result"] == {"status": "unsubscribed"}
        await run.wait_frame(lambda f: f.get("method") == "thread/closed")  # the client still gets it
        await _released(run, tid)
        assert mirror not in open_paths()
        status = (await run.status())
        assert status["releasedThreads"] == 1
        assert status["rebuilds"] == 1  # the released thread's rebuild still counts
        assert tid not in status["threads"]
        assert tid not in run.lifecycle.archived._cache
        bootstraps = len(engine.calls_to("bootstrap"))

        await run.resume_thread(tid)
        t4 = await run.turn_ok(tid, "R4")
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
    # Opened again from disk, as after a restart: the whole history assembled,
    # and no bootstrap (the engine followed the session from its first turn,
    # which the session's journal of learned facts remembers).
    assert len(engine.calls_to("bootstrap")) == bootstraps == 0
    assembled = engine.calls_to("assemble")[-1].params
    assert user_texts(assembled.messages) == ["R1", "R2", "R3"]
    # Exactly once: nothing mirrored twice, and reads still splice the archived turns.
    keys = [e.get("idempotencyKey") for e in run.mirror_entries(tid) if e.get("type") != "session"]
    assert len(keys) == len(set(keys))
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1, t2, t3, t4]


async def test_a_close_codex_contradicts_keeps_the_session(tmp_path):
    async with modes_sidecar(tmp_path, identity(), script={"closedButLoaded": True}) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "C1")
        session = run.session(tid)
        await run.request("thread/unsubscribe", {"threadId": tid})
        await run.wait_frame(lambda f: f.get("method") == "thread/closed")
        await wait_until(lambda: run.received("thread/loaded/list"), what="the sidecar asking Codex")
        await run.turn_ok(tid, "C2")  # its hold waits for the release task's turn slot
        assert run.lifecycle.sessions.get(tid) is session
        assert str(session_path(run.state_dir, tid)) in open_paths()
        assert (await run.status())["releasedThreads"] == 0


async def test_a_resume_right_behind_the_unsubscribe_keeps_the_session(tmp_path):
    engine = identity()
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "P1")
        session = run.session(tid)
        unsubscribe = run.new_id()
        resume = run.new_id()
        # Both on their way before the sidecar reads Codex's thread/closed.
        await run.send(frame({"id": unsubscribe, "method": "thread/unsubscribe", "params": {"threadId": tid}}))
        await run.send(frame({"id": resume, "method": "thread/resume", "params": {"threadId": tid}}))
        await run.wait_response(resume)
        await run.turn_ok(tid, "P2")
        assert run.lifecycle.sessions.get(tid) is session
        assert len(engine.calls_to("bootstrap")) == 0  # never reopened
        assert (await run.status())["releasedThreads"] == 0


async def test_a_close_waits_for_the_last_turn_s_finalisation(tmp_path):
    engine = identity()
    release = trio.Event()
    async with modes_sidecar(tmp_path, engine) as run:
        tid = await run.start_thread()
        engine.hang("after_turn", release)
        done = await run.turn(tid, "F1", settle=False)
        await engine.wait_for_call("after_turn")
        await run.request("thread/unsubscribe", {"threadId": tid})
        await run.wait_frame(lambda f: f.get("method") == "thread/closed")
        await trio.sleep(0.05)
        assert tid in run.lifecycle.sessions  # finalising: not released under it
        assert not run.received("thread/loaded/list")
        release.set()
        await _released(run, tid)
    entries = [e for e in run.mirror_entries(tid) if e.get("type") == "custom"]
    assert any((e.get("data") or {}).get("turnId") == done["id"] for e in entries), "the finalised marker was written before the release"


async def test_many_threads_opened_and_closed_hold_no_file_open(tmp_path):
    async with modes_sidecar(tmp_path, identity()) as run:
        before = len(open_paths())
        for n in range(30):
            tid = await run.start_thread()
            await run.turn_ok(tid, f"M{n}")
            await run.request("thread/unsubscribe", {"threadId": tid})
            await _released(run, tid)
        assert run.lifecycle.sessions == {}
        assert len(open_paths()) <= before
        assert (await run.status())["releasedThreads"] == 30
    assert len(list(Path(run.state_dir, "sessions").glob("*.jsonl"))) == 30


@pytest.mark.parametrize("method", ["thread/archive", "thread/delete"])
async def test_an_archived_or_deleted_thread_is_released_though_codex_sends_no_thread_closed(tmp_path, method):
    from tests.support.fresh import SCRIPT, fresh

    start = {"developerInstructions": "D" * 2_000}
    engine = identity()
    async with modes_sidecar(tmp_path, engine, options=fresh(), script=SCRIPT) as run:
        tid = await run.start_thread(**start)
        await run.turn_ok(tid, "A1")
        await wait_until(lambda: run.lifecycle.backing.aliases.get(tid) is not None, what="the thread's alias")
        assert str(session_path(run.state_dir, tid)) in open_paths()
        resp = await run.request(method, {"threadId": tid})
        assert "error" not in resp
        await run.wait_frame(lambda f: f.get("method") == method.replace("archive", "archived").replace("delete", "deleted"))
        await _released(run, tid)
        assert str(session_path(run.state_dir, tid)) not in open_paths()
        assert tid not in run.lifecycle.backing.aliases  # never switched: its start params not held
        assert (await run.status())["releasedThreads"] == 1
        if method == "thread/archive":
            # Opened again from disk (the fake resumes an archived thread as Codex does after thread/unarchive).
            await run.resume_thread(tid)
            assert run.lifecycle.backing.alias(tid).start["developerInstructions"] == start["developerInstructions"]
            await run.turn_ok(tid, "A2")
            assert user_texts(engine.calls_to("assemble")[-1].params.messages) == ["A1"]
