"""A client's thread list that Codex answers between creating a thread the
sidecar starts for itself and answering that ``thread/start``: with the fake
app-server (``threadStartLate``: the start's thread is loaded at once, its
answer comes right after the next ``thread/loaded/list`` answer), so the
race is the same every run. The rule itself: test_own_starts.py."""

from __future__ import annotations

import json
from typing import Any

import trio

from engines import CompleteParams
from sidecar.host import Completions
from sidecar.lifecycle import LifecycleOptions
from tests.support.fresh import FIRST_THREAD, SCRIPT, fresh
from tests.support.lifecycle import frame, records_with, sidecar, wait_until
from tests.support.modes import identity, modes_sidecar, summarising

OWNED = "01a20000-0000-7000-8000-000000000002"  # the fake's second thread: the sidecar's
CLIENTS_SECOND = "01a20000-0000-7000-8000-000000000003"


def named(frames: list[dict[str, Any]], thread_id: str) -> list[dict[str, Any]]:
    return [f for f in frames if thread_id in json.dumps(f)]


async def test_a_completion_thread_codex_lists_before_answering_its_start_never_reaches_the_client(tmp_path):
    """Codex answers the client's ``thread/loaded/list`` after it made the
    completion's thread and before it answers the completion's start: the
    answer waits for that, and loses the thread. The client's own second
    thread, whose start is unanswered too, stays in it."""
    script = {**SCRIPT, "threadStartLate": [False, True, True]}
    async with sidecar(tmp_path, None, script=script) as run:
        tid = await run.start_thread()
        assert tid == FIRST_THREAD
        completions = Completions(run.client.proxy, run.client.proxy.router.edge, 10.0)
        answers = []

        async def complete() -> None:
            answers.append(await completions.complete(CompleteParams(system="S", prompt="P")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(complete)
            await wait_until(lambda: len(run.received("thread/start")) == 2, what="the completion's thread/start at codex")
            start, listing = run.new_id(), run.new_id()
            await run.send(frame({"id": start, "method": "thread/start", "params": {"cwd": "/tmp/fake-work"}}))
            await run.send(frame({"id": listing, "method": "thread/loaded/list", "params": {}}))
            loaded = await run.wait_response(listing)
            started = await run.wait_response(start)
        frames = run.frames()
    assert started["result"]["thread"]["id"] == CLIENTS_SECOND
    assert loaded["result"]["data"] == [FIRST_THREAD, CLIENTS_SECOND]
    assert answers and completions.stats["threads"] == 1
    assert named(frames, OWNED) == []


async def test_a_spare_codex_lists_before_answering_its_start_never_reaches_the_client(tmp_path):
    """``rebuild = "fresh"``: the spare started after the first rebuild is
    loaded when the client lists, its start unanswered."""
    script = {**SCRIPT, "threadStartLate": [False, True]}
    async with modes_sidecar(tmp_path, summarising(keep=2), options=fresh(), script=script) as run:
        tid = await run.start_thread()
        for n in range(1, 4):
            await run.turn_ok(tid, f"L{n}")  # L3: the first rebuild, a revert; the spare's start follows
        await wait_until(lambda: len(run.child_lines("thread/start")) == 2, what="the spare's thread/start at codex")
        loaded = await run.request("thread/loaded/list", {})
        spare = run.lifecycle.backing.aliases[tid].spare
        frames = run.frames()
        status = await run.status()
    assert spare == OWNED
    assert loaded["result"]["data"] == [tid]
    assert named(frames, OWNED) == []
    assert status["backingThreads"]["listsHeld"] == 1 and status["backingThreads"]["listsOverdue"] == 0


async def test_a_list_waits_no_longer_than_its_deadline_for_a_start_codex_never_answers(tmp_path, logs):
    """Fail open: the answer goes on as it is (the sidecar does not know the
    thread is its own), logged and counted in ``sidecar/status`` (with an
    engine, ``rebuild`` not ``fresh``), and later lists wait for that start no more."""
    script = {**SCRIPT, "threadStartLate": [False, "never"]}
    async with modes_sidecar(tmp_path, identity(), options=LifecycleOptions(engine_deadline=5.0, rebuild="revert"), script=script) as run:
        tid = await run.start_thread()
        assert "backingThreads" not in await run.status(), "nothing to show before a list was held"
        edge = run.client.proxy.router.edge
        edge.own_starts.wait = 0.2
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run.client.proxy.request("thread/start", {}, raw=True, timeout=30))
            await wait_until(lambda: len(run.received("thread/start")) == 2, what="the sidecar's thread/start at codex")
            first = await run.request("thread/loaded/list", {})
            assert edge.own_starts.starts == set()
            second = await run.request("thread/loaded/list", {})
            status = await run.status()
            nursery.cancel_scope.cancel()
    assert first["result"]["data"] == second["result"]["data"] == [tid, OWNED]
    assert status["backingThreads"] == {"switched": 0, "spares": 0, "framesDropped": 0, "listsHeld": 1, "listsOverdue": 1}
    assert len(records_with(logs, "thread list answered before the sidecar's own thread start")) == 1
