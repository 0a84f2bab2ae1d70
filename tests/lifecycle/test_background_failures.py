"""A failure nobody planned for in any kind of background work the lifecycle
spawns (opening a session, finalising a turn, writing the finalized marker,
recording an injected item, starting a spare) is logged once, that piece
fails open, and the relay keeps serving: the turn completes and the next one
does too.
"""

from __future__ import annotations

import logging

import pytest

from sidecar.history.archive import TurnArchive
from sidecar.history.backing import BackingThreads
from sidecar.store.injected import InjectedItems
from sidecar.store.mirror import TranscriptMirror
from tests.support.fresh import SCRIPT, fresh
from tests.support.lifecycle import wait_until
from tests.support.modes import modes_sidecar, summarising

SECRET = "do-not-log-this-prompt-text"


class Unplanned(RuntimeError):
    pass


CALLS: list[str] = []


def boom(*args, **kwargs):
    CALLS.append("called")
    raise Unplanned(SECRET)


FAILURES = {
    "finalising a turn": (TurnArchive, "append_turn"),
    "writing the finalized marker": (TranscriptMirror, "append_custom"),
    "opening a session": (TranscriptMirror, "open"),
    "recording an injected item": (InjectedItems, "append"),
    "starting a spare": (BackingThreads, "write"),
}


@pytest.mark.parametrize("kind", list(FAILURES))
async def test_an_unplanned_failure_in_background_work_is_logged_once_and_the_relay_carries_on(tmp_path, monkeypatch, logs, kind):
    owner, name = FAILURES[kind]
    CALLS.clear()
    monkeypatch.setattr(owner, name, staticmethod(boom) if name == "open" else boom)
    options = fresh() if kind == "starting a spare" else None
    async with modes_sidecar(tmp_path, summarising(keep=2), options=options, script=SCRIPT) as run:
        tid = await run.start_thread()
        # Not waiting for the finalisation the failure may have cut short: the
        # next turn waits for the thread itself, as a client's would.
        done = [await run.turn(tid, "B1", settle=False)]
        policy = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "P"}]}]
        assert "result" in await run.request("thread/inject_items", {"threadId": tid, "items": policy})
        for n in range(2, 5):
            done.append(await run.turn(tid, f"B{n}", settle=False))
        await wait_until(lambda: not run.lifecycle.sessions[tid].busy, what="the thread free again")
        status = await run.status()
    assert [d["completed"]["params"]["turn"]["status"] for d in done] == ["completed"] * 4
    assert "busy" in status["threads"][tid]
    failures = [r for r in logs.records if r.levelno >= logging.WARNING and Unplanned.__name__ in str(getattr(r, "fields", ""))]
    assert failures, f"the {kind} failure was not logged"
    assert all(SECRET not in r.getMessage() and SECRET not in str(getattr(r, "fields", "")) for r in logs.records)
    # Once: one record for each call that failed, never two.
    assert len(failures) == len(CALLS), [str(getattr(r, "fields", "")) for r in failures]
