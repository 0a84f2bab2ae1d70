"""A client's own thread/revert, followed by the mirror and archive: the
races a third review found (each reproduced before its fix). The fake
app-server (tests/support/children/fake_codex.py) reverts like Codex; a turn whose
input says HOLD runs until it is interrupted or reverted."""

from __future__ import annotations

import json
import time

import trio

from sidecar.history.archive import TurnArchive, archive_path
from tests.support.lifecycle import calls_for, frame, roles_texts, wait_until
from tests.support.modes import (
    context_of,
    epochs,
    four_turns_rebuilt_at_the_third,
    identity,
    inspect_records,
    modes_sidecar,
    summarising_once,
)


def _texts(messages) -> list[str]:
    return [t for _, t in roles_texts(messages)]


async def _idle(run, tid: str) -> None:
    await wait_until(
        lambda: not len(run.client.proxy.router.gates) and run.session(tid).settled and run.session(tid).unfollowed is None,
        what="the revert followed and the thread idle",
    )


async def _revert_answer_lost(tmp_path, monkeypatch) -> tuple[str, str, str]:
    """K1, K2, then the client reverts before K2: Codex carries it out, and
    the sidecar is killed before it reads the answer (its hook never runs)."""
    from sidecar.lifecycle.reverts import ClientReverts

    with monkeypatch.context() as patch:
        patch.setattr(ClientReverts, "on_revert_response", lambda self, msg, pending: None)  # the kill
        async with modes_sidecar(tmp_path, identity(), name="one") as run:
            tid = await run.start_thread()
            t1 = await run.turn_ok(tid, "K1")
            t2 = await run.turn_ok(tid, "K2")
            assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
    return tid, t1, t2


# A turn/start sent while a turn runs joins that turn, as in Codex (it used
# to queue for the slot and take it before the answer of a revert the client
# sent after it): the client's revert then takes the joined input with the
# turn, and the next turn assembles none of the reverted turns.
async def test_a_turn_start_joined_to_a_running_turn_is_reverted_with_it(tmp_path):
    engine = identity()
    async with modes_sidecar(tmp_path, engine, script={"revertDelay": 0.5}) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "Q1")
        t2 = await run.turn_ok(tid, "Q2")
        rid3, line3 = run.turn_start_line(tid, "Q3 HOLD")
        await run.send(line3)
        t3 = (await run.wait_response(rid3))["result"]["turn"]["id"]
        rid4, line4 = run.turn_start_line(tid, "Q4")
        await run.send(line4)  # joins Q3's turn
        assert (await run.wait_response(rid4))["result"]["turn"]["id"] == t3
        await run.send(frame({"id": run.new_id(), "method": "turn/interrupt", "params": {"threadId": tid, "turnId": t3}}))
        rrid = run.new_id()
        await run.send(frame({"id": rrid, "method": "thread/revert", "params": {"threadId": tid, "beforeTurnId": t2}}))
        assert "result" in await run.wait_response(rrid, timeout=20)
        await _idle(run, tid)
        t5 = await run.turn_ok(tid, "Q5")
        path_messages = run.session(tid).mirror.messages()
    assert [t["id"] for t in run.store_turns(tid)] == [t1, t5]
    assert len(calls_for(engine, "assemble", tid)) == 4  # Q1, Q2, Q3, Q5: the join assembled nothing
    assert not any(t.startswith(("Q2", "Q3", "Q4")) for t in _texts(calls_for(engine, "assemble", tid)[-1].messages))
    assert [t for t in _texts(path_messages) if t.startswith("Q")] == ["Q1", "Q5"]
    assert TurnArchive(archive_path(tmp_path / "state", tid)).pending_forget() is None


# After a rebuild Codex holds only the rebuild's turn (and its projection);
# the client reverts that turn: Codex holds its framing only, and the next
# turn must project the engine's assembly again (not take the mirror's
# history for what Codex holds).
async def test_a_client_revert_of_the_rebuild_s_turn_leaves_the_ledger_empty(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "Z1 alpha")
        await run.turn_ok(tid, "Z2 beta")
        t3 = await run.turn_ok(tid, "Z3")  # rebuild: Codex holds Z3 only
        assert [t["id"] for t in run.store_turns(tid)] == [t3]
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t3})
        await _idle(run, tid)
        assert run.session(tid).held == []
        await run.turn_ok(tid, "Z5")
        seen = run.seen(tid)[-1]
    context = json.dumps(seen.get("additionalContext"))
    assert "SUMMARY of the 2 earliest messages" in context and "Z2 beta" in context, "the model would see nothing before Z5"


# A fork's mirror keeps its parent's keys for the turns it inherited: a client
# revert on the fork, before one of them, is followed all the same.
async def test_a_client_revert_on_a_fork_before_an_inherited_turn_is_followed(tmp_path):
    async with modes_sidecar(tmp_path, identity()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "P1")
        t2 = await run.turn_ok(tid, "P2")
        fid = (await run.request("thread/fork", {"threadId": tid}))["result"]["thread"]["id"]
        await run.settle_thread(fid)
        await run.turn_ok(fid, "F3")
        assert "result" in await run.request("thread/revert", {"threadId": fid, "beforeTurnId": t2})
        await _idle(run, fid)
        f4 = await run.turn_ok(fid, "F4")
        texts = _texts(run.session(fid).mirror.messages())
    assert [t["id"] for t in run.store_turns(fid)] == [t1, f4]
    assert [t for t in texts if t[:1] in "PF" and t[1:].isdigit()] == ["P1", "F4"], texts


# ...and a fork of that fork, before an inherited turn, is cut there.
async def test_a_fork_of_a_fork_before_an_inherited_turn_is_cut_there(tmp_path):
    async with modes_sidecar(tmp_path, identity()) as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "P1")
        t2 = await run.turn_ok(tid, "P2")
        b = (await run.request("thread/fork", {"threadId": tid}))["result"]["thread"]["id"]
        await run.settle_thread(b)
        c = (await run.request("thread/fork", {"threadId": b, "beforeTurnId": t2}))["result"]["thread"]["id"]
        await run.settle_thread(c)
        texts = _texts(run.session(c).mirror.messages())
    assert "P1" in texts and "P2" not in texts, texts


# While a rebuild's own turn runs, the ledger lists no turn yet: a client
# revert into the archive goes to Codex before that running turn.
async def test_a_revert_into_the_archive_while_the_rebuild_s_turn_runs(tmp_path):
    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "Z1")
        t2 = await run.turn_ok(tid, "Z2")
        rid3, line3 = run.turn_start_line(tid, "Z3 HOLD")  # rebuild: Codex forgets Z1, Z2
        await run.send(line3)
        t3 = (await run.wait_response(rid3))["result"]["turn"]["id"]
        reverted = await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
        await _idle(run, tid)
        read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
    assert "result" in reverted, reverted
    assert run.received("thread/revert")[-1]["params"]["beforeTurnId"] == t3
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1]


# A restart follows a pending intent while the client reverts again: the new
# revert is not lost when the old follow ends.
async def test_a_new_revert_during_a_restart_s_follow_is_followed_too(tmp_path, monkeypatch):
    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "C1")
        t2 = await run.turn_ok(tid, "C2")
        await run.session(tid).slot.acquire()  # the forget waits: killed before it follows
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t2})
    path = archive_path(tmp_path / "state", tid)
    assert TurnArchive(path).pending_forget() == (t2, False)
    real = TurnArchive.forget_from
    following = []

    def slow(self, turn_id):
        following.append(turn_id)
        time.sleep(0.5)  # the opening's follow is under way (a worker thread)
        return real(self, turn_id)

    monkeypatch.setattr(TurnArchive, "forget_from", slow)
    async with modes_sidecar(tmp_path, identity(), name="two") as run2:
        rid = run2.new_id()
        await run2.send(frame({"id": rid, "method": "thread/resume", "params": {"threadId": tid}}))
        assert "result" in await run2.wait_response(rid)
        await wait_until(lambda: following, what="the opening's follow")
        assert "result" in await run2.request("thread/revert", {"threadId": tid, "beforeTurnId": t1})
        await _idle(run2, tid)
        texts = _texts(run2.session(tid).mirror.messages())
    assert run2.store_turns(tid) == []
    assert not any(t.startswith("C") for t in texts), texts
    assert TurnArchive(path).pending_forget() is None


# epoch mode: the client reverts the rebuild's own turn. Codex is back at its
# framing and holds no epoch, so the next turn (same epoch) still projects
# the assembly; and so does the first turn after a restart.
async def test_after_a_revert_of_the_rebuild_s_turn_epoch_mode_projects_again(tmp_path):

    async with modes_sidecar(tmp_path, epochs(per=4), mode="auto", name="one") as run:
        tid = await run.start_thread()
        await run.turn_ok(tid, "E1 alpha")
        await run.turn_ok(tid, "E2 beta")
        t3 = await run.turn_ok(tid, "E3")  # epoch e1: rebuild, Codex holds E3 only
        assert [t["id"] for t in run.store_turns(tid)] == [t3]
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t3})
        await _idle(run, tid)
    async with modes_sidecar(tmp_path, epochs(per=4), mode="auto", name="two") as run2:  # a restart
        await run2.resume_thread(tid)
        await run2.turn_ok(tid, "E5")
        seen = run2.seen(tid)[-1]
    context = context_of(seen) or ""
    assert seen["held"] == [] and "E1 alpha" in context and "E2 beta" in context, "the model would see nothing before E5"


# A client revert Codex never answers: the client's later requests on the
# thread wait no longer than a turn/start would (previous_turn_wait), and
# once its gate expires later turns no longer wait for its answer.
async def test_a_client_revert_never_answered_holds_the_thread_no_longer_than_its_gate(tmp_path):
    from sidecar.lifecycle import LifecycleOptions

    options = LifecycleOptions(engine_deadline=5.0, projection_mode="delta", stale_floor_chars=0, previous_turn_wait=0.5)
    async with modes_sidecar(tmp_path, identity(), options=options, script={"revertNoAnswer": True}) as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "V1")
        await run.send(frame({"id": run.new_id(), "method": "thread/revert", "params": {"threadId": tid, "beforeTurnId": t1}}))
        await wait_until(lambda: run.session(tid).reverts_unanswered == 1, what="the revert counted")
        with trio.fail_after(20):
            read = await run.request("thread/read", {"threadId": tid, "includeTurns": True})
        await wait_until(lambda: run.session(tid).reverts_unanswered == 0, what="the revert given up")
        assert run.session(tid).reverts_answered.is_set()
        await run.turn_ok(tid, "V2")
    assert [t["id"] for t in read["result"]["thread"]["turns"]] == [t1]


# Killed after Codex carried out the client's revert, before the sidecar read
# its answer (the answer hook never ran): the record written before the
# request went tells the next opening to ask Codex, which no longer has the
# turn, so the mirror follows before any turn assembles.
async def test_a_kill_before_a_client_revert_s_answer_is_read_is_followed_on_restart(tmp_path, monkeypatch):
    tid, t1, t2 = await _revert_answer_lost(tmp_path, monkeypatch)
    archive = TurnArchive(archive_path(tmp_path / "state", tid))
    assert archive.pending_revert() == (t2, []) and archive.pending_forget() is None
    engine = identity()
    async with modes_sidecar(tmp_path, engine, name="two") as run2:
        await run2.resume_thread(tid)
        t3 = await run2.turn_ok(tid, "K3")
        texts = _texts(run2.session(tid).mirror.messages())
    assert [t["id"] for t in run2.store_turns(tid)] == [t1, t3]
    assert not any(t.startswith("K2") for t in _texts(calls_for(engine, "assemble", tid)[0].messages))
    assert [t for t in texts if t.startswith("K")] == ["K1", "K3"]
    assert archive.pending_revert() is None and archive.pending_forget() is None


# The same record, but Codex never got the revert (killed before it went):
# Codex still has the turn, so nothing is cut, and the record is closed.
async def test_a_client_revert_that_never_reached_codex_cuts_nothing_on_restart(tmp_path):
    async with modes_sidecar(tmp_path, identity(), name="one") as run:
        tid = await run.start_thread()
        t1 = await run.turn_ok(tid, "N1")
        t2 = await run.turn_ok(tid, "N2")
    archive = TurnArchive(archive_path(tmp_path / "state", tid))
    archive.begin_revert(t2)  # what the request hook writes before forwarding
    engine = identity()
    async with modes_sidecar(tmp_path, engine, name="two") as run2:
        await run2.resume_thread(tid)
        t3 = await run2.turn_ok(tid, "N3")
        texts = _texts(run2.session(tid).mirror.messages())
    assert [t["id"] for t in run2.store_turns(tid)] == [t1, t2, t3]
    assert [t for t in texts if t.startswith("N")] == ["N1", "N2", "N3"]
    assert archive.pending_revert() is None and b'"revertRefused"' in archive.path.read_bytes()


# ...and when a turn ran on the thread without this state dir after the
# kill, Codex's newest turn is one the archive never saw: the answer is
# still read off Codex's list (the reverted turn is gone, an earlier one is there).
async def test_a_lost_revert_answer_is_settled_past_turns_the_archive_never_saw(tmp_path, monkeypatch):
    tid, t1, t2 = await _revert_answer_lost(tmp_path, monkeypatch)
    async with modes_sidecar(tmp_path, identity(), name="elsewhere", state="other-state") as other:
        await other.resume_thread(tid)
        t3 = await other.turn_ok(tid, "K3")  # run without this state dir
    async with modes_sidecar(tmp_path, identity(), name="two") as run2:
        await run2.resume_thread(tid)
        t4 = await run2.turn_ok(tid, "K4")
        texts = _texts(run2.session(tid).mirror.messages())
    assert [t["id"] for t in run2.store_turns(tid)] == [t1, t3, t4]
    assert [t for t in texts if t.startswith("K")] == ["K1", "K3", "K4"], texts
    assert TurnArchive(archive_path(tmp_path / "state", tid)).pending_revert() is None


# A client revert to a turn Codex still holds, in a thread rebuilt before:
# Codex holds the rebuild's projection and the turns kept, which is the
# ledger recorded after the last kept turn, so the next turn needs no
# rebuild (no revert, no lost prompt cache) and projects nothing again.
async def test_a_client_revert_after_a_rebuild_restores_the_ledger_of_the_last_kept_turn(tmp_path):

    async with modes_sidecar(tmp_path, summarising_once()) as run:
        tid, (_, _, t3, t4) = await four_turns_rebuilt_at_the_third(run, "R")  # Codex holds R3 (+ summary), R4
        t5 = await run.turn_ok(tid, "R5")
        assert "result" in await run.request("thread/revert", {"threadId": tid, "beforeTurnId": t5})
        await _idle(run, tid)
        t6 = await run.turn_ok(tid, "R6")
        seen = run.seen(tid)[-1]
    assert [t["id"] for t in run.store_turns(tid)] == [t3, t4, t6]
    assert [r["rebuilt"] for r in inspect_records(run, tid)] == [False, False, True, False, False, False]
    assert [h["turnId"] for h in seen["held"]] == [t3, t4] and context_of(seen) is None
    assert len(run.received("thread/revert")) == 2  # the rebuild's and the client's
